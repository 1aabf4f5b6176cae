"""The player interface shared by scripted and model players.

A player turns its own view (``Observation``) into protocol text, exactly as a language
model would, so any buyer can face any seller. Randomness comes only from the
``random.Random`` the runner hands to ``reset`` (derived from the episode seed).
"""

from __future__ import annotations

import math
import random
from typing import Protocol, runtime_checkable

from env.bargain.env import Observation
from env.bargain.protocol import Action, compose_reply, format_price


@runtime_checkable
class Player(Protocol):
    name: str
    role: str

    def reset(self, obs: Observation, rng: random.Random) -> None: ...

    def act(self, obs: Observation) -> str: ...


class ScriptedPlayer:
    """Base for rule-based players: subclasses implement ``decide`` -> (thought, talk, action)."""

    name = "scripted"
    role = ""
    talk_lines: dict[str, tuple[str, ...]] = {}

    def __init__(self, reasoning_mode: str = "option_a"):
        if reasoning_mode not in ("option_a", "option_b"):
            raise ValueError(f"reasoning_mode must be option_a or option_b, got {reasoning_mode!r}")
        self.reasoning_mode = reasoning_mode
        self.rng = random.Random(0)

    def reset(self, obs: Observation, rng: random.Random) -> None:
        self.rng = rng

    def act(self, obs: Observation) -> str:
        thought, talk, action = self.decide(obs)
        return compose_reply(thought, talk, action, self.reasoning_mode)

    def decide(self, obs: Observation) -> tuple[str, str, Action]:
        raise NotImplementedError

    def say(self, situation: str, obs: Observation, price: float | None = None) -> str:
        """A seeded choice among this player's lines for ``situation``."""
        lines = self.talk_lines.get(situation) or ("",)
        line = lines[self.rng.randrange(len(lines))] if len(lines) > 1 else lines[0]
        if "{" not in line:
            return line
        return line.format(item=_short_title(obs.title), price=format_price(price) if price is not None else "",
                           list=format_price(obs.list_price), **self.talk_keys(obs, price))

    def talk_keys(self, obs: Observation, price: float | None) -> dict:
        """More ``{name}`` fields a player's lines may use (none by default)."""
        return {}


def _short_title(title: str) -> str:
    return title if len(title) <= 40 else title[:40].rsplit(" ", 1)[0]


def nice_price(x: float, list_price: float, up: bool) -> float:
    """Round an offer the way people quote prices: whole dollars from a $50 list price, else
    cents. Buyers round down and sellers up, so rounding never crosses a budget or a cost."""
    unit = 1.0 if list_price >= 50 else 0.01
    steps = x / unit
    steps = math.ceil(steps - 1e-9) if up else math.floor(steps + 1e-9)
    return round(steps * unit, 2)
