"""Scripted players and the registry that builds them by name."""

from env.players.base import Player, ScriptedPlayer
from env.players.buyers import BASELINES, BUYERS, ExpertBuyer
from env.players.sellers import PERSONAS, SELLERS, NeutralSeller

__all__ = ["Player", "ScriptedPlayer", "BUYERS", "SELLERS", "BASELINES", "PERSONAS", "ExpertBuyer",
           "NeutralSeller", "make_player"]


def make_player(role: str, name: str, reasoning_mode: str = "option_a") -> ScriptedPlayer:
    """A scripted player by role and name, e.g. ``make_player("seller", "insulting")``."""
    table = {"buyer": BUYERS, "seller": SELLERS}.get(role)
    if table is None:
        raise ValueError(f"role must be 'buyer' or 'seller', got {role!r}")
    if name not in table:
        raise ValueError(f"unknown {role} {name!r}; choose from {', '.join(table)}")
    return table[name](reasoning_mode=reasoning_mode)
