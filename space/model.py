"""The trained model as a player in the Space: loaded once, on first use, shared by all games.

``HAGGLE_MODEL`` names the model (a local folder or a Hub id, e.g. a GPU Space's checkpoint); without it
the shipped buyer with the best held-out rows plays (``headline_checkpoint``: the tiny checkpoint, or a
SmolLM2 adapter once one scores higher over the builtin and the other source's test products), offline on CPU.
Generation is serialized by one lock (the model and its caches are shared), and runs under ``@spaces.GPU``
so a ZeroGPU Space gives it a GPU; elsewhere that decorator does nothing. A live game's move goes before
background work (a challenge's replays, run from its start under ``background()``): a visitor never waits
behind a game nobody watches. ``warm()`` loads the seat and writes a few tokens once, at start-up.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path

import spaces

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINTS = ROOT / "artifacts" / "checkpoints"
SHIPPED = CHECKPOINTS / "grpo-tiny"  # the tiny buyer: the seat when no shipped buyer has a better row
HEADLINE_FILE = "eval_results.json"  # every shipped buyer's row on the same held-out episodes
OTHER_SOURCE_FILE = "eval_generalisation.json"  # study (a): the same buyers on another source's test products
ENV_VAR = "HAGGLE_MODEL"
# the GPU market's trained lab: a folder or Hub id in HAGGLE_MARKET_MODEL, else the shipped adapter when there is one
MARKET_SHIPPED = ROOT / "artifacts" / "checkpoints" / "grpo-smollm2-market"
MARKET_ENV_VAR = "HAGGLE_MARKET_MODEL"

_loaded: dict = {}


class SeatLock:
    """One generation at a time; a waiting live move goes before any waiting background work."""

    def __init__(self):
        self._cond = threading.Condition()
        self._busy = False
        self._live_waiting = 0
        self._local = threading.local()

    @contextmanager
    def background(self):
        """Work in this block (this thread) yields the model to live moves."""
        before = getattr(self._local, "background", False)
        self._local.background = True
        try:
            yield
        finally:
            self._local.background = before

    def __enter__(self):
        background = getattr(self._local, "background", False)
        with self._cond:
            if not background:
                self._live_waiting += 1
            try:
                while self._busy or (background and self._live_waiting):
                    self._cond.wait()
            finally:
                if not background:
                    self._live_waiting -= 1
            self._busy = True
        return self

    def __exit__(self, *exc):
        with self._cond:
            self._busy = False
            self._cond.notify_all()


_lock = SeatLock()
background = _lock.background
_listening = threading.local()


@contextmanager
def streaming(listener):
    """Model moves made in this block (this thread) call ``listener(token_id)`` for each token as it is written."""
    before = getattr(_listening, "fn", None)
    _listening.fn = listener
    try:
        yield
    finally:
        _listening.fn = before


def warm(path: str | None = None, tokens: int = 4) -> str:
    """Load the seat's model (the market lab's with ``path``) and write a few tokens, so a visitor's first reply
    finds it loaded, converted for its engine and past its first-call allocations. Returns the model's label."""
    with background(), _lock:
        backend = _backend(path)
        prompt = backend.tokenizer("Hello", add_special_tokens=False)["input_ids"] or [0]
        backend.generate_ids([prompt], tokens, [])
    return model_label(path)


def model_path() -> str:
    return os.environ.get(ENV_VAR) or str(headline_checkpoint())


def headline_checkpoint() -> Path:
    """The shipped buyer the numbers put first. Of the checkpoint folders whose ``card.json`` names a buyer row
    against the seller mix in ``eval_results.json`` (every buyer on the same held-out builtin episodes, at the
    headline sampling; rows played on a subset of them do not compete), the one with the highest mean reward over
    the held-out product sources: the builtin test split and, when every competing buyer also has a seller-mix row
    in generalisation study (a) (``eval_generalisation.json``: the other source's test split, e.g. Amazon), that
    one too, so a buyer that breaks on listings from another source does not hold the seat. The tiny GRPO buyer
    when no other scores higher (or none has a row)."""
    return best_seat(seat_scores())


def best_seat(candidates: list[tuple[Path, str, list[float], float]]) -> Path:
    """The folder of the best-scoring candidate (``seat_scores``), the tiny buyer on a tie or when there is none."""
    best, best_score = SHIPPED, None
    for folder, _buyer, _scores, score in candidates:
        if best_score is None or score > best_score or (score == best_score and folder == SHIPPED):
            best, best_score = folder, score
    return best


def seat_scores() -> list[tuple[Path, str, list[float], float]]:
    """The candidates for the seat (``headline_checkpoint``'s rule): each shipped buyer's folder, its row name, its
    seller-mix reward on each product source counted, and their mean."""
    rows, other = _mix_rows(HEADLINE_FILE), _mix_rows(OTHER_SOURCE_FILE, "a_other_source")
    folders = sorted(p for p in CHECKPOINTS.iterdir() if p.is_dir()) if CHECKPOINTS.is_dir() else []
    # a model seller's card (its row is a buyer against it) never sits, nor a buyer without a shared row
    seats = [(folder, card["eval_buyer"]) for folder in folders for card in [_card(folder)]
             if card.get("eval_seller", "mix") == "mix" and card.get("eval_buyer") in rows]
    sources = [rows, other] if seats and all(buyer in other for _, buyer in seats) else [rows]
    out = []
    for folder, buyer in seats:
        scores = [source[buyer]["reward_mean"] for source in sources]
        out.append((folder, buyer, scores, sum(scores) / len(scores)))
    return out


def _mix_rows(name: str, study: str | None = None) -> dict[str, dict]:
    """The seller-mix rows of ``name`` (of ``study`` when given) that can compete for the seat, by buyer."""
    from space import figures as F  # noqa: PLC0415 - the Space's artifact reader, imported when first asked

    return {r["buyer"]: r for r in F.eval_rows(name, "mix")
            if r.get("reward_mean") is not None and not r.get("upper_bound") and not r.get("episodes_subset")
            and (study is None or r.get("study") == study)}


def _card(folder: Path) -> dict:
    import json  # noqa: PLC0415

    try:
        return json.loads((folder / "card.json").read_text())
    except (OSError, ValueError):
        return {}


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
        from training.engine.backends import SamplingConfig  # noqa: PLC0415
        from training.engine.choice import checkpoint_backend  # noqa: PLC0415

        # Greedy, as the headline evaluation rows (artifacts/eval_results.json, "sampling"): the Space
        # plays the model that was evaluated, and a game replays from its seed.
        # One reply at a time: the engine measured fastest at batch 1 among those writing transformers' tokens;
        # a restart finds the engine's export of these files and skips loading them into transformers.
        _loaded[path] = checkpoint_backend(path, SamplingConfig(temperature=0.0), batch=1)
    return _loaded[path]


@spaces.GPU
def _generate(player, obs) -> str:
    backend, listener = player.agent.backend, getattr(_listening, "fn", None)
    backend.listener = None if listener is None else (lambda row, token: listener(token))
    try:
        return player.act(obs)
    finally:
        backend.listener = None


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
