"""The bilateral negotiation for the training scripts: its adapter (``adapter.py``: episodes, expert
games, evaluation), what a model reads (``prompts.py``), its batched episodes (``rollout.py``), its
evaluation options (``config.py``) and the game as TRL tools (``tools.py``)."""

from training.games.bargain.adapter import (
    BargainEpisode,
    BargainGame,
    headline_checks,
    target_checks,
    training_products,
)

__all__ = ["BargainEpisode", "BargainGame", "headline_checks", "target_checks", "training_products"]
