"""Regenerate every training artifact from nothing, offline, on this CPU: one command.

Stages (each a recorded command; each resumes from its own checkpoints if interrupted):
tiny tokenizer + model -> SFT on expert games (option_a) -> SFT in option_b (the reasoning-format
ablation, same data and budget) -> GRPO -> SDPO -> evaluation of base, SFT, GRPO and SDPO buyers,
the option_b SFT buyer and every scripted buyer on the held-out test split -> the trained tiny buyer
copied to ``artifacts/checkpoints/`` for the Space -> the same held-out games played by every
stage's buyer (``training/before_after.py``) -> the generalisation studies
(``training/generalisation.py``). One seller persona (``HELD_OUT_SELLER``) is kept out of every
training stage. Writes ``artifacts/pipeline.json`` with each stage's command, wall time and hardware.

    python training/pipeline.py                 # the default preset: at most 60 minutes on this CPU
    nohup python training/pipeline.py --preset full > runs/pipeline.log 2>&1 &   # the shipped run (2.4 h here)
    python training/pipeline.py --smoke --workdir /tmp/haggle-smoke   # minutes: what the tests run

``--model smollm2-135m`` runs the same stages for the real pretrained LLM (LoRA SFT, then GRPO from
the SFT adapter with ``training/recipes/smollm2/grpo.yaml``, evaluations as ``smollm2_*`` rows) into
``runs/smollm2``, whose checkpoints git can carry between machines (a run longer than a session is
committed where it stopped and resumed by the same command, ``--resume-across-code``); the GRPO
adapter is shipped to ``artifacts/checkpoints/grpo-smollm2``. Its evaluations keep every finished cell
in ``runs/smollm2/{evaluate,generalisation}/cells.jsonl``, so they resume across sessions too, and with
the full preset their rows then join ``eval_results.json`` and ``eval_generalisation.json`` beside the
tiny buyers' (the ``join_*`` stages: same episodes, checked):

    nohup python training/pipeline.py --model smollm2-135m --preset full --sft-from artifacts/checkpoints/sft-smollm2 \
        --seller-model artifacts/checkpoints/sft-smollm2-seller --resume-across-code > runs/smollm2.log 2>&1 &

``--grpo-recipe`` makes the GRPO stage a whole recipe instead (its start, size, output folder and curve), run
exactly as ``python training/grpo.py --config RECIPE``: a run begun by hand with that command is resumed and
finished by the pipeline, evaluated (its start as the SFT buyer) and shipped. ``--sft-curve`` names its start's
training curve (under artifacts/), which must be that start's and played on the training distribution with the
held-out persona left out, as the recipe itself:

    nohup python training/pipeline.py --model smollm2-135m --preset full \
        --grpo-recipe training/recipes/smollm2/grpo10.yaml --sft-curve sft_steady_smollm2_training_curve.json \
        --seller-model artifacts/checkpoints/sft-smollm2-seller --resume-across-code > runs/smollm2.log 2>&1 &

``--env market`` trains lab 0 of the GPU market instead (``market_stages``): SFT on the market expert's games,
GRPO with the environment's reward, and the untrained, SFT and GRPO labs evaluated beside every scripted policy
on the same held-out seeds; with SmolLM2's full preset the rows join ``artifacts/eval_market.json`` and the
adapter is shipped to ``artifacts/checkpoints/grpo-smollm2-market`` (the Space's trained lab 0):

    nohup python training/pipeline.py --model smollm2-135m --env market --preset full --resume-across-code \
        > runs/smollm2-market.log 2>&1 &
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from training.common.cli import RECIPES, recipe_flags
from training.common.provenance import REPO_ROOT, code_version, git_commit, machine, provenance, relative, write_json

SHIP = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
        "chat_template.jinja", "lineage.json"]


RECIPE = RECIPES / "pipeline.yaml"  # the presets and the RL recipe
# every preset some family's section names (each family checks its own below)
PRESETS = tuple(dict.fromkeys(p for section in ("presets", "smollm2", "market_tiny", "market_smollm2")
                              for p, v in yaml.safe_load(RECIPE.read_text())[section].items()
                              if p != "smoke" and isinstance(v, dict)))
MODELS = ("tiny", "smollm2-135m")  # the two model families the pipeline trains
SMOLLM2_RECIPE = RECIPES / "smollm2" / "grpo.yaml"
# What every training stage plays (SFT games, GRPO and SDPO episodes): the builtin catalog's train split
# and generated products taking turns (env/bargain/synthetic.py: invented names, prices $3-$60,000),
# so the buyer learns to read its prompt rather than the catalog's names and price shapes. The
# evaluation stays on the builtin test split (and Amazon for generalisation study (a)).
TRAIN_SCENARIOS = "builtin+synthetic"
# One persona never seen in training (expert games, GRPO and SDPO opponents): the generalisation
# study (b) reads its row. The adversarial personas are study (c).
HELD_OUT_SELLER = "tit_for_tat"
TEMPERATURES = "0,0.7"  # evaluation greedy (the headline) and as sampled in RL


SKIPPABLE = ("sdpo", "before_after", "generalisation")  # stages no later stage needs (the ablation's is --ablation)


def stages(work: Path, art: Path, smoke: bool, eval_scenarios: str, preset: str = "default",
           seller_model: str = "", extra_buyers: str = "", include_rows: str = "",
           ablation: bool = False, skip: frozenset[str] = frozenset()) -> list[tuple[str, list[str]]]:
    """The stage commands. The option_a / option_b ablation (``ablation``, and always in smoke) trains a second
    SFT buyer in option_b with the same data and budget (one SFT per format: a shared SFT on both
    formats learned markedly slower at this size) and evaluates it beside the option_a one. Stages in
    ``skip`` (from SKIPPABLE) are left out, and so is a skipped stage's model from the evaluations."""
    from env.bargain.players import SELLERS  # noqa: PLC0415

    s = ["--smoke"] if smoke else []
    size = {k: _stage_flags("smoke" if smoke else preset, k)
            for k in ("sft", "grpo", "sdpo", "evaluate", "generalisation", "before_after")}
    rl_recipe = recipe_flags(RECIPE, "rl")
    option_b = smoke or ablation
    trained_sellers = ["--sellers", ",".join(n for n in SELLERS if n != HELD_OUT_SELLER)]
    tiny, sft = work / "tiny-base", work / "sft" / "final"
    models = {"base": tiny, "sft": sft, "grpo": work / "grpo" / "final",
              **({} if "sdpo" in skip else {"sdpo": work / "sdpo" / "final"})}
    if option_b:
        models["sft_option_b"] = work / "sft-option_b" / "final"
    ev, gen = size["evaluate"], size["generalisation"]

    def sft_stage(out, curve, mode):
        return ["training/sft.py", *s, *size["sft"], *trained_sellers, "--scenarios", TRAIN_SCENARIOS,
                "--model", str(tiny), "--reasoning_mode", mode,
                "--output_dir", str(work / out), "--curve", str(art / curve)]

    def rl(script, out, curve):
        return [f"training/{script}.py", *s, *size[script], *rl_recipe, *trained_sellers, "--scenarios", TRAIN_SCENARIOS,
                "--model_name_or_path", str(sft),
                "--output_dir", str(work / out), "--curve", str(art / curve)]
    plan = [
        ("tiny", ["training/build_tiny.py", "--out", str(tiny)]),
        ("sft", sft_stage("sft", "sft_training_curve.json", "option_a")),
        *([("sft_option_b", sft_stage("sft-option_b", "sft_option_b_training_curve.json", "option_b"))]
          if option_b else []),
        ("grpo", rl("grpo", "grpo", "grpo_training_curve.json")),
        ("sdpo", rl("sdpo", "sdpo", "sdpo_training_curve.json")),
        ("evaluate", ["training/evaluate.py", "--scenarios", eval_scenarios,
                      "--buyer_models", ",".join([*(f"{k}={v}" for k, v in models.items()),
                                                  *([extra_buyers] if extra_buyers else [])]),
                      *(["--buyer_modes", "sft_option_b=option_b"] if option_b else []),
                      *(["--include_rows", include_rows] if include_rows else []),
                      "--temperatures", TEMPERATURES, *(["--greedy_only", ",".join(
                          item.partition("=")[0].strip() for item in extra_buyers.split(",") if item.strip())]
                          if extra_buyers else []), *ev,
                      "--out", str(art / "eval_results.json"),
                      "--transcripts", str(art / "transcripts" / "eval_results.jsonl"), "--no_progress"]),
        ("before_after", ["training/before_after.py", "--scenarios", eval_scenarios,
                          "--models", ",".join(f"{k}={models[k]}" for k in ("base", "sft", "grpo", "sdpo")
                                               if k in models),
                          *size["before_after"], "--out", str(art / "before_after.json")]),
        ("generalisation", ["training/generalisation.py", "--train_source", TRAIN_SCENARIOS,
                            "--buyer_models", ",".join(f"{k}={models[k]}" for k in ("sft", "grpo")),
                            "--held_out_seller", HELD_OUT_SELLER, *(["--seller_model", seller_model] if seller_model
                                                                    else []),
                            *gen, "--out", str(art / "eval_generalisation.json")]),
    ]
    return [(name, cmd) for name, cmd in plan if name not in skip]


