"""The GPU market for the training scripts: its adapter (``adapter.py``: episodes, expert games,
evaluation), what a model lab reads (``prompts.py``), its batched episodes (``rollout.py``) and its
evaluation options (``config.py``)."""

from training.games.market.adapter import MarketEpisode, MarketGame

__all__ = ["MarketEpisode", "MarketGame"]
