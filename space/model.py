"""The trained model as a player in the Space: loaded once, on first use, shared by all games.

``HAGGLE_MODEL`` names a larger model (a local folder or a Hub id, e.g. a GPU Space's
checkpoint); without it the shipped tiny checkpoint plays, offline on CPU. Generation is
serialized by one lock (the model and its caches are shared), and runs under ``@spaces.GPU``
so a ZeroGPU Space gives it a GPU; elsewhere that decorator does nothing.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import spaces

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "artifacts" / "checkpoints" / "grpo-tiny"
ENV_VAR = "HAGGLE_MODEL"
# the GPU market's trained lab: a folder or Hub id in HAGGLE_MARKET_MODEL, else the shipped adapter when there is one
MARKET_SHIPPED = ROOT / "artifacts" / "checkpoints" / "grpo-smollm2-market"
MARKET_ENV_VAR = "HAGGLE_MARKET_MODEL"

_lock = threading.Lock()
_loaded: dict = {}


def model_path() -> str:
    return os.environ.get(ENV_VAR) or str(SHIPPED)


def market_model_path() -> str | None:
    """The market lab model (None when neither the variable nor a shipped adapter names one)."""
    return os.environ.get(MARKET_ENV_VAR) or (str(MARKET_SHIPPED) if MARKET_SHIPPED.is_dir() else None)


def model_label(path: str | None = None) -> str:
    path = path or model_path()
    return Path(path).name if Path(path).exists() else path


def model_roles() -> list[str]:
    """The bilateral roles the model was trained for (its lineage; a model without one is taken
    for a buyer, the role every Haggle script trains by default)."""
    from training.common.provenance import read_lineage, trained_roles  # noqa: PLC0415

    path = model_path()
    roles = [r for r in trained_roles(read_lineage(path) if Path(path).is_dir() else None) if r in ("buyer", "seller")]
    return roles or ["buyer"]


def _backend(path: str | None = None):
    """The shared backend of the model at ``path`` (the model seat's by default), loaded on first use."""
    path = path or model_path()
    if path not in _loaded:
        from training.engine.backends import SamplingConfig, TransformersBackend  # noqa: PLC0415
        from training.engine.models import load_model  # noqa: PLC0415

        model, tokenizer = load_model(path)
        # Greedy, as the headline evaluation rows (artifacts/eval_results.json, "sampling"): the Space
        # plays the model that was evaluated, and a game replays from its seed.
        _loaded[path] = TransformersBackend(model, tokenizer, SamplingConfig(temperature=0.0))
    return _loaded[path]


@spaces.GPU
def _generate(player, obs) -> str:
    return player.act(obs)


class ModelSeat:
    """A ``Player`` for one seat of one game, backed by the shared model."""

    def __init__(self, role: str, reasoning_mode: str):
        from training.engine.rollout import LLMAgent  # noqa: PLC0415
        from training.games.bargain.rollout import LLMPlayer  # noqa: PLC0415

        with _lock:
            agent = LLMAgent(_backend(), reasoning_mode, name=model_label())
        self.player = LLMPlayer(agent, role)
        self.role, self.name = role, agent.name

    def reset(self, obs, rng=None) -> None:
        self.player.reset(obs, rng)

    def act(self, obs) -> str:
        with _lock:
            return _generate(self.player, obs)


def load_seat(role: str, reasoning_mode: str) -> ModelSeat:
    return ModelSeat(role, reasoning_mode)


class MarketModelLab:
    """A ``MarketPlayer`` for lab 0 of one market game, backed by the shared market model (greedy)."""

    def __init__(self, reasoning_mode: str = "option_a"):
        from training.engine.rollout import LLMAgent  # noqa: PLC0415
        from training.games.market.rollout import LLMLab  # noqa: PLC0415

        path = market_model_path()
        if path is None:
            raise ValueError(f"no trained market model here: set {MARKET_ENV_VAR} to a checkpoint folder or Hub id")
        with _lock:
            agent = LLMAgent(_backend(path), reasoning_mode, name=model_label(path))
        self.player, self.name = LLMLab(agent), agent.name

    def reset(self, obs, rng) -> None:
        self.player.reset(obs, rng)

    def after(self, step) -> None:
        self.player.after(step)

    def act(self, obs) -> str:
        with _lock:
            return _generate(self.player, obs)
