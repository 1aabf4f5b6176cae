"""RL curves side by side: one row per run, the numbers a recipe is chosen by.

    python training/compare_runs.py control=artifacts/probes/grpo2_short_control_training_curve.json \\
        spares=artifacts/probes/grpo2_short_spares_training_curve.json

Per run, over the steps it logged: the reward as sampled (with ``--spare_groups`` the step's own groups before the
flat ones were replaced, so every run's reward is read on the same rows), over all steps and over the second half,
the share of zero-variance groups as sampled and as trained, the deal rate, the buyer's Thought consistency (true
claims over claims, pooled), episodes trained and played, and the median seconds a step and its rollout took.
Runs compared this way should play the same rows in the same order (the same seed and dataset), as
``training/recipes/smollm2/short_runs.sh`` does. Branches resumed from one checkpoint carry its steps in their curves:
``--from_step N`` compares only the steps from N on (the steps each branch played itself); ``--to_step M``
stops at step M (a longer run read beside a shorter one over the same steps).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

COLUMNS = ("run", "steps", "episodes trained (played)", "reward as sampled", "reward, 2nd half",
           "zero-variance groups (sampled / trained)", "deal rate", "Thought consistency", "s a step (rollout)")


def _numbers(values) -> list[float]:
    return [v for v in values if isinstance(v, (int, float))]


def _mean(values) -> float | None:
    values = _numbers(values)
    return statistics.fmean(values) if values else None


def _median(points: list[dict], key: str) -> float | None:
    values = _numbers(p.get(key) for p in points)
    return statistics.median(values) if values else None


def summarize(points: list[dict]) -> dict:
    """The comparison numbers of one curve's points (see the module's docstring)."""
    if not points:
        raise ValueError("the curve has no points")
    sampled = [p.get("reward_mean_sampled", p["reward_mean"]) for p in points]
    half = sampled[len(sampled) // 2:]
    stated = [p for p in points if p.get("thought_claims") and p.get("thought_consistency") is not None]
    claims = sum(p["thought_claims"] for p in stated)
    true = sum(p["thought_claims"] * p["thought_consistency"] for p in stated)
    return {
        "steps": len(points),
        "episodes": sum(p["episodes"] for p in points),
        "episodes_played": sum(p.get("episodes_played", p["episodes"]) for p in points),
        "reward_sampled": statistics.fmean(sampled),
        "reward_second_half": statistics.fmean(half),
        "zero_std_sampled": _mean(p.get("frac_reward_zero_std_sampled", p.get("frac_reward_zero_std"))
                                  for p in points),
        "zero_std_trained": _mean(p.get("frac_reward_zero_std") for p in points),
        "deal_rate": _mean(p.get("deal_rate") for p in points),
        "thought_consistency": true / claims if claims else None,
        "step_s": _median(points, "wall_s"),
        "rollout_s": _median(points, "rollout_s"),
    }


def _f(value, spec: str = "{:+.3f}") -> str:
    return "–" if value is None else spec.format(value)


def table(runs: dict[str, list[dict]]) -> str:
    """A markdown table, one row per ``name: points``."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for name, points in runs.items():
        s = summarize(points)
        lines.append(" | ".join([
            f"| {name}", str(s["steps"]), f"{s['episodes']:,} ({s['episodes_played']:,})", _f(s["reward_sampled"]),
            _f(s["reward_second_half"]),
            f"{_f(s['zero_std_sampled'], '{:.0%}')} / {_f(s['zero_std_trained'], '{:.0%}')}",
            _f(s["deal_rate"], "{:.0%}"), _f(s["thought_consistency"], "{:.1%}"),
            f"{_f(s['step_s'], '{:.0f}')} ({_f(s['rollout_s'], '{:.0f}')})"]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("curves", nargs="+", help="name=path of a training curve (or a path: its file name names it)")
    ap.add_argument("--from_step", "--from-step", type=int, default=1,
                    help="only the steps from this one on (branches resumed from one checkpoint: their own steps)")
    ap.add_argument("--to_step", "--to-step", type=int, default=0,
                    help="only the steps up to this one (0: all; a longer run beside a shorter one, step for step)")
    a = ap.parse_args(argv)
    runs = {}
    for spec in a.curves:
        name, _, path = spec.rpartition("=") if "=" in spec else ("", "", spec)
        path = Path(path)
        try:
            points = json.loads(path.read_text())["points"]
        except (OSError, ValueError, KeyError) as exc:
            raise SystemExit(f"cannot read a training curve at {path}: {exc}") from None
        points = [p for p in points if p["step"] >= a.from_step and (not a.to_step or p["step"] <= a.to_step)]
        if not points:
            raise SystemExit(f"{path} has no step from {a.from_step}" + (f" to {a.to_step}" if a.to_step else " on"))
        runs[name or path.name.removesuffix("_training_curve.json")] = points
    print(table(runs))

