"""The bilateral game's driver: settings checked once, seats filled, play advanced to a seat.

Every caller plays through ``Match``: whole episodes (``play_episode``, the evaluation harness),
the Space (a person in one seat), the OpenEnv server (the client in one seat) and the rollout
engine (a batched model in one seat). A seat holds a scripted ``Player``, which moves by itself
when it is due, or None: a seat moved from outside through ``Match.step``.
"""

from __future__ import annotations

import random

from env.bargain.env import DEFAULT_MAX_TURNS, BargainEnv, EpisodeMetrics, StepResult
from env.bargain.players.base import Player
from env.bargain.protocol import REASONING_MODES
from env.bargain.rules import BUYER, SELLER
from env.bargain.sources import SOURCES, Scenario, get_split, resolve_source
from env.core import make_env

from env.settings import MAX_SEED, SettingsError, check_seed  # noqa: F401  (the game's settings, in one place)

MAX_TURNS_LIMIT = 20  # longest game a caller may ask for (the paper's benchmark plays 6)
SPLITS = ("train", "test", "all")


# ---------------------------------------------------------------------- settings, checked once
def check_max_turns(max_turns) -> int:
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or not 1 <= max_turns <= MAX_TURNS_LIMIT:
        raise SettingsError(f"max_turns must be a whole number from 1 to {MAX_TURNS_LIMIT}; got {max_turns!r}")
    return max_turns


def check_mode(reasoning_mode: str) -> str:
    if reasoning_mode not in REASONING_MODES:
        raise SettingsError(f"reasoning_mode must be one of {', '.join(REASONING_MODES)}; got {reasoning_mode!r}")
    return reasoning_mode


def available_sources() -> list[str]:
    """The named scenario sources present here (``amazon`` only where its data is)."""
    return [s for s in SOURCES if s == "builtin" or resolve_source("auto") == "amazon"]


def pick_scenario(source: str, split: str, product, seed: int) -> tuple[int, Scenario]:
    """Product ``product`` of a split, or one drawn from ``seed`` when ``product`` is None."""
    if source not in available_sources():
        raise SettingsError(f"unknown or unavailable scenario source {source!r}; choose from "
                            f"{', '.join(available_sources())}")
    if split not in SPLITS:
        raise SettingsError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    scenarios = get_split(source, split)
    if product is None:
        product = random.Random(seed).randrange(len(scenarios))
    if isinstance(product, bool) or not isinstance(product, int) or not 0 <= product < len(scenarios):
        raise SettingsError(f"product must be a whole number from 0 to {len(scenarios) - 1} ({split} products of "
                            f"{source}), or empty for one drawn from the seed; got {product!r}")
    return product, scenarios[product]


def player_rngs(seed: int) -> tuple[random.Random, random.Random]:
    """Independent, reproducible random streams for the buyer and the seller of an episode."""
    return random.Random(seed * 4 + 1), random.Random(seed * 4 + 2)


# ---------------------------------------------------------------------- the driver
class Match:
    """One episode between two seats. Scripted seats are reset with their seeded streams
    (``rngs``, also what a caller resets a player of its own with) and move when due."""

    def __init__(self, scenario: Scenario, buyer: Player | None, seller: Player | None, seed: int,
                 max_turns: int = DEFAULT_MAX_TURNS, env: BargainEnv | None = None):
        self.env = env if env is not None and env.max_turns == max_turns else make_env("bargain", max_turns=max_turns)
        self.env.reset(seed, {"scenario": scenario})
        self.scenario, self.seed = scenario, seed
        self.seats = {BUYER: buyer, SELLER: seller}
        self.rngs = dict(zip((BUYER, SELLER), player_rngs(seed)))
        for role, player in self.seats.items():
            if player is not None:
                if player.role != role:
                    raise ValueError(f"a {player.role} cannot sit in the {role}'s seat")
                player.reset(self.env.observe(role), self.rngs[role])

    def advance(self, limit: int | None = None) -> list[StepResult]:
        """Scripted seats move until a seat moved from outside is due or the episode ends (or
        ``limit`` moves were made: a caller that shows each reply as it comes)."""
        env, results = self.env, []
        while not env.done and self.seats[env.to_move] is not None and (limit is None or len(results) < limit):
            role = env.to_move
            results.append(env.step(self.seats[role].act(env.observe(role))))
        return results

    def step(self, reply: object) -> StepResult:
        """The move of the seat that is due, given from outside (a person, a client, a model)."""
        if self.env.done:
            raise RuntimeError("the episode is over")
        if self.seats[self.env.to_move] is not None:
            raise RuntimeError(f"the {self.env.to_move} is a seated player: advance() moves it")
        return self.env.step(reply)

    def outside_role(self) -> str | None:
        """The role moved from outside (None when both seats are scripted)."""
        return next((r for r in (BUYER, SELLER) if self.seats[r] is None), None)


def play_episode(scenario: Scenario, buyer: Player, seller: Player, seed: int,
                 max_turns: int = DEFAULT_MAX_TURNS, env: BargainEnv | None = None) -> BargainEnv:
    """Play one episode to the end and return the finished environment (metrics, transcript)."""
    if buyer.role != BUYER or seller.role != SELLER:
        raise ValueError(f"need a buyer and a seller, got {buyer.role!r} and {seller.role!r}")
    match = Match(scenario, buyer, seller, seed, max_turns, env)
    match.advance()
    return match.env


def play_metrics(scenario: Scenario, buyer: Player, seller: Player, seed: int,
                 max_turns: int = DEFAULT_MAX_TURNS) -> EpisodeMetrics:
    return play_episode(scenario, buyer, seller, seed, max_turns).metrics()
