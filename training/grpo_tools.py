"""GRPO through TRL's ``environment_factory``: the negotiation as tools, in-process or served.

What it is: TRL's ``GRPOTrainer`` with ``environment_factory=HaggleToolEnv`` (``training/games/bargain/tools.py``).
Each rollout gets its own environment; ``reset(**row)`` opens a train-split episode named by
the row (seed, product, opponent) and returns the opening prompt; the model negotiates by
calling ``offer(price)``, ``accept()``, ``reject()`` and ``quit()``; the reward is the
environment's own ``get_reward()``. With ``--env_url`` (or ``$HAGGLE_ENV_URL``) every rollout
talks to a server started with ``python -m serving`` over the typed OpenEnv client, so the
same script trains against a served environment with no glue code. This is the ecosystem's
tool-calling route; ``training/grpo.py`` is the token-level route used for the shipped results.

    python -m serving --port 8000 &
    python training/grpo_tools.py --env_url http://127.0.0.1:8000 --model_name_or_path Qwen/Qwen3-0.6B
    python training/grpo_tools.py --smoke        # tiny model, in-process, a few CPU steps (the tests)
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from datasets import Dataset
from trl import GRPOTrainer, TrlParser

from env.bargain.players import PROBES, SELLERS, parse_names
from training.common.cli import parse
from training.engine.models import load_model
from training.games.bargain.tools import HaggleToolEnv
from training.rl.run import HaggleGRPOConfig


@dataclass
class ToolScriptArguments:
    model_name_or_path: str = field(default="tiny", metadata={"help": "tiny, a local path or a Hub id"})
    env_url: str = field(default="", metadata={"help": "served environment (python -m serving); '' = in-process"})
    rows: int = field(default=256, metadata={"help": "training rows (episodes named by seed, product, opponent)"})
    sellers: str = field(default="all", metadata={"help": f"opponent mix: all or a comma list of {', '.join(SELLERS)}"})
    smoke: bool = field(default=False, metadata={"help": "a few CPU steps on the tiny model (flags still win)"})

    def __post_init__(self):
        if self.rows < 1:
            raise ValueError("--rows must be at least 1")
        self.seller_names = parse_names(self.sellers, SELLERS, "seller", PROBES)


@dataclass
class ToolGRPOConfig(HaggleGRPOConfig):
    """``training/grpo.py``'s CPU-friendly defaults, with TRL's tool-calling loop bounded."""

    output_dir: str = field(default="runs/grpo-tools")
    gradient_accumulation_steps: int = field(default=1)
    max_completion_length: int = field(default=512)
    max_tool_calling_iterations: int = field(default=8)


def rows(n: int, sellers: list[str]):
    """Episode rows: the opening comes from ``reset``, so the prompt is a one-line instruction."""
    return Dataset.from_dict({
        "prompt": [[{"role": "user", "content": "Negotiate the best price you can with the tools."}]] * n,
        "seed": list(range(n)), "opponent": [sellers[i % len(sellers)] for i in range(n)], "split": ["train"] * n})


def main(argv: list[str] | None = None):
    (script, cfg), argv = parse(TrlParser((ToolScriptArguments, ToolGRPOConfig)), argv, "grpo_tools")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    model, tok = load_model(script.model_name_or_path, device="cpu" if cfg.use_cpu else None, dtype="float32")
    env_url = script.env_url or os.environ.get("HAGGLE_ENV_URL", "")
    trainer = GRPOTrainer(model=model, args=cfg, train_dataset=rows(script.rows, script.seller_names),
                          processing_class=tok, environment_factory=functools.partial(HaggleToolEnv, env_url))
    trainer.train()
    return trainer


if __name__ == "__main__":
    main()