def grpo_recipe_run(recipe: str | Path) -> dict:
    """What a whole GRPO recipe (``--grpo-recipe``: one that names its start, output folder and curve) trains, checked
    against what the pipeline's evaluations assume: its ``model_name_or_path`` (the SFT start), ``output_dir``,
    ``curve``, and the training distribution every stage shares (``TRAIN_SCENARIOS``, the held-out persona left
    out). Raises ValueError naming what is missing or differs."""
    path = Path(recipe)
    try:
        run = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"--grpo-recipe {recipe}: cannot read it ({exc})") from exc
    if not isinstance(run, dict):
        raise ValueError(f"--grpo-recipe {recipe}: not a mapping of option to value")
    missing = [k for k in ("model_name_or_path", "output_dir", "curve", "sellers", "scenarios") if not run.get(k)]
    if missing:
        raise ValueError(f"--grpo-recipe {recipe} must name {', '.join(missing)} (the run it is, whole)")
    if artifact_name(run["curve"], REPO_ROOT) is None:
        raise ValueError(f"--grpo-recipe {recipe} writes its curve to {run['curve']}, outside artifacts/ where the "
                         "Space and the shipped card read it")
    _check_training_distribution(f"--grpo-recipe {recipe}", run["sellers"], run["scenarios"])
    return run


def _check_training_distribution(what: str, sellers, scenarios) -> None:
    """Raise ValueError when a stage's ``sellers`` (a comma list, or ``all``/None for every persona) include the
    held-out persona, or its ``scenarios`` are not ``TRAIN_SCENARIOS``: what every stage trains on, and what the
    generalisation studies name as the training source and hold out."""
    from env.bargain.players import SELLERS  # noqa: PLC0415

    played = SELLERS if sellers in (None, "all") else [s.strip() for s in str(sellers).split(",")]
    if HELD_OUT_SELLER in played:
        raise ValueError(f"{what}: trained against {HELD_OUT_SELLER}, the seller held out of every stage for "
                         "generalisation study (b)")
    if str(scenarios) != TRAIN_SCENARIOS:
        raise ValueError(f"{what}: trained on {scenarios!r}, not {TRAIN_SCENARIOS!r} as every other stage")


