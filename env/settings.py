"""Settings every game checks the same way, with errors that say what to change."""

from __future__ import annotations

MAX_SEED = 2**63 - 1


class SettingsError(ValueError):
    """Settings a game cannot start with; the message says what to change."""


def check_seed(seed) -> int:
    """A whole number from 0 to ``MAX_SEED`` (a float that is whole, as JSON clients send, is taken)."""
    if isinstance(seed, float) and seed.is_integer():
        seed = int(seed)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise SettingsError(f"seed must be a whole number from 0 to {MAX_SEED}; got {seed!r}")
    return seed


def check_choice(value, options, what: str):
    """``value`` if it is one of ``options``, else an error listing them."""
    if not isinstance(value, str) or value not in options:
        raise SettingsError(f"unknown {what} {str(value)[:40]!r}; choose from {', '.join(options)}")
    return value
