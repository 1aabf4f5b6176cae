"""The model card the Space shows beside every model seat and on its first tab, built from the
checkpoint folder and the artifacts, so no visitor has to open a file to know what plays.

A checkpoint folder may hold ``card.json`` naming its evaluation row (``eval_buyer``, and where
that is not the seller mix of ``eval_results.json``: ``eval_file`` and ``eval_seller``, as for a
model seller, whose row is a buyer playing against it), its training curves (``curves``,
artifact file names) and its family's before-vs-after games (``before_after``, default
``before_after.json``; a market lab's stored games on the same seeds: ``market_before_after``); without it they follow from its lineage (the row of its last training
stage, and ``<stage>_training_curve.json`` for each stage). Every number comes from a file:
parameters from the safetensors headers, steps, wall time and hardware from each curve's
provenance, the row from the evaluation artifact.
"""

from __future__ import annotations

import json
from pathlib import Path

from space import figures as F
from training.common.provenance import trained_roles

TRAINING_STAGES = ("sft", "grpo", "sdpo")


def _tensor_parameters(path: Path) -> int:
    """Parameters stored in a safetensors file, from its header alone (no tensor is read; opened
    as numpy so that drawing the page does not import torch, a second of start-up)."""
    from safetensors import safe_open  # noqa: PLC0415
    total = 0
    with safe_open(str(path), "np") as f:
        for name in f.keys():
            count = 1
            for d in f.get_slice(name).get_shape():
                count *= d
            total += count
    return total


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def card_facts(folder: str | Path) -> dict:
    """What the card says about the model in ``folder`` (a checkpoint or adapter), as data."""
    folder = Path(folder)
    lineage = _read(folder / "lineage.json") or {}
    extra = _read(folder / "card.json") or {}
    stages = [s for s in lineage.get("stages", []) if s.get("stage") in TRAINING_STAGES]
    adapter = (folder / "adapter_config.json").is_file()
    facts = {"name": folder.name, "base_model": lineage.get("base_model", "unknown"), "adapter": adapter,
             "stages": [s["stage"] for s in stages], "roles": trained_roles(lineage)}
    weights = folder / ("adapter_model.safetensors" if adapter else "model.safetensors")
    if weights.is_file():
        facts["adapter_parameters" if adapter else "parameters"] = _tensor_parameters(weights)
        facts["bytes"] = weights.stat().st_size
    if adapter:  # the base's size, as its build recorded it
        facts["parameters"] = next((s["parameters"] for s in lineage.get("stages", []) if "parameters" in s), None)
    curves = extra.get("curves") or [f"{s}_training_curve.json" for s in facts["stages"]]
    facts["training"] = []
    for name in curves:
        data = F.read_artifact(name) or {}
        prov, points = data.get("provenance", {}), data.get("points", [])
        cfg = prov.get("config", {})
        script = cfg.get("script", {})
        rl = cfg.get("grpo") or {}
        episodes = (rl.get("max_steps", 0) * rl.get("per_device_train_batch_size", 0)
                    * rl.get("gradient_accumulation_steps", 0)) if rl else None
        facts["training"].append({
            "curve": name, "command": F.relative(prov.get("command")), "steps": max((p.get("step", 0) for p in points), default=0),
            "games": script.get("games") if not rl else None, "episodes": episodes or None,
            "cloned": "scripted sellers'" if script.get("role") == "seller" else
                      "expert" if script.get("teacher", "expert") == "expert" else f"scripted {script['teacher']} buyer's",
            "scenarios": script.get("scenarios"), "sellers": script.get("sellers"), "env": script.get("env"),
            "tasks": script.get("tasks"),
            "wall_time_s": prov.get("wall_time_s"), "machine": prov.get("machine"), "commit": prov.get("commit"),
            "date": prov.get("date")})
    if extra.get("eval_policy"):  # a market lab: its rows, one per task, in the market evaluation
        facts.update(eval_policy=extra["eval_policy"], eval_file=extra.get("eval_file", "eval_market.json"),
                     eval_buyer=None, eval_seller=None, evaluation=None, before_after=None,
                     market_before_after=extra.get("market_before_after"))
        facts["market_rows"] = [r for r in (F.read_artifact(facts["eval_file"]) or {}).get("rows", [])
                                if r.get("policy") == facts["eval_policy"]]
        return facts
    buyer = extra.get("eval_buyer") or (facts["stages"][-1] if facts["stages"] else None)
    facts.update(eval_buyer=buyer, eval_file=extra.get("eval_file", "eval_results.json"),
                 eval_seller=extra.get("eval_seller", "mix"),
                 before_after=extra.get("before_after", F.BEFORE_AFTER))  # its family's games, base to RL
    rows = [r for r in F.eval_rows(facts["eval_file"], facts["eval_seller"]) if r["buyer"] == buyer]
    facts["evaluation"] = rows[0] if rows else None
    return facts


