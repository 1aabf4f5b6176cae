"""Which engine generates, per use, chosen by measurement.

``benchmarks/engines.py`` times every engine on this machine at batch 1 (one reply as the Space's model
seat meets it: the game's previous turn just answered) and at batch 32 (evaluations, rollouts) and counts
how many greedy rows equal transformers fp32's token for token. ``auto`` takes, for the batch size at hand,
the fastest engine whose rows were all equal (so a result never depends on the engine); without a
measurement, or without the engine installed, transformers ``generate`` (the reference and the fallback).
``$HAGGLE_ENGINE`` (``transformers``, ``llamacpp`` or ``ctranslate2``) overrides the choice.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from training.common.provenance import REPO_ROOT

ENGINES = ("auto", "transformers", "llamacpp", "ctranslate2")
ENV_VAR = "HAGGLE_ENGINE"
MEASURED = REPO_ROOT / "artifacts" / "benchmarks" / "engines.json"
log = logging.getLogger(__name__)


def measured_engine(batch: int, path: Path = MEASURED) -> dict:
    """The measured choice for ``batch`` rows: ``{"engine", "compute_type", "threads", "chunk", "why"}``."""
    fallback = {"engine": "transformers", "why": "no measurement"}
    try:
        results = json.loads(Path(path).read_text())["results"]
    except (OSError, ValueError, KeyError):
        return fallback
    # exact: every compared row equal, and tokens that do not depend on which rows share a call (llama.cpp's batched
    # decoding matched SmolLM2's rows, yet flipped near-ties on the tiny model's: tests/test_engines.py)
    rows = [e for e in results.get("engines", []) if e.get("rows_compared")
            and e.get("batch_invariant", not e["engine"].endswith(" batched"))
            and e.get("greedy_rows_equal_to_transformers_fp32") == e["rows_compared"]]
    if batch <= 1:  # one reply as the seat meets it (the game's last turn answered just before), where measured
        key = "batch1_seat_reply_s_median" if rows and all("batch1_seat_reply_s_median" in r for r in rows) \
            else "batch1_reply_s_median"
        best = min
    else:
        key, best = next((k for k in (rows[0] if rows else {}) if k.startswith("batch") and
                          k.endswith("_tokens_per_s_median") and not k.startswith("batch1_")), None), max
    rows = [r for r in rows if key and isinstance(r.get(key), (int, float))]
    if not rows:
        return fallback
    top = best(rows, key=lambda r: r[key])
    spec = {"engine": top["engine"].split()[0], "why": f"fastest exact engine at batch {batch}: {top['engine']} "
                                                      f"({key} {top[key]:.3g}, {path.name})"}
    for part in top["engine"].split()[1:]:
        if part in ("float32", "bfloat16", "int8", "int8_float32"):
            spec["compute_type"] = part
        elif part.startswith("threads="):
            spec["threads"] = int(part.split("=")[1])
    spec["batched"] = top["engine"].endswith(" batched")
    if " chunks of " in top["engine"]:
        spec["chunk"] = int(top["engine"].rsplit(" ", 1)[1])
    return spec


def _chosen(engine: str, batch: int) -> tuple[str, dict]:
    """The engine asked for (``$HAGGLE_ENGINE`` first) and its spec: the measured one for ``batch`` rows when
    ``auto``."""
    engine = os.environ.get(ENV_VAR) or engine
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    return engine, measured_engine(batch) if engine == "auto" else {"engine": engine}


def generation_backend(model, tokenizer, sampling=None, engine: str = "auto", batch: int = 1):
    """A token backend for a model that only generates: the engine named, or the measured one for
    ``batch`` rows (``auto``); transformers when the engine cannot run here (said once in the log)."""
    from training.engine.backends import TransformersBackend  # noqa: PLC0415

    _, spec = _chosen(engine, batch)
    if spec["engine"] == "llamacpp" and model.device.type == "cpu":
        from training.engine.export import EngineUnavailable  # noqa: PLC0415
        from training.engine.llamacpp import LlamaCppBackend  # noqa: PLC0415
        try:
            return LlamaCppBackend(model, tokenizer, sampling, spec.get("compute_type", "float32"),
                                   spec.get("threads", 0), slots=min(max(4, batch), 32),
                                   batched=spec.get("batched", False))
        except EngineUnavailable as exc:
            log.warning("generating with transformers: %s", exc)
    if spec["engine"] == "ctranslate2" and model.device.type == "cpu":
        from training.engine.ct2 import CTranslate2Backend, EngineUnavailable  # noqa: PLC0415
        try:
            return CTranslate2Backend(model, tokenizer, sampling, spec.get("compute_type", "float32"),
                                      spec.get("threads", 0), max_batch_size=spec.get("chunk", 0))
        except EngineUnavailable as exc:
            log.warning("generating with transformers: %s", exc)
    return TransformersBackend(model, tokenizer, sampling)


def checkpoint_backend(name: str, sampling=None, engine: str = "auto", batch: int = 1):
    """``generation_backend`` for the checkpoint ``name`` (a folder, an adapter over its base, or a model name),
    merged for generation. Where the engine chosen is llama.cpp and this checkpoint's files were exported before,
    the backend opens that GGUF with the tokenizer alone: no transformers load, no LoRA merge (seconds a start)."""
    from training.engine.models import checkpoint_key, load_model, load_tokenizer  # noqa: PLC0415

    engine, spec = _chosen(engine, batch)
    key = checkpoint_key(name) if spec["engine"] == "llamacpp" else None
    precision = spec.get("compute_type", "float32")
    if key:
        from training.engine.export import EngineUnavailable  # noqa: PLC0415
        try:
            from training.engine.llamacpp import LlamaCppBackend, recorded_export  # noqa: PLC0415
            gguf = recorded_export(key, precision)
            if gguf is not None:
                return LlamaCppBackend(None, load_tokenizer(name), sampling, precision, spec.get("threads", 0),
                                       slots=min(max(4, batch), 32), batched=spec.get("batched", False), gguf=gguf)
        except EngineUnavailable as exc:
            log.warning("generating with transformers: %s", exc)
    model, tokenizer = load_model(name, merge=True)  # it only generates: an adapter folded in
    backend = generation_backend(model, tokenizer, sampling, engine, batch)
    if key and getattr(backend, "kind", "") == "llamacpp":
        from training.engine.llamacpp import record_export  # noqa: PLC0415
        record_export(key, backend.path, precision)
    return backend
