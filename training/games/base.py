"""What the game adapters share: model players by name, and ``name=path`` options."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Optional

from env.bargain.evaluation import EVAL_SEED_BASE
from env.bargain.protocol import REASONING_MODES
from training.engine.backends import SamplingConfig


def name_path(item: str, flag: str, taken) -> tuple[str, str]:
    """``name=path`` -> (name, path), refusing a malformed pair or a name a scripted player has."""
    name, sep, path = item.partition("=")
    name, path = name.strip(), path.strip()
    if not sep or not name or not path:
        raise ValueError(f"{flag} takes name=path pairs, got {item!r}")
    if name in taken:
        raise ValueError(f"model name {name!r} is taken by a scripted player")
    return name, path


def label(model: str) -> str:
    """A row label for a model given by path or id: its last path component."""
    return model.rstrip("/").rsplit("/", 1)[-1] or model


def build_agent(model: str, config, sampling: SamplingConfig, reasoning_mode: str = ""):
    """An ``LLMAgent`` for a model name, on the backend ``config`` names (``base_url``, ``backend``,
    ``device``), in ``config.reasoning_mode`` unless ``reasoning_mode`` is given."""
    from training.engine.backends import OpenAIChatBackend, VLLMBackend  # noqa: PLC0415
    from training.engine.choice import generation_backend  # noqa: PLC0415
    from training.engine.models import load_model, resolve_model_path  # noqa: PLC0415
    from training.engine.rollout import LLMAgent  # noqa: PLC0415

    if config.base_url:
        backend = OpenAIChatBackend(model, config.base_url, config.api_key_env, sampling)
    elif config.backend == "vllm":
        from transformers import AutoTokenizer  # noqa: PLC0415
        path = resolve_model_path(model)
        backend = VLLMBackend(path, AutoTokenizer.from_pretrained(path), sampling)
    else:
        m, tok = load_model(model, device=config.device or None, merge=True)  # generation only
        backend = generation_backend(m, tok, sampling, config.backend, batch=getattr(config, "batch_size", 32))
    return LLMAgent(backend, reasoning_mode or config.reasoning_mode, name=label(model))


def reward_stats(records, num_generations: int, step: int, keys: list | None = None) -> dict:
    """Reward spread of one GRPO step's episodes, and the share of groups with no spread at all.
    A group is the episodes sharing a key (the dataset row: scenario, seller and seed), wherever
    they were played; without keys, runs of ``num_generations`` in order (one process)."""
    rewards = [r.reward for r in records]
    if keys is not None:
        by_key: dict = {}
        for k, r in zip(keys, rewards):
            by_key.setdefault(k, []).append(r)
        groups = list(by_key.values())
    else:
        groups = [rewards[i: i + num_generations] for i in range(0, len(rewards), num_generations)]
    return {"step": step, "episodes": len(records),
            "reward_mean": statistics.fmean(rewards), "reward_std": statistics.pstdev(rewards),
            "reward_min": min(rewards), "reward_max": max(rewards),
            "frac_reward_zero_std": statistics.fmean(max(x) == min(x) for x in groups)}


@dataclass
class EvalArgs:
    """What every game's evaluation takes (``training/evaluate.py``; each game adds its own options)."""

    env: str = field(default="bargain", metadata={"help": "bargain (buyers x sellers) or market (policies x tasks)"})
    seed_base: int = field(default=EVAL_SEED_BASE, metadata={"help": "first evaluation seed (training uses lower ones)"})
    reasoning_mode: str = field(default="option_a", metadata={"help": "option_a (Thought field) or option_b (<think>)"})
    out: Optional[str] = field(default=None, metadata={"help": "artifact JSON path ('' for none; default: "
                                                                "artifacts/eval_scripted.json or eval_market.json, and "
                                                                "runs/eval/<name>.json for your own --scenarios file)"})
    transcripts: Optional[str] = field(default=None, metadata={"help": "JSONL transcripts path ('' for none; default "
                                                                        "beside the artifact's)"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    base_url: str = field(default="", metadata={"help": "OpenAI-compatible endpoint serving the model(s)"})
    api_key_env: str = field(default="OPENAI_API_KEY", metadata={"help": "environment variable holding the key"})
    backend: str = field(default="transformers", metadata={"help": "local models: transformers, llamacpp, ctranslate2, auto (the "
                                                                    "fastest engine measured on this machine whose "
                                                                    "greedy tokens equal transformers', "
                                                                    "artifacts/benchmarks/engines.json), or vllm (GPU)"})
    batch_size: int = field(default=64, metadata={"help": "episodes played in lockstep per batch (model players)"})
    device: str = field(default="", metadata={"help": "cpu, cuda... (default: cuda if available)"})

    def __post_init__(self):
        if self.seed_base < 0:
            raise ValueError(f"--seed_base must be non-negative, got {self.seed_base}")
        if self.reasoning_mode not in REASONING_MODES:
            raise ValueError(f"--reasoning_mode must be one of {REASONING_MODES}, got {self.reasoning_mode!r}")
        if self.backend not in ("auto", "transformers", "llamacpp", "ctranslate2", "vllm"):
            raise ValueError(f"--backend must be auto, transformers, llamacpp, ctranslate2 or vllm, got {self.backend!r}")
        if self.batch_size < 1:
            raise ValueError(f"--batch_size must be at least 1, got {self.batch_size}")