def artifact_name(path: str | Path, base: Path) -> str | None:
    """``path`` (relative to ``base``, or absolute) as a name under the repository's ``artifacts/``, as the Space
    reads artifacts (``space.figures.read_artifact``); None when it points outside."""
    full = (base / path).resolve()
    try:
        return str(full.relative_to((REPO_ROOT / "artifacts").resolve()))
    except ValueError:
        return None


def check_sft_start(curve: str, start: str | Path) -> dict:
    """The SFT start's training curve (a name under ``artifacts/``) checked against what the evaluations assume of
    a buyer: that it is this start's curve (its recorded checkpoint is ``start``) and that its games were played on
    the pipeline's training distribution, the held-out seller persona left out (study (b) holds it out of every
    stage). Returns the curve's script config; raises ValueError naming what differs."""
    try:
        prov = json.loads((REPO_ROOT / "artifacts" / curve).read_text())["provenance"]
        config = prov["config"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--sft-curve {curve}: not a training curve with provenance under artifacts/") from exc
    script = config.get("script") or {}
    if Path(str(config.get("checkpoint"))) != Path(start):
        raise ValueError(f"--sft-curve {curve} is the curve of {config.get('checkpoint')}, not of the start {start}")
    _check_training_distribution(f"--sft-curve {curve}: the start", script.get("sellers"), script.get("scenarios"))
    return script


def smollm2_stages(work: Path, art: Path, preset: str, sft_from: str = "", seller_model: str = "",
                   skip: frozenset[str] = frozenset(), grpo_recipe: str = "") -> list[tuple[str, list[str]]]:
    """The stage commands for SmolLM2-135M-Instruct: LoRA SFT on expert games (left out when ``sft_from``
    names an SFT adapter to start from), GRPO from the SFT adapter (``training/recipes/smollm2/grpo.yaml``),
    then the evaluations of the zero-shot, SFT and GRPO buyers as ``smollm2_*`` rows. The same held-out
    seller persona as the tiny run stays out of SFT and RL. Sizes come from ``smollm2.<preset>`` in the
    pipeline recipe. ``grpo_recipe`` names a whole GRPO run instead (``grpo_recipe_run``: its start, size,
    output folder and curve are the recipe's; the SFT stage is left out and its start is the SFT buyer)."""
    from env.bargain.players import SELLERS  # noqa: PLC0415

    size = {k: _stage_flags(preset, k, family="smollm2")
            for k in ("sft", "grpo", "evaluate", "generalisation", "before_after")}
    trained_sellers = ["--sellers", ",".join(n for n in SELLERS if n != HELD_OUT_SELLER)]
    if grpo_recipe:
        run = grpo_recipe_run(REPO_ROOT / grpo_recipe)
        if sft_from and Path(sft_from) != Path(run["model_name_or_path"]):
            raise ValueError(f"--sft-from {sft_from} is not the start --grpo-recipe names "
                             f"({run['model_name_or_path']})")
        sft, grpo_out = Path(run["model_name_or_path"]), Path(run["output_dir"])
        grpo = ["training/grpo.py", "--config", relative(str(grpo_recipe))]
    else:
        sft, grpo_out = (Path(sft_from) if sft_from else work / "sft" / "final"), work / "grpo"
        grpo = ["training/grpo.py", "--config", str(SMOLLM2_RECIPE.relative_to(REPO_ROOT)), *size["grpo"],
                *trained_sellers, "--scenarios", TRAIN_SCENARIOS, "--model_name_or_path", str(sft),
                "--output_dir", str(grpo_out), "--episode_log", str(grpo_out / "episodes"),
                "--curve", str(art / "grpo_smollm2_training_curve.json")]
    models = {"smollm2_base": "smollm2-135m", "smollm2_sft": str(sft), "smollm2_grpo": str(grpo_out / "final")}
    plan = [
        *([] if sft_from or grpo_recipe else [
            ("sft", ["training/sft.py", "--model", "smollm2-135m", *size["sft"], *trained_sellers,
                     "--scenarios", TRAIN_SCENARIOS, "--output_dir", str(work / "sft"),
                     "--curve", str(art / "sft_smollm2_training_curve.json")])]),
        ("grpo", grpo),
        ("evaluate", ["training/evaluate.py", "--scenarios", "builtin", "--buyers", "expert,random_valid",
                      "--buyer_models", ",".join(f"{k}={v}" for k, v in models.items()),
                      "--temperatures", TEMPERATURES, "--greedy_only", "smollm2_base,smollm2_sft", *size["evaluate"],
                      "--cell_cache", str(work / "evaluate" / "cells.jsonl"), "--out", str(art / "eval_smollm2.json"),
                      "--transcripts", str(art / "transcripts" / "eval_smollm2.jsonl"), "--no_progress"]),
        ("before_after", ["training/before_after.py", "--scenarios", "builtin",
                          "--models", ",".join(f"{k}={v}" for k, v in models.items()), *size["before_after"],
                          "--out", str(art / "before_after_smollm2.json")]),
        ("generalisation", ["training/generalisation.py", "--train_source", TRAIN_SCENARIOS,
                            "--buyer_models", ",".join(f"{k}={models[k]}" for k in ("smollm2_sft", "smollm2_grpo")),
                            "--held_out_seller", HELD_OUT_SELLER,
                            *(["--seller_model", seller_model] if seller_model else []),
                            *size["generalisation"], "--cell_cache", str(work / "generalisation" / "cells.jsonl"),
                            "--out", str(art / "eval_generalisation_smollm2.json")]),
    ]
    if preset == "full":  # the shipped run's rows join the shipped tables, beside the tiny buyers (same episodes)
        tiny = {k: _stage_flags(preset, k) for k in ("evaluate", "generalisation")}
        plan += [
            ("join_evaluate", ["training/evaluate.py", "--scenarios", "builtin", "--buyers", "all", *tiny["evaluate"],
                               "--include_rows", f"{art / 'eval_smollm2.json'},{art / 'eval_results.json'}",
                               "--out", str(art / "eval_results.json"), "--transcripts", "", "--no_progress"]),
            *([] if "generalisation" in skip else [
                ("join_generalisation", ["training/generalisation.py", "--train_source", TRAIN_SCENARIOS,
                                         "--held_out_seller", HELD_OUT_SELLER,
                                         *(["--seller_model", seller_model] if seller_model else []),
                                         *tiny["generalisation"], "--include_rows",
                                         f"{art / 'eval_generalisation_smollm2.json'},{art / 'eval_generalisation.json'}",
                                         "--out", str(art / "eval_generalisation.json")])]),
        ]
    return [(name, cmd) for name, cmd in plan if name not in skip]


MARKET_GRPO_RECIPE = RECIPES / "smollm2" / "market_grpo.yaml"
MARKET_SHIPPED = ("full", "gpu")  # SmolLM2 market presets whose rows join eval_market.json and whose adapter ships


def market_stages(work: Path, art: Path, model: str, preset: str, smoke: bool) -> list[tuple[str, list[str]]]:
    """The GPU market's stages, lab 0 trained (``--env market``): SFT on the market expert's games (its JSON actions
    the only trained tokens), GRPO with the environment's reward (SmolLM2: ``recipes/smollm2/market_grpo.yaml``),
    then the untrained, SFT and GRPO labs evaluated beside every scripted policy on the same held-out seeds (each
    finished batch kept in ``cells.jsonl``, replayed on a rerun). Tasks and sizes come from the recipe's
    ``market_<family>`` section (the tiny model's 4k context fits ``single_trade`` only). With SmolLM2's full preset
    the model rows then join ``artifacts/eval_market.json`` beside the scripted policies' 500-seed rows, marked as
    played on the first seeds, with the scripted rows of those same seeds under ``same_seeds`` (model rows joined
    there earlier are kept)."""
    family = "market_tiny" if model == "tiny" else "market_smollm2"
    size = {k: _stage_flags("smoke" if smoke else preset, k, family=family) for k in ("sft", "grpo", "evaluate")}
    tasks = yaml.safe_load(RECIPE.read_text())[family]["tasks"]
    task_of = {k: _take_flag(v, "--tasks") for k, v in size.items() if "--tasks" in v}  # a stage's own subset
    curve = "tiny_market" if model == "tiny" else "smollm2_market"  # names its artifacts, curves and rows
    base = str(work / "tiny-base") if model == "tiny" else model
    sft, grpo = work / "sft" / "final", work / "grpo" / "final"
    s = ["--smoke"] if smoke else []
    # the trained lab first, its start next, the untrained model last: an evaluation that spans sessions (hours on a
    # CPU, and the untrained model writes every reply to its token limit) has its headline rows soonest
    models = {f"{curve}_grpo": str(grpo), f"{curve}_sft": str(sft), f"{curve}_base": base}
    plan = [
        *([("tiny", ["training/build_tiny.py", "--out", base])] if model == "tiny" else []),
        ("sft", ["training/sft.py", *s, "--env", "market", "--tasks", task_of.get("sft", tasks), "--model", base, *size["sft"],
                 "--output_dir", str(work / "sft"), "--curve", str(art / f"sft_{curve}_training_curve.json")]),
        ("grpo", ["training/grpo.py", *s, *([] if model == "tiny" else
                                            ["--config", str(MARKET_GRPO_RECIPE.relative_to(REPO_ROOT))]),
                  "--env", "market", "--tasks", task_of.get("grpo", tasks), *recipe_flags(RECIPE, "rl"), *size["grpo"],
                  "--model_name_or_path", str(sft), "--output_dir", str(work / "grpo"),
                  "--episode_log", str(work / "grpo" / "episodes"),
                  "--curve", str(art / f"grpo_{curve}_training_curve.json")]),
        ("evaluate", ["training/evaluate.py", "--env", "market", "--tasks", tasks, "--policies", "all",
                      "--models", ",".join(f"{k}={v}" for k, v in models.items()), *size["evaluate"],
                      "--cell_cache", str(work / "evaluate" / "cells.jsonl"), "--out", str(art / f"eval_{curve}.json"),
                      "--transcripts", str(art / "transcripts" / f"eval_{curve}.jsonl"), "--progress", "false"]),
    ]
    if model != "tiny" and preset in MARKET_SHIPPED:  # the shipped run's rows join the shipped market table
        plan.append(("join_evaluate", ["training/evaluate.py", "--env", "market", "--policies", "all",
                                       "--include_rows", f"{art / f'eval_{curve}.json'},{art / 'eval_market.json'}",
                                       "--out", str(art / "eval_market.json"),
                                       "--transcripts", str(art / "transcripts" / "eval_market.jsonl"),
                                       "--progress", "false"]))
    return plan


def market_results_md(eval_file: Path, prefix: str = "smollm2_market_") -> str:
    """The card's results: per task, the model labs' rows of ``eval_file`` beside the expert, the best scripted
    baseline and ``idle`` (doing nothing, reward 0) on the same seeds, as written by the evaluation."""
    from env.market import BASELINES  # noqa: PLC0415

    try:
        rows = json.loads(eval_file.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return ""
    lines = ["| task | lab 0 | episodes | reward (95% CI) | refused actions | deals/game | jobs done |",
             "|---|---|---|---|---|---|---|"]
    for task in dict.fromkeys(r["task"] for r in rows if r["policy"].startswith(prefix)):
        here = [r for r in rows if r["task"] == task]
        best = max((r for r in here if r["policy"] in BASELINES), key=lambda r: r["reward_mean"], default=None)
        picked = [r for r in here if r["policy"].startswith(prefix)] + [
            r for r in (next((r for r in here if r["policy"] == "expert"), None), best,
                        next((r for r in here if r["policy"] == "idle"), None)) if r]
        for r in picked:
            lo, hi = r["reward_ci95"]
            who = r["policy"] + (" (best baseline)" if r is best else "")
            lines.append(f"| {task} | {who} | {r['episodes']} | {r['reward_mean']:+.3f} ({lo:+.3f}, {hi:+.3f}) | "
                         f"{r['invalid_rate']:.1%} | {r['deals_mean']:.2f} | {r['job_completion_rate']:.0%} |")
    return ("Measured (greedy, held-out seeds, `" + relative(str(eval_file)) + "`; reward 0 is doing nothing):\n\n"
            + "\n".join(lines)) if len(lines) > 2 else ""


def ship_market_adapter(final: Path, ship: Path, done: list[dict]) -> None:
    """Copy the market GRPO LoRA adapter where the Space seats it as lab 0 (``HAGGLE_MARKET_MODEL`` overrides), with
    a card naming its rows and curves, the rows themselves and a note of how it was made."""
    _ship_lora(final, ship, done, {"eval_policy": "smollm2_market_grpo", "eval_file": "eval_market.json",
                                   "market_before_after": "transcripts/eval_smollm2_market.jsonl",
                                   "curves": ["sft_smollm2_market_training_curve.json",
                                              "grpo_smollm2_market_training_curve.json"]},
               "A LoRA adapter over SmolLM2-135M-Instruct playing lab 0 of the GPU market: SFT on the market expert's "
               "games, then GRPO with the environment's reward", "--model smollm2-135m --env market",
               "Its evaluations are the `smollm2_market_*` rows of `artifacts/eval_smollm2_market.json` (and, joined, of "
               "`artifacts/eval_market.json`); each stage's commit, code and wall time are in "
               "`artifacts/pipeline_smollm2_market.json`.\n\n"
               + market_results_md(ship.parent.parent / "eval_smollm2_market.json"))


def _take_flag(flags: list[str], name: str) -> str:
    """Remove ``name`` and its value from ``flags``; return the value."""
    i = flags.index(name)
    value = flags[i + 1]
    del flags[i:i + 2]
    return value


def _stage_flags(preset: str, stage: str, family: str = "") -> list[str]:
    """The flags ``preset`` gives ``stage`` (none when the recipe names none); ``family`` reads the
    recipe's section for another model family (``smollm2``)."""
    recipe = yaml.safe_load(RECIPE.read_text())
    presets = recipe[family] if family else recipe["presets"]
    return [flag for key, value in ((presets.get(preset) or {}).get(stage) or {}).items()
            for flag in (f"--{key}", str(value).lower() if isinstance(value, bool) else str(value))]


def ship_checkpoint(final: Path, ship: Path, done: list[dict]) -> None:
    """Copy the trained tiny buyer where the Space finds it, with a note of the commands that made it."""
    ship.mkdir(parents=True, exist_ok=True)
    for f in SHIP:
        if (final / f).exists():
            shutil.copy2(final / f, ship / f)
    write_json(ship / "card.json", {"eval_buyer": "grpo", "curves": ["sft_training_curve.json",
                                                                      "grpo_training_curve.json"]})
    made = "\n".join(f"    {d['command']}" for d in done if d["stage"] in ("tiny", "sft", "grpo"))
    (ship / "PROVENANCE.md").write_text(
        f"# grpo-tiny\n\nThe tiny Qwen3-architecture buyer (3.4 M parameters) after SFT on expert games and GRPO "
        f"(option_a), copied from `{final}` by `python training/pipeline.py`. Made on this CPU by:\n\n{made}\n\n"
        "Its evaluation on the held-out test split is the `grpo` rows of `artifacts/eval_results.json`; "
        "the commit and wall time of each stage are in `artifacts/pipeline.json`.\n")


def ship_adapter(final: Path, ship: Path, done: list[dict],
                 curves: tuple[str, str] = ("sft_smollm2_training_curve.json", "grpo_smollm2_training_curve.json"),
                 ) -> None:
    """Copy the GRPO LoRA adapter where the Space finds it (its weights as trained: the evaluations are of
    ``final``, so of these very weights), with a card (the evaluation row the Space shows; ``curves``: its SFT and
    GRPO training curves under ``artifacts/``) and a note of how it was made. An SFT start the pipeline did not
    train (``--sft-from``) is named by its curve's own recorded command."""
    sft_made = [] if any(d["stage"] == "sft" for d in done) else _curve_stage("sft", curves[0])
    _ship_lora(final, ship, [*sft_made, *done], {"eval_buyer": "smollm2_grpo", "eval_file": "eval_smollm2.json",
                                                 "curves": list(curves), "before_after": "before_after_smollm2.json"},
               "A LoRA adapter over SmolLM2-135M-Instruct after SFT and GRPO against the scripted seller mix",
               "--model smollm2-135m",
               "Its evaluations are the `smollm2_grpo` rows of `artifacts/eval_smollm2.json`; each stage's commit, "
               "code and wall time are in `artifacts/pipeline_smollm2.json`.")


def _ship_lora(final: Path, ship: Path, done: list[dict], card: dict, what: str, flags: str, rows: str) -> None:
    """A SmolLM2 LoRA adapter copied to ``ship`` with its ``card`` and a PROVENANCE.md: ``what`` it is, the pipeline
    ``flags`` that made it, each training stage's command, wall time and hardware, and where its ``rows`` are."""
    ship.mkdir(parents=True, exist_ok=True)
    for f in ("adapter_config.json", "adapter_model.safetensors", "lineage.json"):
        if (final / f).exists():
            shutil.copy2(final / f, ship / f)
    write_json(ship / "card.json", card)
    made = "\n".join(f"    {relative(d['command'])}  # {d['stage']}: {'the last process ' * bool(d.get('last_process_only'))}"
                     f"{d['wall_time_s'] / 3600:.1f} h on {d['hardware']}"
                     for d in map(with_segments, done) if d["stage"] in ("sft", "grpo"))
    (ship / "PROVENANCE.md").write_text(
        f"# {ship.name}\n\n{what}, copied from `{relative(str(final))}` by `python training/pipeline.py {flags}`. "
        f"Made by:\n\n{made}\n\n{rows}\n")


def _curve_stage(stage: str, curve: str) -> list[dict]:
    """A stage record (command, wall time, hardware) read from a training curve's provenance under ``artifacts/``,
    for a stage the pipeline did not run (``with_segments`` makes it the whole run's when it resumed); none when
    the curve says none."""
    try:
        prov = json.loads((REPO_ROOT / "artifacts" / curve).read_text())["provenance"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if not prov.get("command") or prov.get("wall_time_s") is None:
        return []
    return [{"stage": stage, "command": prov["command"], "wall_time_s": prov["wall_time_s"],
             "hardware": prov.get("machine") or "an unrecorded machine", "last_process_only": not prov.get("segments")}]


def with_segments(record: dict) -> dict:
    """A stage's record with the whole of its training when it resumed across runs: the pipeline times only the
    run that finished it, while the stage's curve (its ``--curve``) records every segment (start, steps, wall
    time, machine). Then ``wall_time_s`` is the segments' sum and ``hardware`` every machine they ran on; the
    finishing run's own time stays as ``last_run_wall_time_s``."""
    words = record.get("command", "").split()
    curve = Path(words[words.index("--curve") + 1]) if "--curve" in words[:-1] else None
    if curve is None and "--config" in words[:-1]:  # a whole recipe (--grpo-recipe) names its curve itself
        try:
            named = (yaml.safe_load((REPO_ROOT / words[words.index("--config") + 1]).read_text()) or {}).get("curve")
        except (OSError, yaml.YAMLError, AttributeError):
            named = None
        curve = Path(named) if named else None
    try:
        segments = json.loads((REPO_ROOT / curve).read_text())["provenance"]["segments"] if curve else None
    except (OSError, ValueError, KeyError, TypeError):
        segments = None
    if not segments or len(segments) < 2:
        return record
    machines = list(dict.fromkeys(seg.get("machine") or "an unrecorded machine" for seg in segments))
    return {**record, "wall_time_s": sum(seg["wall_time_s"] for seg in segments), "segments": len(segments),
            "last_run_wall_time_s": record["wall_time_s"], "hardware": "; ".join(machines)}


STAGE_MARK = "pipeline_command.txt"  # in a stage's --output_dir: the command that wrote its checkpoints


def fresh_or_resume(cmd: list[str], command: str, code: str = "", across_code: bool = False) -> str:
    """Every training script resumes from the last checkpoint in its ``--output_dir``. That is right
    for an interrupted run of the same command on the same code, and wrong for a changed one (a new
    recipe, or new code under the same command line, would resume from the old run's last step and
    train no further). So a stage's folder records the command that writes it and the code it ran
    (``code``, training.common.provenance.code_version); a folder written by another command or other code
    (or by an unknown one) is moved aside, never deleted, and the stage starts fresh. Returns what
    was done, for the log. ``across_code`` resumes a folder written by the same command on other code
    (a run longer than a session, resumed after other work landed); its mark then names each code."""
    if "--output_dir" not in cmd:
        return ""
    out = Path(cmd[cmd.index("--output_dir") + 1])
    mark = out / STAGE_MARK
    note = ""
    if out.exists() and any(out.iterdir()):
        recorded, codes = _read_mark(mark)
        same_command = recorded is not None and relative(recorded) == relative(command)  # any checkout's path
        if same_command and (code in codes or not (code or codes)):
            return f"resuming {out} (same command, same code)"
        if across_code and same_command:
            # a run that spans sessions between which other code landed: resumed, and the mark lists every
            # code it ran on, once each
            mark.write_text(_mark(command, " ".join([*codes, code] if code else codes)))
            return f"resuming {out} (same command, begun on other code: --resume-across-code)"
        n = 1
        while (aside := out.with_name(f"{out.name}.superseded-{n}")).exists():
            n += 1
        out.rename(aside)
        note = f"{out} was written by another command or other code: moved to {aside}, starting fresh"
    out.mkdir(parents=True, exist_ok=True)
    mark.write_text(_mark(command, code))
    return note


def _mark(command: str, code: str) -> str:
    return f"{command}\ncode {code}" if code else command


def _read_mark(mark: Path) -> tuple[str | None, list[str]]:
    """The command a stage folder was written by and the codes it ran on (``(None, [])`` without a mark)."""
    if not mark.exists():
        return None, []
    command, _, codes = mark.read_text().partition("\ncode ")
    return command, codes.split()


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny settings for every stage")
    ap.add_argument("--model", default="tiny", choices=MODELS, help="the model family trained: the tiny model built "
                    "here, or SmolLM2-135M-Instruct (LoRA; its own presets in the pipeline recipe)")
    ap.add_argument("--env", default="bargain", choices=("bargain", "market"), help="the game: the bilateral "
                    "negotiation (the policy is the buyer) or the GPU market (the policy is lab 0; its own stages)")
    ap.add_argument("--sft-from", default="", help="smollm2: start GRPO from this SFT adapter instead of training "
                    "one (e.g. artifacts/checkpoints/sft-smollm2, whose PROVENANCE.md says how it was made)")
    ap.add_argument("--grpo-recipe", default="", help="smollm2: the GRPO stage is this whole recipe (e.g. "
                    "training/recipes/smollm2/grpo9.yaml: its start is the SFT buyer evaluated, its output folder "
                    "and curve are the recipe's, and its size replaces the preset's), run exactly as "
                    "`python training/grpo.py --config RECIPE`, so a run begun that way is resumed")
    ap.add_argument("--sft-curve", default="", help="smollm2: the SFT start's training curve under artifacts/, "
                    "named on the shipped adapter's card (default: sft_smollm2_training_curve.json, the SFT stage's)")
    ap.add_argument("--resume-across-code", action="store_true", help="resume a stage (or keep a finished one) that "
                    "the same command began on other code, instead of starting it again: for runs longer than a "
                    "session, with other work landing in between (the stage record lists each code it ran on)")
    ap.add_argument("--workdir", default="", help="checkpoints and the tiny base model (default: runs, or "
                    "runs/smollm2 with --model smollm2-135m; runs/market, runs/smollm2-market with --env market)")
    ap.add_argument("--artifacts", default="", help="artifact folder (default: artifacts/, or WORKDIR/artifacts "
                    "with --smoke)")
    ap.add_argument("--eval-scenarios", default="builtin", help="evaluation scenario source (test split)")
    ap.add_argument("--only", default="", help="comma list of stages to run (default: all)")
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS),
                    help="default: at most 60 minutes on a 2-core CPU; full: what the shipped artifacts come from")
    ap.add_argument("--seller-model", default="", help="a model seller for generalisation study (d) (a SmolLM2 "
                    "seller SFT'd on scripted sellers' games); without it (d) is recorded as not run")
    ap.add_argument("--extra-buyers", default="", help="more model buyers for the evaluation stage, name=path,... "
                    "(e.g. smollm2_base=smollm2-135m,smollm2_sft=artifacts/checkpoints/sft-smollm2), evaluated "
                    "at the headline sampling (greedy) only")
    ap.add_argument("--include-rows", default="", help="earlier evaluation artifacts whose model rows join "
                    "eval_results.json (same episodes, checked; e.g. artifacts/eval_smollm2.json)")
    ap.add_argument("--ablation", action="store_true", help="also train and evaluate an option_b SFT buyer (the "
                    "<think> format) beside the option_a one, same data and budget (~25 min more here)")
    ap.add_argument("--skip", default="", help=f"comma list of stages to leave out ({', '.join(SKIPPABLE)}); a "
                    "skipped training stage's model is left out of the evaluations too (e.g. --skip sdpo to save "
                    "~20 minutes of the full preset)")
    ap.add_argument("--restart", action="store_true", help="run every stage again, even those a previous run of the "
                    "same commands finished")
    a = ap.parse_args(argv)
    smollm2, market = a.model != "tiny", a.env == "market"
    if smollm2 and (a.smoke or a.ablation or a.extra_buyers or a.include_rows):
        ap.error("--model smollm2-135m takes none of --smoke, --ablation, --extra-buyers, --include-rows")
    for flag, value in (("--sft-from", a.sft_from), ("--grpo-recipe", a.grpo_recipe), ("--sft-curve", a.sft_curve)):
        if value and (market or not smollm2):
            ap.error(f"{flag} is for --model smollm2-135m in the bilateral game")
    sft_curve = artifact_name(a.sft_curve, REPO_ROOT / "artifacts") if a.sft_curve else ""
    if sft_curve is None or (sft_curve and not (REPO_ROOT / "artifacts" / sft_curve).is_file()):
        ap.error(f"--sft-curve {a.sft_curve}: no such curve under artifacts/")
    if a.grpo_recipe and not a.sft_curve:
        ap.error("--grpo-recipe needs --sft-curve: the training curve of the start it names (checked, and shown on "
                 "the shipped card)")
    grpo_recipe = relative(str(Path(a.grpo_recipe).resolve())) if a.grpo_recipe else ""
    try:
        grpo_run = grpo_recipe_run(REPO_ROOT / grpo_recipe) if grpo_recipe else {}
        if grpo_run:
            check_sft_start(sft_curve, grpo_run["model_name_or_path"])
    except ValueError as exc:
        ap.error(str(exc))
    if market and not a.smoke and a.preset not in yaml.safe_load(RECIPE.read_text())[
            "market_tiny" if a.model == "tiny" else "market_smollm2"]:
        ap.error(f"--env market has no {a.preset!r} preset for --model {a.model} (the tiny model's: smoke, default)")
    if not market and a.preset not in yaml.safe_load(RECIPE.read_text())["smollm2" if smollm2 else "presets"]:
        ap.error(f"--preset {a.preset} is the GPU market's (--env market --model smollm2-135m)")
    if market and (a.ablation or a.extra_buyers or a.include_rows or a.seller_model or a.skip
                   or a.eval_scenarios != "builtin"):
        ap.error("--env market takes none of the bilateral game's options (--ablation, --extra-buyers, "
                 "--include-rows, --seller-model, --skip, --eval-scenarios)")
    default_work = {(False, False): "runs", (True, False): "runs/smollm2", (False, True): "runs/market",
                    (True, True): "runs/smollm2-market"}[smollm2, market]
    work = Path(a.workdir or default_work).resolve()
    art = Path(a.artifacts or (work / "artifacts" if a.smoke else REPO_ROOT / "artifacts")).resolve()
    skip = frozenset(x for x in a.skip.split(",") if x)
    if skip - set(SKIPPABLE):
        ap.error(f"--skip takes stages from {', '.join(SKIPPABLE)}")
    if smollm2 and not market and a.preset == "full" and "generalisation" not in skip and not a.seller_model:
        ap.error("--model smollm2-135m --preset full joins the shipped generalisation studies, study (d) included: "
                 "give it the same --seller-model (artifacts/checkpoints/sft-smollm2-seller), or --skip generalisation")
    try:
        plan = market_stages(work, art, a.model, a.preset, a.smoke) if market else \
            smollm2_stages(work, art, a.preset, a.sft_from, a.seller_model, skip, grpo_recipe) if smollm2 else \
            stages(work, art, a.smoke, a.eval_scenarios, a.preset, a.seller_model, a.extra_buyers, a.include_rows,
                   a.ablation, skip)
    except ValueError as exc:
        ap.error(str(exc))
    only = {x for x in a.only.split(",") if x}
    if only - {n for n, _ in plan}:
        ap.error(f"--only takes stages from {', '.join(n for n, _ in plan)}")
    state_path = work / "pipeline_state.json"  # stages finished by earlier runs of the same commands and code
    finished = {} if a.restart or not state_path.exists() else json.loads(state_path.read_text())
    start = time.perf_counter()
    done, ran, code = [], False, code_version()
    for name, cmd in plan:
        command, earlier = "python " + " ".join(cmd), finished.get(name, {})
        if only and name not in only:  # not run now: the record of the run it relies on, when there is one
            if relative(earlier.get("command", "")) == relative(command):
                done.append({**earlier, "skipped_now": True})
            continue
        if (not ran and relative(earlier.get("command", "")) == relative(command)
                and (earlier.get("code") == code or a.resume_across_code)):
            # after a stage reruns, all later ones do
            print(f"[pipeline] {name}: finished by an earlier run, skipped (--restart to redo)", flush=True)
            done.append({**earlier, "skipped_now": True})
            continue
        ran, t0, started_at = True, time.perf_counter(), git_commit()
        print(f"[pipeline] {name}: {command}", flush=True)
        if earlier.get("command") == command and earlier.get("code") != code:
            print(f"[pipeline] {name}: an earlier run finished this command on other code: running it again",
                  flush=True)
        if note := fresh_or_resume(cmd, command, code, a.resume_across_code):
            print(f"[pipeline] {name}: {note}", flush=True)
        subprocess.run([sys.executable, *cmd], cwd=REPO_ROOT, check=True)
        # the code the stage ran is the commit it started at; its artifacts record HEAD when they were written
        done.append({"stage": name, "command": command, "wall_time_s": time.perf_counter() - t0,
                     "hardware": machine(), "commit": started_at, "commit_at_end": git_commit(), "code": code})
        finished[name] = done[-1]
        write_json(state_path, finished)
    final = REPO_ROOT / grpo_run["output_dir"] / "final" if grpo_run else work / "grpo" / "final"
    if market:
        if final.exists() and smollm2 and a.preset in MARKET_SHIPPED:
            ship_market_adapter(final, art / "checkpoints" / "grpo-smollm2-market", done)
    elif final.exists() and smollm2:
        curves = [sft_curve or "sft_smollm2_training_curve.json",
                  artifact_name(grpo_run["curve"], REPO_ROOT) if grpo_run else "grpo_smollm2_training_curve.json"]
        ship_adapter(final, art / "checkpoints" / "grpo-smollm2", done, curves)
    elif final.exists() and not a.smoke:
        ship_checkpoint(final, art / "checkpoints" / "grpo-tiny", done)
    result = {"provenance": provenance({"model": a.model, "env": a.env, "sft_from": a.sft_from,
                                        "grpo_recipe": grpo_recipe, "sft_curve": sft_curve, "smoke": a.smoke, "preset": a.preset,
                                        "workdir": str(work), "resume_across_code": a.resume_across_code,
                                        "eval_scenarios": a.eval_scenarios, "held_out_seller": HELD_OUT_SELLER,
                                        "temperatures": TEMPERATURES, "seller_model": a.seller_model,
                                        "extra_buyers": a.extra_buyers, "include_rows": a.include_rows,
                                        "ablation": a.ablation, "skip": sorted(skip)},
                                       {"per_stage": "see each artifact's provenance"}, time.perf_counter() - start),
              "stages": [with_segments(d) for d in done]}
    write_json(art / f"pipeline{'_smollm2' * smollm2}{'_market' * market}.json", result)
    return result


if __name__ == "__main__":
    main()
