"""Play whole market episodes: the policy under test in lab 0, the world's archetypes in the
other seats."""

from __future__ import annotations

import random

from env.market.env import MarketEnv
from env.market.players import Counterpart, MarketPlayer

MAX_STEPS = 2000  # far above any episode's length (rounds x labs x actions per turn)


def seat_rng(task: str, seed: int, lab: int) -> random.Random:
    return random.Random(f"market-player/{task}/{seed}/{lab}")


def seat_players(env: MarketEnv, policy: MarketPlayer | None, counterparts: str | None = None) -> list:
    """Players for a reset ``env``: ``policy`` in lab 0 (None: nobody, e.g. a person), each other lab
    its world archetype (or ``counterparts``, one archetype for all, which the world then records),
    each reset with its seeded rng."""
    w = env.world
    players: list[MarketPlayer | None] = []
    for i, lab in enumerate(w.labs):
        if i and counterparts:
            lab.archetype = counterparts
        player = policy if i == 0 else Counterpart(lab.archetype)
        if player is not None:
            player.reset(env.observe(i, consume_events=False), seat_rng(w.task.name, w.seed, i))
        players.append(player)
    return players


def play_market(task: str, seed: int, policy: MarketPlayer, env: MarketEnv | None = None,
                counterparts: str | None = None) -> MarketEnv:
    """Play one episode to the end and return the finished environment (outcomes, transcript)."""
    env = env or MarketEnv()
    env.reset(task, seed)
    players = seat_players(env, policy, counterparts)
    for _ in range(MAX_STEPS):
        if env.done:
            return env
        lab = env.to_move
        env.step(players[lab].act(env.observe(lab)))
    raise RuntimeError(f"episode {task}/{seed} did not end in {MAX_STEPS} steps")
