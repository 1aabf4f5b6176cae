"""Regenerate every training artifact from nothing, offline, on this CPU: one command.

Stages (each a recorded command; each resumes from its own checkpoints if interrupted):
tiny tokenizer + model -> SFT on expert games (option_a) -> SFT in option_b (the reasoning-format
ablation, same data and budget) -> GRPO -> SDPO -> evaluation of base, SFT, GRPO and SDPO buyers,
the option_b SFT buyer and every scripted buyer on the held-out test split -> the trained tiny buyer
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
        "chat_template.jinja", "lineage.json"]


# The full run's sizes, chosen to fit the 60-minute budget on a 2-core CPU (see the README);
# --smoke replaces them with each script's own tiny settings.
FULL = {"sft": ["--games", "2400"], "rl": ["--max_steps", "20"], "eval": ["--seeds", "2"]}


def stages(work: Path, art: Path, smoke: bool, eval_scenarios: str) -> list[tuple[str, list[str]]]:
    """The stage commands. The option_a / option_b ablation trains a second SFT buyer in option_b
    with the same data and budget (one SFT per format: a shared SFT on both formats learned
    markedly slower at this size) and evaluates it beside the option_a one."""
    s = ["--smoke"] if smoke else []
    size = {k: [] for k in FULL} if smoke else FULL
    tiny, sft = work / "tiny-base", work / "sft" / "final"
    models = {"base": tiny, "sft": sft, "grpo": work / "grpo" / "final", "sdpo": work / "sdpo" / "final",
              "sft_option_b": work / "sft-option_b" / "final"}
    ev = ["--limit", "3", "--seeds", "1", "--max_new_tokens", "24"] if smoke else size["eval"]

    def sft_stage(out, curve, mode):
        return ["training/sft.py", *s, *size["sft"], "--model", str(tiny), "--reasoning_mode", mode,
                "--output_dir", str(work / out), "--curve", str(art / curve)]

    def rl(script, out, curve):
        return [f"training/{script}.py", *s, *size["rl"], "--model_name_or_path", str(sft),
                "--output_dir", str(work / out), "--curve", str(art / curve)]
    return [
        ("tiny", ["training/models.py", "--out", str(tiny)]),
        ("sft", sft_stage("sft", "sft_training_curve.json", "option_a")),
        ("sft_option_b", sft_stage("sft-option_b", "sft_option_b_training_curve.json", "option_b")),
        ("grpo", rl("grpo", "grpo", "grpo_training_curve.json")),
        ("sdpo", rl("sdpo", "sdpo", "sdpo_training_curve.json")),
        ("evaluate", ["training/evaluate.py", "--scenarios", eval_scenarios,
                      "--buyer_models", ",".join(f"{k}={v}" for k, v in models.items()),
                      "--buyer_modes", "sft_option_b=option_b", *ev,
                      "--out", str(art / "eval_results.json"),
                      "--transcripts", str(art / "transcripts" / "eval_results.jsonl"), "--no_progress"]),
    ]


def ship_checkpoint(final: Path, ship: Path, done: list[dict]) -> None:
    """Copy the trained tiny buyer where the Space finds it, with a note of the commands that made it."""
    ship.mkdir(parents=True, exist_ok=True)
    for f in SHIP:
        if (final / f).exists():
            shutil.copy2(final / f, ship / f)
    made = "\n".join(f"    {d['command']}" for d in done if d["stage"] in ("tiny", "sft", "grpo"))
    (ship / "PROVENANCE.md").write_text(
        f"# grpo-tiny\n\nThe tiny Qwen3-architecture buyer (3.4 M parameters) after SFT on expert games and GRPO "
        f"(option_a), copied from `{final}` by `python training/pipeline.py`. Made on this CPU by:\n\n{made}\n\n"
        "Its evaluation on the held-out test split is the `grpo` rows of `artifacts/eval_results.json`; "
        "the commit and wall time of each stage are in `artifacts/pipeline.json`.\n")


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
        ship_checkpoint(final, art / "checkpoints" / "grpo-tiny", done)
    result = {"provenance": provenance({"smoke": a.smoke, "workdir": str(work), "eval_scenarios": a.eval_scenarios},
                                       {"per_stage": "see each artifact's provenance"}, time.perf_counter() - start),
              "stages": done}
    write_json(art / "pipeline.json", result)
    return result


if __name__ == "__main__":
    main()
