"""CTranslate2: generation on an inference engine made for CPUs, beside ``TransformersBackend``.

The model is exported with CTranslate2's own ``TransformersConverter`` from the weights as they are in
memory (a LoRA adapter merged in first), into ``.cache/ct2/<content hash>``: the same weights are
converted once, and a policy whose weights changed (an RL step) gets a new folder. Supported: every
architecture CTranslate2 converts (Llama, so SmolLM2; Qwen3, so the tiny model; Mistral, Qwen2, Gemma,
Phi, ...); anything else, or CTranslate2 not installed, is one clear ``EngineUnavailable``.

``CTranslate2Backend.generate_ids`` is the token interface of the other backends: prompts of token ids
in, the generated ids out (up to and including the first stop id). It samples token ids only: a trainer
computes log-probs in its own forward (as TRL does with vLLM), so none are returned. fp32 weights give
transformers' greedy tokens (tested); ``int8`` quantizes them at load.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

from training.common.provenance import REPO_ROOT
from training.engine.backends import SamplingConfig
from training.engine.batching import Completion
from training.engine.export import EngineUnavailable, weights_hash  # noqa: F401 - the names callers import from here

CACHE = Path(os.environ.get("HAGGLE_CT2_CACHE", REPO_ROOT / ".cache" / "ct2"))
COMPUTE_TYPES = ("float32", "int8", "int8_float32")
_EXPORT_LOCK = threading.Lock()


def _ctranslate2():
    try:
        import ctranslate2  # noqa: PLC0415
    except ImportError as exc:
        raise EngineUnavailable("the CTranslate2 engine needs `pip install ctranslate2==4.8.5` (optional); "
                                "the transformers backend works without it") from exc
    return ctranslate2


def export(model, tokenizer, cache: Path | None = None) -> Path:
    """The CTranslate2 folder of ``model``'s current weights (fp32), converted on first use."""
    ct2 = _ctranslate2()
    arch = type(model.config).__name__
    if arch not in ct2.converters.transformers._MODEL_LOADERS:
        raise EngineUnavailable(f"CTranslate2 cannot convert a {arch} model; use the transformers backend")
    cache = Path(cache or CACHE)
    folder = cache / weights_hash(model)[:20]
    with _EXPORT_LOCK:
        if (folder / "model.bin").is_file():
            return folder
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            hf = Path(tmp) / "hf"
            model.save_pretrained(hf, safe_serialization=True)
            tokenizer.save_pretrained(hf)
            out = Path(tmp) / "ct2"
            ct2.converters.TransformersConverter(str(hf), low_cpu_mem_usage=True).convert(str(out), force=True)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(out, folder)  # atomic: a half-written folder is never taken for an export
    return folder


class CTranslate2Backend:
    """``generate_ids`` on a CTranslate2 ``Generator`` of the model's weights (exported on construction)."""

    kind = "ctranslate2"
    prefix_cache = False
    listener = None  # ``listener(row, token_id)``: hears every token when a call passes no ``on_token`` (streaming)

    def __init__(self, model, tokenizer, sampling: SamplingConfig | None = None, compute_type: str = "float32",
                 intra_threads: int = 0, cache: Path | None = None, max_batch_size: int = 0):
        _ctranslate2()  # a missing engine fails here, before any export
        if compute_type not in COMPUTE_TYPES:
            raise ValueError(f"compute_type must be one of {', '.join(COMPUTE_TYPES)}, got {compute_type!r}")
        self.tokenizer, self.sampling, self.compute_type = tokenizer, sampling or SamplingConfig(), compute_type
        self.model = model  # transformers' copy: the context length, and what an RL trainer updates
        self.intra_threads = intra_threads or os.cpu_count() or 1
        self.folder = export(model, tokenizer, cache)
        self.generator = self._generator()
        # CTranslate2 forwards a batch's prompts at once only up to the shortest one; the rest of each prompt
        # goes through the decoding loop a token a step. ``max_batch_size`` sorts prompts by length and runs
        # them in chunks of that many (0: one batch), so prompts of similar length share a forward.
        self.max_batch_size = max_batch_size
        self.calls = 0
        self.forward_seconds = 0.0

    def refresh(self) -> bool:
        """Re-export when the model's weights changed (after a training step); True when they had."""
        folder = export(self.model, self.tokenizer, self.folder.parent)
        if folder == self.folder:
            return False
        self.folder = folder
        self.generator = self._generator()
        return True

    def _generator(self):
        return _ctranslate2().Generator(str(self.folder), device="cpu", compute_type=self.compute_type,
                                        inter_threads=1, intra_threads=self.intra_threads)

    def generate_ids(self, prompts: list[list[int]], max_new_tokens: int, stop_ids: list[int],
                     on_token=None) -> list[Completion]:
        """Generate for a batch of token prompts; ``on_token(row, token_id)`` (optional) hears each token as it
        is written (a reply streamed while it is written)."""
        ct2 = _ctranslate2()
        s = self.sampling
        on_token = on_token or self.listener
        ct2.set_random_seed(s.seed + self.calls)
        self.calls += 1
        greedy = s.temperature == 0
        options = dict(max_batch_size=self.max_batch_size, max_length=max_new_tokens, end_token=list(stop_ids), return_end_token=True,
                       include_prompt_in_result=False, sampling_topk=1 if greedy else (s.top_k or 0),
                       sampling_topp=1.0 if greedy else s.top_p, sampling_temperature=1.0 if greedy else s.temperature)
        if on_token is not None:
            options["callback"] = lambda step: on_token(step.batch_id, step.token_id) and False
        tokens = [self.tokenizer.convert_ids_to_tokens(list(p)) for p in prompts]
        results = self.generator.generate_batch(tokens, **options)
        stops, out = set(stop_ids), []
        for r in results:
            ids = list(r.sequences_ids[0])
            end = next((j for j, t in enumerate(ids) if t in stops), None)
            out.append(Completion(ids if end is None else ids[: end + 1], None, end is not None))
        return out
