"""The one outside shape every Haggle game has (Gymnasium's contract), and the registry of games.

``reset(seed=None, options=None)`` starts an episode and returns the view of whoever moves first;
``step(action)`` takes the move of whoever is to move and returns a result with ``observation``
(the next mover's view, or the last mover's at the end), ``reward`` (the buyer's in the bilateral
game, the acting lab's dense reward in the market), ``terminated`` (the game ended by a move),
``truncated`` (it ran out of turns or rounds) and ``info`` (for the operator, never for players).
What starts an episode is the game's own: ``options={"scenario": ...}`` for the bilateral game,
``options={"task": ...}`` for the market.

``make_env(name)`` builds a game by name: the drivers (``env.bargain.play.Match``,
``env.market.play.MarketMatch``) build theirs with it, and every caller (the served games, the
Space, the rollout engines, the evaluation) plays through a driver.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable


class LeakError(RuntimeError):
    """A prompt would show a player something only the other side may know."""


@runtime_checkable
class StepOutcome(Protocol):
    observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict


@runtime_checkable
class GameEnv(Protocol):
    def reset(self, seed: int | None = None, options: dict | None = None) -> Any: ...

    def step(self, action: Any) -> StepOutcome: ...


def _bargain(**kwargs) -> GameEnv:
    from env.bargain.env import BargainEnv
    return BargainEnv(**kwargs)


def _market(**kwargs) -> GameEnv:
    from env.market.env import MarketEnv
    return MarketEnv(**kwargs)


GAMES: dict[str, Callable[..., GameEnv]] = {"bargain": _bargain, "market": _market}


def make_env(name: str, **kwargs) -> GameEnv:
    """A new environment of game ``name`` (``bargain`` or ``market``); ``kwargs`` are the game's own
    (``max_turns`` for the bilateral game, ``judge`` for the market)."""
    if name not in GAMES:
        raise ValueError(f"unknown game {name!r}; choose from {', '.join(GAMES)}")
    return GAMES[name](**kwargs)
