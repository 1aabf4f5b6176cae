"""The market's driver: settings checked once, seats filled, play advanced to a seat.

Every caller plays through ``MarketMatch``: whole episodes (``play_market``, the evaluation
harness), the Space (a person in lab 0), the OpenEnv server (the client in lab 0) and the market
rollout engine (a batched model in lab 0). Lab 0 holds the policy under test, or None: a seat
moved from outside through ``MarketMatch.step``. The other labs are the world's archetypes (or
one archetype for all, ``counterparts``), each reset with its own seeded stream.
"""

from __future__ import annotations

import random
from typing import Iterator

from env.core import make_env
from env.market.env import MarketEnv, MarketStep
from env.market.judge import Judge
from env.market.players import Counterpart, MarketPlayer
from env.market.world import ARCHETYPES
from env.settings import SettingsError

MAX_STEPS = 2000  # far above any episode's length (rounds x labs x actions per turn)
POLICY_LAB = 0


def seat_rng(task: str, seed: int, lab: int) -> random.Random:
    return random.Random(f"market-player/{task}/{seed}/{lab}")


def check_counterparts(counterparts: str | None) -> str | None:
    """One archetype for every other lab, or None for each lab's own (the world's)."""
    if counterparts is not None and counterparts not in ARCHETYPES:
        raise SettingsError(f"counterparts must be one of {', '.join(ARCHETYPES)} (or none: the world's own); "
                            f"got {str(counterparts)[:40]!r}")
    return counterparts


class MarketMatch:
    """One market episode: ``policy`` in lab 0 (None: moved from outside), a counterpart in every
    other lab. ``archetypes`` are the labs' archetypes as played (the world's record is left as
    drawn)."""

    def __init__(self, task: str, seed: int, policy: MarketPlayer | None, counterparts: str | None = None,
                 env: MarketEnv | None = None, judge: Judge | None = None):
        check_counterparts(counterparts)
        self.env = env if env is not None else make_env("market", judge=judge)
        self.env.reset(seed, {"task": task})  # checks the task and the seed (``make_world``)
        self.task, self.seed, self.counterparts = task, seed, counterparts
        labs = self.env.world.labs
        self.archetypes = ["policy"] + [counterparts or lab.archetype for lab in labs[1:]]
        self.players: list[MarketPlayer | None] = [policy] + [Counterpart(a) for a in self.archetypes[1:]]
        for lab, player in enumerate(self.players):
            if player is not None:
                player.reset(self.env.observe(lab), seat_rng(task, seed, lab))

    def moves(self) -> Iterator[MarketStep]:
        """Seated labs act until a seat moved from outside is due or the episode ends; yields each
        step's result as it happens (a caller may show a game round by round)."""
        env, view = self.env, None
        for _ in range(MAX_STEPS):
            if env.done or self.players[env.to_move] is None:
                return
            lab = env.to_move
            player = self.players[lab]
            result = env.step(player.act(env.observe(lab) if view is None else view))
            if (after := getattr(player, "after", None)) is not None:  # a player told its action's result
                after(result)
            view = result.observation  # the next mover's view, taken once
            yield result
        raise RuntimeError(f"episode {self.task}/{self.seed} did not end in {MAX_STEPS} steps")

    def advance(self) -> list[MarketStep]:
        return list(self.moves())

    def step(self, action: str | dict) -> MarketStep:
        """The action of the lab moved from outside (lab 0 with no policy)."""
        if self.env.done:
            raise RuntimeError("the episode is over")
        if self.players[self.env.to_move] is not None:
            raise RuntimeError(f"lab{self.env.to_move} is a seated player: advance() moves it")
        return self.env.step(action)


def play_market(task: str, seed: int, policy: MarketPlayer, env: MarketEnv | None = None,
                counterparts: str | None = None) -> MarketEnv:
    """Play one episode to the end and return the finished environment (outcomes, transcript)."""
    match = MarketMatch(task, seed, policy, counterparts, env)
    match.advance()
    return match.env


def replay_market(task: str, seed: int, actions: list, counterparts: str | None = None) -> MarketEnv:
    """Play an episode again from lab 0's recorded actions, exactly as they were handed to the environment
    (a model's raw replies included). The other labs are seeded by task and seed, so the same actions give the
    same game; actions that run out before the end, or are left over after it, are refused."""
    match = MarketMatch(task, seed, None, counterparts)
    match.advance()
    for k, action in enumerate(actions):
        if match.env.done:
            raise ValueError(f"replay {task}/{seed}: the episode ended after {k} of {len(actions)} recorded actions")
        match.step(action)
        match.advance()
    if not match.env.done:
        raise ValueError(f"replay {task}/{seed}: {len(actions)} recorded actions did not reach the end")
    return match.env
