"""Evaluate players on held-out episodes and write ``artifacts/eval_scripted.json`` (the bilateral
game) or ``artifacts/eval_market.json`` (``--env market``).

What it is, for the bilateral game: the paper's evaluation protocol (held-out test products x several seeds, mean
reward, deal rate, bargained ratio on deals, first-offer ratio, budget overshoot, all split by
mutual/conflicting interest) for every scripted buyer against the neutral seller and every
persona, plus a ``seller: "mix"`` row per buyer over all sellers. Evaluation seeds start at
``env.bargain.evaluation.EVAL_SEED_BASE`` so they never coincide with training seeds.

Run (from the repo root):

    python training/evaluate.py                       # everything, paper data if present
    python training/evaluate.py --scenarios builtin --buyers expert,lowballer --seeds 2
    python training/evaluate.py --buyer-model tiny --buyer-name base --out artifacts/eval_base.json
    python training/evaluate.py --buyer-model Qwen/Qwen3-0.6B --reasoning-mode option_b
    python training/evaluate.py --buyer-model gpt-4.1-mini --base-url https://api.openai.com/v1
    python training/evaluate.py --env market          # the GPU market -> artifacts/eval_market.json

Model players (``--buyer-model`` / ``--seller-model``: ``tiny``, a local path or a Hub id; with
``--base-url`` a model served behind an OpenAI-compatible endpoint, key from ``$OPENAI_API_KEY``)
replace the scripted buyer or seller list and play through the batched rollout engine.

For the GPU market: every policy in lab 0 of every task over ``--episodes`` held-out seeds (from
``--seed_base``), the world's archetypes in the other labs, with ``--models`` adding model labs.
Each game's evaluation lives in its adapter (``training/games/``); this script has one config
and no branch on the game.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from env.bargain.env import DEFAULT_MAX_TURNS
from env.bargain.evaluation import EVAL_SEED_BASE, SEEDS_PER_PRODUCT
from env.bargain.players import BUYERS, SELLERS
from env.bargain.protocol import REASONING_MODES
from env.bargain.scenarios import ScenarioDataError, check_budget_factor
from env.market.world import TASKS as MARKET_TASKS
from training.engine.backends import SamplingConfig
from training.common.cli import parse
from training.games import GAMES, check_env
from training.games.bargain import target_checks
from training.common.provenance import provenance, write_json


@dataclass
class EvalConfig:
    env: str = field(default="bargain", metadata={"help": "bargain (buyers x sellers) or market (policies x tasks)"})
    # -- the bilateral game
    scenarios: str = field(default="auto", metadata={"help": "builtin, amazon, auto (amazon if present) or a JSON path"})
    split: str = field(default="test", metadata={"help": "test (held out), train or all"})
    budget_factor: float = field(default=0.8, metadata={"help": "buyer budget as a share of the list price (products "
                                                                "that give their own budget keep it)"})
    buyers: str = field(default="all", metadata={"help": f"scripted buyers, comma list, all or none: {', '.join(BUYERS)}"})
    sellers: str = field(default="all", metadata={"help": f"comma list or all: {', '.join(SELLERS)}"})
    seeds: int = field(default=SEEDS_PER_PRODUCT, metadata={"help": "episodes per product per cell (the paper: 4)"})
    limit: int = field(default=0, metadata={"help": "use only the first N products of the split (0 = all)"})
    max_turns: int = field(default=DEFAULT_MAX_TURNS, metadata={"help": "exchanges (buyer reply + seller reply) per "
                                                                        "episode"})
    transcripts_per_cell: int = field(default=2, metadata={"help": "transcripts kept per buyer x seller cell"})
    buyer_model: str = field(default="", metadata={"help": "model buyer: tiny, a path or a Hub id (replaces --buyers)"})
    buyer_name: str = field(default="", metadata={"help": "row label of the model buyer (base, sft, grpo, sdpo...)"})
    buyer_models: str = field(default="", metadata={"help": "model buyers added to --buyers: name=path,name=path "
                                                            "(e.g. base=tiny,sft=runs/sft/final)"})
    buyer_modes: str = field(default="", metadata={"help": "per-model reasoning modes overriding --reasoning_mode: "
                                                           "name=option_b,... (the option_a/option_b ablation)"})
    temperatures: str = field(default="", metadata={"help": "model players: comma list of sampling temperatures, "
                                                             "0 = greedy, e.g. '0,0.7'; the first gives the headline "
                                                             "rows, the others go to rows_other_sampling (default: "
                                                             "--temperature alone)"})
    include_rows: str = field(default="", metadata={
        "help": "comma list of earlier evaluation artifacts whose model buyers' rows join this one (played on "
                "the same products, or the first of them, with the same seeds, sellers and turns, which is checked; "
                "each row names its artifact and any subset; the artifact's provenance is kept): a slow model "
                "evaluated once, beside a fresh table"})
    greedy_only: str = field(default="", metadata={"help": "model buyers (comma list of names) evaluated at the "
                                                           "first --temperatures value only (e.g. a model too slow on "
                                                           "this machine for both)"})
    oracle: bool = field(default=True, metadata={"help": "add the oracle's rows: a buyer told each scripted seller's "
                                                         "private floor, the ceiling of each game (an upper bound, "
                                                         "not a baseline; rows carry upper_bound: true)"})
    seller_model: str = field(default="", metadata={"help": "model seller (replaces --sellers)"})
    seller_name: str = field(default="", metadata={"help": "row label of the model seller"})
    # -- the GPU market
    tasks: str = field(default="all", metadata={"help": "market tasks, comma list or all: " + ", ".join(MARKET_TASKS)})
    policies: str = field(default="all", metadata={"help": "market policies in lab 0, comma list or all (the expert, "
                                                           "the baselines, idle)"})
    episodes: int = field(default=500, metadata={"help": "market: held-out seeds per task x policy"})
    models: str = field(default="", metadata={"help": "market: model labs added to --policies: name=path,... (tiny, "
                                                      "a checkpoint folder or a Hub id), through the rollout engine"})
    # -- both
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
    backend: str = field(default="transformers", metadata={"help": "transformers or vllm (local models)"})
    batch_size: int = field(default=64, metadata={"help": "episodes played in lockstep per batch (model players)"})
    device: str = field(default="", metadata={"help": "cpu, cuda... (default: cuda if available)"})

    def __post_init__(self):
        check_env(self.env)
        game = GAMES[self.env]
        out, transcripts = game.outputs(self)
        self.out = out if self.out is None else self.out
        self.transcripts = transcripts if self.transcripts is None else self.transcripts
        if self.seed_base < 0:
            raise ValueError(f"--seed_base must be non-negative, got {self.seed_base}")
        if self.reasoning_mode not in REASONING_MODES:
            raise ValueError(f"--reasoning_mode must be one of {REASONING_MODES}, got {self.reasoning_mode!r}")
        if self.backend not in ("transformers", "vllm"):
            raise ValueError(f"--backend must be transformers or vllm, got {self.backend!r}")
        if self.batch_size < 1:
            raise ValueError(f"--batch_size must be at least 1, got {self.batch_size}")
        check_budget_factor(self.budget_factor)
        self.temperature_list = parse_temperatures(self.temperatures)
        self.greedy_names = [x.strip() for x in self.greedy_only.split(",") if x.strip()]
        game.check_eval(self)


def parse_temperatures(value: str) -> list[float]:
    """``'0,0.7'`` -> ``[0.0, 0.7]`` (empty: none); each a finite number from 0 to 2, no repeats."""
    temps = []
    for item in (x.strip() for x in value.split(",") if x.strip()):
        try:
            t = float(item)
        except ValueError:
            raise ValueError(f"--temperatures: {item!r} is not a number") from None
        if not 0 <= t <= 2 or t in temps:
            raise ValueError(f"--temperatures: each must be from 0 (greedy) to 2 and listed once, got {item!r}")
        temps.append(t)
    return temps


def run(config: EvalConfig, command: str | None = None, sampling: SamplingConfig | None = None) -> dict:
    """Evaluate as ``config`` says and return the artifact (also written to ``config.out`` when set)."""
    return GAMES[config.env].evaluate(config, sampling or SamplingConfig(), command)


def annotate_targets(path: str) -> dict:
    """Add the target checks to an existing evaluation artifact (rows untouched), with their own provenance."""
    data = json.loads(Path(path).read_text())
    checks = target_checks(data["rows"])
    if checks is None:
        raise SystemExit(f"{path}: no seller-mix rows for both sft and grpo; nothing to check")
    data["targets"] = checks
    data["targets_provenance"] = provenance({"artifact": path}, {}, 0.0)
    write_json(path, data)
    return checks


def main(argv: list[str] | None = None) -> dict:
    from transformers import HfArgumentParser  # noqa: PLC0415  (one config convention for all scripts)

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--check_targets"]:  # python training/evaluate.py --check_targets artifacts/eval_results.json
        if len(argv) != 2:
            raise SystemExit("usage: python training/evaluate.py --check_targets ARTIFACT.json")
        checks = annotate_targets(argv[1])
        print(json.dumps(checks, indent=1))
        return checks
    (config, sampling), argv = parse(HfArgumentParser((EvalConfig, SamplingConfig)), argv)
    try:
        artifact = run(config, sampling=sampling)
    except (ScenarioDataError, ValueError) as exc:  # the user's data or options: one clear line, not a traceback
        raise SystemExit(f"error: {exc}") from None
    print(GAMES[config.env].table(artifact))
    if config.out:
        print(f"wrote {config.out}" + (f" and {config.transcripts}" if config.transcripts else ""))
    return artifact


if __name__ == "__main__":
    main()
