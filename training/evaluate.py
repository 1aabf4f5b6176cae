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
Each game's evaluation lives in its package (``training/games/<game>/``: its options in
``config.py``, its evaluation in ``adapter.py``); this script picks the game by ``--env`` and never
branches on it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from transformers import HfArgumentParser

from env.bargain.sources import ScenarioDataError
from training.common.cli import parse
from training.common.provenance import provenance, write_json
from training.engine.backends import SamplingConfig
from training.games import GAMES, check_env
from training.games.bargain import target_checks


def run(config, command: str | None = None, sampling: SamplingConfig | None = None) -> dict:
    """Evaluate as ``config`` (a game's ``EvalArgs``) says; the artifact (also written to ``config.out``)."""
    return GAMES[config.env].evaluate(config, sampling or SamplingConfig(), command)


def env_of(argv: list[str]) -> str:
    """The game ``--env`` names on a command line (bargain when it names none)."""
    for i, arg in enumerate(argv):
        if arg == "--env" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--env="):
            return arg.split("=", 1)[1]
    return "bargain"


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
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--check_targets"]:  # python training/evaluate.py --check_targets artifacts/eval_results.json
        if len(argv) != 2:
            raise SystemExit("usage: python training/evaluate.py --check_targets ARTIFACT.json")
        checks = annotate_targets(argv[1])
        print(json.dumps(checks, indent=1))
        return checks
    try:
        game = GAMES[check_env(env_of(argv))]
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    (config, sampling), argv = parse(HfArgumentParser((game.EvalArgs, SamplingConfig)), argv)
    try:
        artifact = run(config, sampling=sampling)
    except (ScenarioDataError, ValueError) as exc:  # the user's data or options: one clear line, not a traceback
        raise SystemExit(f"error: {exc}") from None
    print(game.table(artifact))
    if config.out:
        print(f"wrote {config.out}" + (f" and {config.transcripts}" if config.transcripts else ""))
    return artifact


if __name__ == "__main__":
    main()
