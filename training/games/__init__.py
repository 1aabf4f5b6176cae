"""One small adapter per game for the training scripts: which episodes a run plays (typed
records), how an episode is played by a policy, what a step's statistics are, the expert games
SFT clones, how the game is evaluated, and the game's defaults. ``sft.py``, ``grpo.py``,
``sdpo.py`` and ``evaluate.py`` pick the adapter by ``--env`` from ``GAMES`` and never branch on
the game.
"""

from __future__ import annotations

from training.games.bargain import BargainGame
from training.games.market import MarketGame

GAMES = {game.name: game for game in (BargainGame, MarketGame)}


def game_for(script):
    """The adapter for ``script.env`` (already checked against ``GAMES`` by the script's config)."""
    return GAMES[script.env](script)


def check_env(env: str) -> str:
    if env not in GAMES:
        raise ValueError(f"--env must be one of {', '.join(GAMES)}, got {env!r}")
    return env