def millions(n) -> str:
    return "?" if not n else f"{n / 1e6:.1f} M"


def model_card(folder: str | Path, title: str = "The model in the model seat") -> str:
    """Markdown: base model, parameters, data, stages and steps, wall time and hardware, the
    evaluation row and where each fact comes from."""
    f = card_facts(folder)
    base = ("the tiny Qwen3-architecture model Haggle builds from scratch (no pretraining)"
            if f["base_model"] == "haggle-tiny" else f"`{f['base_model']}`")
    size = (f"a LoRA adapter of {millions(f.get('adapter_parameters'))} parameters ({f.get('bytes', 0) / 2**20:.1f} MB)"
            f" over {base} ({millions(f.get('parameters'))} parameters)" if f["adapter"]
            else f"{base}, {millions(f.get('parameters'))} parameters, all trained")
    roles = ["lab 0 of the GPU market" if r == "lab0" else r for r in f["roles"]]
    lines = [f"**{title}: `{f['name']}`**, {size}. Trained as the {' and '.join(roles) or 'buyer'}: "
             f"{' → '.join(f['stages']) or 'no training stage recorded'}."]
    for t in f["training"]:
        if not t["command"]:
            lines.append(f"- `{t['curve']}`: not found")
            continue
        what = (f"{t['games']:,} {t['cloned']} games" if t["games"] else
                f"{t['episodes']:,} episodes against the live environment" if t["episodes"] else "")
        data = (f"market tasks: {t['tasks']}, training seeds" if t.get("env") == "market" else
                f"{t['scenarios'] or '?'} train split, sellers: {t['sellers'] or '?'}")
        lines.append(f"- {t['curve'].split('/')[-1].split('_training_curve')[0]}: {t['steps']} steps, {what} ({data}), "
                     f"{(t['wall_time_s'] or 0) / 60:.0f} min on {t['machine']}; commit `{(t['commit'] or '?')[:12]}`; "
                     f"`{t['command']}`")
    r = f["evaluation"]
    if f.get("eval_policy"):
        lines.append(f"- Evaluation (`{f['eval_file']}`, policy `{f['eval_policy']}`, held-out seeds): " + ("; ".join(
            f"{m['task']} {m['reward_mean']:+.3f} {F.ci_text(m)} over {m['episodes']} episodes, invalid actions "
            f"{m['invalid_rate']:.1%}" for m in f["market_rows"]) or "no rows yet") + ".")
        lines.append(f"- In words: {F.market_lab_sentence(f['eval_policy'], f['eval_file'])}")
    elif r:
        seller = "seller mix" if f["eval_seller"] == "mix" else f"seller `{f['eval_seller']}`"
        lines.append(f"- Evaluation (`{f['eval_file']}`, row `{f['eval_buyer']}` against {seller}, held-out test split, "
                     f"{r.get('sampling', 'as sampled')}): the buyer's reward {r['reward_mean']:+.3f} "
                     f"{F.ci_text(r)} over {r['episodes']} episodes, "
                     f"deal rate {r['deal_rate']:.0%}, format errors {r['format_error_rate']:.1%}, overshoot "
                     f"{r['overshoot_rate']:.1%}.")
    else:
        lines.append(f"- No `{f['eval_buyer']}` row in `{f['eval_file']}` yet.")
    lines.append("- Provenance: `lineage.json` in the checkpoint folder and each curve's `provenance` "
                 "(Artifacts tab).")
    return "\n".join(lines)
