"""The model side, game-agnostic: backends that generate, model loading (the tiny model, SmolLM2
from PyPI, any Hub model) and the batched conversation engine."""
