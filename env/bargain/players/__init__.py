"""Scripted players and the registry that builds them by name."""

from env.bargain.players.base import Player, ScriptedPlayer
from env.bargain.players.buyers import BASELINES, BUYERS, NAMED_BUYERS, TEACHERS, ExpertBuyer, SteadyBuyer
from env.bargain.players.sellers import ALL_SELLERS, PERSONAS, PROBES, SELLERS, NeutralSeller

__all__ = ["Player", "ScriptedPlayer", "BUYERS", "SELLERS", "PROBES", "ALL_SELLERS", "BASELINES", "PERSONAS",
           "ExpertBuyer", "SteadyBuyer", "TEACHERS", "NAMED_BUYERS", "NeutralSeller", "make_player", "parse_names"]


def parse_names(value: str, table: dict, what: str, extra: dict | None = None) -> list[str]:
    """``"all"`` (every name of ``table``) or a comma list of names from ``table`` or ``extra`` (players
    chosen only by name, such as the adversarial probe sellers); a clear error for anything else."""
    if value == "all":
        return list(table)
    known = {**table, **(extra or {})}
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"unknown {what} {', '.join(unknown) or repr(value)}; choose from all, {', '.join(known)}")
    return names


def make_player(role: str, name: str, reasoning_mode: str = "option_a") -> ScriptedPlayer:
    """A scripted player by role and name, e.g. ``make_player("seller", "insulting")``."""
    table = {"buyer": NAMED_BUYERS, "seller": ALL_SELLERS}.get(role)
    if table is None:
        raise ValueError(f"role must be 'buyer' or 'seller', got {role!r}")
    if name not in table:
        raise ValueError(f"unknown {role} {name!r}; choose from {', '.join(table)}")
    return table[name](reasoning_mode=reasoning_mode)
