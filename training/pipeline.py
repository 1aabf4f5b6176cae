"""Regenerate every training artifact from nothing, offline, on this CPU: one command.

Stages (each a recorded command; each resumes from its own checkpoints if interrupted):
tiny tokenizer + model -> SFT on expert games -> GRPO -> SDPO -> evaluation of base, SFT, GRPO
and SDPO buyers (plus every scripted buyer) on the held-out test split -> the trained tiny buyer
copied to ``artifacts/checkpoints/`` for the Space. Writes ``artifacts/pipeline.json`` with each
stage's command and wall time.

    python training/pipeline.py                 # the full run (see the README for its wall time)
    python training/pipeline.py --smoke --workdir /tmp/haggle-smoke   # minutes: what the tests run
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from training.provenance import REPO_ROOT, provenance, write_json

SHIP = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
        "chat_template.jinja"]


def stages(work: Path, art: Path, smoke: bool, eval_scenarios: str) -> list[tuple[str, list[str]]]:
    s = ["--smoke"] if smoke else []
    tiny = work / "tiny-base"
    models = f"base={tiny},sft={work / 'sft' / 'final'},grpo={work / 'grpo' / 'final'},sdpo={work / 'sdpo' / 'final'}"
    ev = ["--limit", "3", "--seeds", "1", "--max_new_tokens", "24"] if smoke else []
    return [
        ("tiny", ["training/models.py", "--out", str(tiny)]),
        ("sft", ["training/sft.py", *s, "--model", str(tiny), "--output_dir", str(work / "sft"),
                 "--curve", str(art / "sft_training_curve.json")]),
        ("grpo", ["training/grpo.py", *s, "--model_name_or_path", str(work / "sft" / "final"),
                  "--output_dir", str(work / "grpo"), "--curve", str(art / "grpo_training_curve.json")]),
        ("sdpo", ["training/sdpo.py", *s, "--model_name_or_path", str(work / "sft" / "final"),
                  "--output_dir", str(work / "sdpo"), "--curve", str(art / "sdpo_training_curve.json")]),
        ("evaluate", ["training/evaluate.py", "--scenarios", eval_scenarios, "--buyer_models", models, *ev,
                      "--out", str(art / "eval_results.json"),
                      "--transcripts", str(art / "transcripts" / "eval_results.jsonl"), "--no_progress"]),
    ]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny settings for every stage")
    ap.add_argument("--workdir", default="runs", help="checkpoints and the tiny base model")
    ap.add_argument("--artifacts", default="", help="artifact folder (default: artifacts/, or WORKDIR/artifacts "
                    "with --smoke)")
    ap.add_argument("--eval-scenarios", default="builtin", help="evaluation scenario source (test split)")
    ap.add_argument("--only", default="", help="comma list of stages to run (default: all)")
    a = ap.parse_args(argv)
    work = Path(a.workdir).resolve()
    art = Path(a.artifacts or (work / "artifacts" if a.smoke else REPO_ROOT / "artifacts")).resolve()
    plan = stages(work, art, a.smoke, a.eval_scenarios)
    only = {x for x in a.only.split(",") if x}
    if only - {n for n, _ in plan}:
        ap.error(f"--only takes stages from {', '.join(n for n, _ in plan)}")
    start = time.perf_counter()
    done = []
    for name, cmd in plan:
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        print(f"[pipeline] {name}: python {' '.join(cmd)}", flush=True)
        subprocess.run([sys.executable, *cmd], cwd=REPO_ROOT, check=True)
        done.append({"stage": name, "command": "python " + " ".join(cmd), "wall_time_s": time.perf_counter() - t0})
    final = work / "grpo" / "final"
    if final.exists() and not a.smoke:
        ship = art / "checkpoints" / "grpo-tiny"
        ship.mkdir(parents=True, exist_ok=True)
        for f in SHIP:
            if (final / f).exists():
                shutil.copy2(final / f, ship / f)
    result = {"provenance": provenance({"smoke": a.smoke, "workdir": str(work), "eval_scenarios": a.eval_scenarios},
                                       {"per_stage": "see each artifact's provenance"}, time.perf_counter() - start),
              "stages": done}
    write_json(art / "pipeline.json", result)
    return result


if __name__ == "__main__":
    main()
