"""Play whole episodes between any two players."""

from __future__ import annotations

import random

from env.bargain import DEFAULT_MAX_TURNS, BargainEnv, EpisodeMetrics
from env.players.base import Player
from env.rules import BUYER, SELLER
from env.scenarios import Scenario


def player_rngs(seed: int) -> tuple[random.Random, random.Random]:
    """Independent, reproducible random streams for the buyer and the seller of an episode."""
    return random.Random(seed * 4 + 1), random.Random(seed * 4 + 2)


def play_episode(scenario: Scenario, buyer: Player, seller: Player, seed: int,
                 max_turns: int = DEFAULT_MAX_TURNS, env: BargainEnv | None = None) -> BargainEnv:
    """Play one episode to the end and return the finished environment (metrics, transcript)."""
    if buyer.role != BUYER or seller.role != SELLER:
        raise ValueError(f"need a buyer and a seller, got {buyer.role!r} and {seller.role!r}")
    env = env if env is not None and env.max_turns == max_turns else BargainEnv(max_turns)
    obs = env.reset(scenario, seed)
    rb, rs = player_rngs(seed)
    buyer.reset(obs, rb)
    seller.reset(env.observe(SELLER), rs)
    players = {BUYER: buyer, SELLER: seller}
    while True:
        result = env.step(players[obs.role].act(obs))
        if result.done:
            return env
        obs = result.observation


def play_metrics(scenario: Scenario, buyer: Player, seller: Player, seed: int,
                 max_turns: int = DEFAULT_MAX_TURNS) -> EpisodeMetrics:
    return play_episode(scenario, buyer, seller, seed, max_turns).metrics()
