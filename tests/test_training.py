"""Smoke-sized training pipeline: SFT on expert games, then GRPO on whole episodes."""

from __future__ import annotations

import pytest

import json
import shutil
import subprocess
import sys
from pathlib import Path

from training import sft
from training.games.bargain.config import BargainEvalArgs

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_TINY = ROOT / "artifacts" / "checkpoints" / "grpo-tiny"  # a buyer that deals: rewards that differ

PROVENANCE_KEYS = {"command", "config", "seeds", "commit", "date", "machine", "wall_time_s"}
RL_KEYS = {"step", "reward_mean", "reward_std", "reward_min", "reward_max", "deal_rate", "first_offer_ratio",
           "turns_mean", "format_error_rate", "frac_reward_zero_std"}


@pytest.mark.slow
def test_sft_resumes_from_its_last_checkpoint(tiny_dir, tmp_path, capsys):
    out = tmp_path / "sft"
    _, final = sft.main(["--smoke", "--model", str(tiny_dir), "--output_dir", str(out),
                         "--curve", str(tmp_path / "sft.json")])
    first = json.loads((tmp_path / "sft.json").read_text())
    assert first["provenance"]["config"]["resumed"] is False and [p["step"] for p in first["points"]] == [1, 2]
    assert (final / "config.json").exists() and (final / "tokenizer.json").exists()
    assert first["provenance"]["config"]["precision_measured"] is None  # --bf16 as given: nothing measured
    sft.main(["--smoke", "--model", str(tiny_dir), "--output_dir", str(out), "--max_steps", "3",
              "--curve", str(tmp_path / "sft2.json"), "--precision", "auto"])
    again = json.loads((tmp_path / "sft2.json").read_text())
    assert again["provenance"]["config"]["resumed"] is True
    assert [p["step"] for p in again["points"]][-1] == 3
    config = again["provenance"]["config"]  # --precision auto: this machine timed both, trained in the faster
    measured = config["precision_measured"]
    assert set(measured["flops"]) == {"float32", "bfloat16"} and all(v > 0 for v in measured["flops"].values())
    assert config["sft"]["bf16"] == (measured["choice"] == "bfloat16") == config["precision"].startswith("bfloat16")
    with pytest.raises(SystemExit):
        sft.main(["--smoke", "--model", str(tiny_dir), "--output_dir", str(out), "--precision", "fp16"])
    assert "--precision must be auto, float32 or bfloat16" in capsys.readouterr().err


@pytest.mark.slow
def test_smoke_pipeline_writes_every_artifact(tmp_path):
    """tiny model -> SFT -> GRPO -> SDPO -> evaluation, at smoke size, through the one command."""
    proc = subprocess.run([sys.executable, "training/pipeline.py", "--smoke", "--workdir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    art = tmp_path / "artifacts"
    pipe = json.loads((art / "pipeline.json").read_text())
    assert [s["stage"] for s in pipe["stages"]] == ["tiny", "sft", "sft_option_b", "grpo", "sdpo", "evaluate",
                                                    "before_after", "generalisation"]
    ba = json.loads((art / "before_after.json").read_text())
    assert ba["buyers"] == ["base", "sft", "grpo", "sdpo"]
    assert [g["interest"] for g in ba["games"]].count("conflicting") == 1
    sft_curve = json.loads((art / "sft_training_curve.json").read_text())
    assert PROVENANCE_KEYS <= set(sft_curve["provenance"])
    assert all({"step", "loss", "learning_rate", "grad_norm", "mean_token_accuracy"} <= set(p)
               for p in sft_curve["points"])
    for name, curve_name in (("grpo", "grpo"), ("sdpo", "sdpo")):
        curve = json.loads((art / f"{curve_name}_training_curve.json").read_text())
        assert PROVENANCE_KEYS <= set(curve["provenance"]) and curve["points"]
        for p in curve["points"]:
            assert RL_KEYS <= set(p) and -1 <= p["reward_min"] <= p["reward_mean"] <= p["reward_max"] <= 1
        assert curve["provenance"]["command"].startswith(f"python training/{name}.py")
        if name == "sdpo":
            assert all("sdpo/lambda" in p for p in curve["points"])
    ev = json.loads((art / "eval_results.json").read_text())
    assert PROVENANCE_KEYS <= set(ev["provenance"])
    buyers = {r["buyer"] for r in ev["rows"]}
    assert {"base", "sft", "grpo", "sdpo", "expert", "sft_option_b"} <= buyers
    modes = {r["buyer"]: r["reasoning_mode"] for r in ev["rows"]}
    assert modes["sft_option_b"] == "option_b" and modes["grpo"] == modes["sft"] == "option_a"
    b_curve = json.loads((art / "sft_option_b_training_curve.json").read_text())
    assert b_curve["provenance"]["config"]["script"]["reasoning_mode"] == "option_b" and b_curve["points"]
    assert {r["buyer"] for r in ev["rows"] if r["seller"] == "mix"} == buyers
    assert all(r["split"] == "test" for r in ev["rows"])
    lines = (art / "transcripts" / "eval_results.jsonl").read_text().splitlines()
    pairs = {}
    for line in lines:
        t = json.loads(line)
        pairs.setdefault((t["seller"], t["scenario"]["id"], t["seed"]), set()).add(t["buyer"])
    assert any({"base", "grpo"} <= b for b in pairs.values()), "before/after: same scenario and seed"


def test_sdpo_hindsight_never_shows_the_cost():
    from env.bargain.evaluation import episode_seed
    from env.bargain.sources import get_split
    from training.games.bargain.rollout import play_episodes
    from training.rl.hindsight import hindsight

    scenarios = get_split("builtin", "train")[:8]
    eps = [(s, episode_seed(i, 0, 1)) for i, s in enumerate(scenarios)]
    for buyer in ("expert", "lowballer", "random_valid"):
        records = play_episodes(eps, buyer, "neutral")
        for rec, (sc, _) in zip(records, eps):
            note = hindsight(rec, records)
            assert "cost" not in note.lower()
            for form in (f"${sc.cost:,.2f}", f"{sc.cost:.2f}"):
                if form not in str(rec.transcript["turns"]):  # unless the seller said that price aloud
                    assert form not in note
            assert "Hindsight feedback" in note and ("deal" in note or "no deal" in note or "reward" in note)
        if buyer == "expert":  # siblings that did better with a positive reward become demonstrations
            best = max(x.reward for x in records)
            assert best > 0 and all("A better game" in hindsight(r, records) for r in records if r.reward < best)


def test_shipped_training_artifacts_follow_the_contract():
    art = ROOT / "artifacts"
    sft_curve = json.loads((art / "sft_training_curve.json").read_text())
    assert PROVENANCE_KEYS <= set(sft_curve["provenance"]) and len(sft_curve["points"]) > 10
    assert sft_curve["points"][-1]["loss"] < sft_curve["points"][0]["loss"]
    for name in ("grpo", "sdpo"):
        curve = json.loads((art / f"{name}_training_curve.json").read_text())
        assert PROVENANCE_KEYS <= set(curve["provenance"])
        assert all(RL_KEYS <= set(p) for p in curve["points"])
    ev = json.loads((art / "eval_results.json").read_text())
    assert PROVENANCE_KEYS <= set(ev["provenance"])
    mix = {r["buyer"]: r for r in ev["rows"] if r["seller"] == "mix"}
    assert {"base", "sft", "grpo", "sdpo", "expert"} <= set(mix)
    assert all(r["split"] == "test" for r in ev["rows"])
    assert ev["provenance"]["config"]["seed_base"] >= 1_000_000, "evaluation seeds never used in training"
    assert mix["sft"]["reasoning_mode"] == "option_a"
    # the reasoning-format ablation (pipeline --ablation), where shipped: trained like the option_a one
    if "sft_option_b" in mix:
        assert mix["sft_option_b"]["reasoning_mode"] == "option_b"
        a_cfg, b_cfg = (json.loads((art / f).read_text())["provenance"]["config"]["script"]
                        for f in ("sft_training_curve.json", "sft_option_b_training_curve.json"))
        assert {**a_cfg, "reasoning_mode": "option_b", "curve": ""} == {**b_cfg, "curve": ""}, "same SFT budget"
    # every shipped artifact of the training pipeline comes from the same run's checkpoints
    for f in ("eval_results.json", "grpo_training_curve.json", "sdpo_training_curve.json"):
        data = json.loads((art / f).read_text())  # a joined table: the tiny rows' command is the artifact they joined from
        commands = [data["provenance"]["command"], *(i["command"] for i in (data.get("included_rows") or {}).values()
                                                     if "grpo" in i.get("buyers", []))]
        assert any("runs/sft/final" in c for c in commands), f
    # the one command recorded every stage and its wall time
    pipe = json.loads((art / "pipeline.json").read_text())
    # the shipped artifacts come from one run of the pipeline: its stages in the plan's order
    ran = [s["stage"] for s in pipe["stages"]]
    order = ["tiny", "sft", "sft_option_b", "grpo", "sdpo", "evaluate", "before_after", "generalisation"]
    assert {"tiny", "sft", "grpo", "sdpo", "evaluate"} <= set(ran) and ran == sorted(ran, key=order.index), ran
    # this invocation's wall time covers the stages it ran; a stage an earlier run finished says so
    assert pipe["provenance"]["wall_time_s"] >= sum(s["wall_time_s"] for s in pipe["stages"] if not s.get("skipped_now"))
    assert all(s["wall_time_s"] > 0 and s["commit"] for s in pipe["stages"])


def test_presets_keep_a_seller_out_of_training_and_the_full_one_trains_on_10k_episodes(tmp_path):
    from env.bargain.players import SELLERS
    from training import pipeline
    from training.rl import run as rl_run
    for preset in ("default", "full"):
        plan = dict(pipeline.stages(tmp_path, tmp_path / "art", False, "builtin", preset))
        for name in ("sft", "grpo", "sdpo"):
            cmd = plan[name]
            sellers = cmd[cmd.index("--sellers") + 1].split(",")
            assert pipeline.HELD_OUT_SELLER not in sellers and len(sellers) == len(SELLERS) - 1
        # every training stage plays the same products: the catalog and generated ones, never the test split
        assert {plan[name][plan[name].index("--scenarios") + 1] for name in ("sft", "grpo", "sdpo")} == \
            {pipeline.TRAIN_SCENARIOS}
        assert plan["generalisation"][plan["generalisation"].index("--train_source") + 1] == pipeline.TRAIN_SCENARIOS
        # both RL stages hold the policy near its SFT start with the same KL weight
        betas = {float(plan[name][plan[name].index("--beta") + 1]) for name in ("grpo", "sdpo")}
        assert len(betas) == 1 and betas.pop() > 0
        ev = plan["evaluate"]
        assert ev[ev.index("--temperatures") + 1] == "0,0.7"
        gen = plan["generalisation"]
        assert gen[gen.index("--held_out_seller") + 1] == pipeline.HELD_OUT_SELLER
        steps = int(plan["grpo"][plan["grpo"].index("--max_steps") + 1])
        cfg = rl_run.HaggleGRPOConfig(output_dir=str(tmp_path))
        episodes = steps * cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
        assert episodes >= (10_000 if preset == "full" else 1_000), (preset, episodes)
        assert "sft_option_b" not in plan  # the ablation is asked for
        ablation = dict(pipeline.stages(tmp_path, tmp_path / "art", False, "builtin", preset, ablation=True))
        assert ablation["sft_option_b"][ablation["sft_option_b"].index("--reasoning_mode") + 1] == "option_b"
        assert "sft_option_b=" in ablation["evaluate"][ablation["evaluate"].index("--buyer_models") + 1]


def test_a_changed_stage_starts_fresh_and_an_interrupted_one_resumes(tmp_path):
    from training.pipeline import fresh_or_resume
    out = tmp_path / "grpo"
    old = ["training/grpo.py", "--max_steps", "160", "--output_dir", str(out)]
    new = ["training/grpo.py", "--max_steps", "160", "--beta", "0.04", "--output_dir", str(out)]
    fresh_or_resume(old, " ".join(old))
    (out / "checkpoint-160").mkdir()
    # the same command again (an interrupted run): its checkpoints stay where the script resumes from them
    assert "resuming" in fresh_or_resume(old, " ".join(old)) and (out / "checkpoint-160").exists()
    # a changed command: the old run is moved aside whole, and the new one finds no checkpoint to resume
    assert "moved" in fresh_or_resume(new, " ".join(new))
    assert not any(out.glob("checkpoint-*")) and (tmp_path / "grpo.superseded-1" / "checkpoint-160").exists()
    # a folder from before the pipeline marked its folders (no record of its command) is not trusted either
    legacy = tmp_path / "sdpo"
    (legacy / "checkpoint-40").mkdir(parents=True)
    cmd = ["training/sdpo.py", "--output_dir", str(legacy)]
    assert "moved" in fresh_or_resume(cmd, " ".join(cmd)) and not any(legacy.glob("checkpoint-*"))
    assert (tmp_path / "sdpo.superseded-1" / "checkpoint-40").exists()
    # the same command on other code (a changed recipe inside a script, its defaults): fresh too
    fresh_or_resume(new, " ".join(new), code="aaa")
    (out / "checkpoint-20").mkdir()
    assert "resuming" in fresh_or_resume(new, " ".join(new), code="aaa")
    assert "moved" in fresh_or_resume(new, " ".join(new), code="bbb") and not any(out.glob("checkpoint-*"))
    # a run longer than a session, with other work landing in between (--resume-across-code): the same
    # command resumes on other code, and its mark names both codes; a changed command is still fresh
    (out / "checkpoint-30").mkdir()
    assert "resuming" in fresh_or_resume(new, " ".join(new), code="ccc", across_code=True)
    assert (out / "checkpoint-30").exists() and (out / "pipeline_command.txt").read_text().endswith("code bbb ccc")
    # resumed again on a code it ran on: listed once, and a plain resume (no flag) on either code is the same run
    assert "resuming" in fresh_or_resume(new, " ".join(new), code="ccc", across_code=True)
    assert (out / "pipeline_command.txt").read_text().endswith("code bbb ccc")
    assert "same code" in fresh_or_resume(new, " ".join(new), code="bbb")
    assert "moved" in fresh_or_resume(old, " ".join(old), code="ccc", across_code=True)
    assert not any(out.glob("checkpoint-*"))


def test_a_run_begun_in_another_checkout_resumes_from_this_one(tmp_path):
    """A stage's mark holds the command with the checkout's absolute paths; the next session's checkout may sit
    elsewhere: the same command with this checkout's paths is the same run, a changed one is not."""
    from training.common.provenance import REPO_ROOT
    from training.pipeline import STAGE_MARK, fresh_or_resume
    out = REPO_ROOT / "runs" / f"test-mark-{tmp_path.name}"
    cmd = ["training/grpo.py", "--max_steps", "48", "--output_dir", str(out), "--curve", f"{REPO_ROOT}/artifacts/c.json"]
    try:
        out.mkdir(parents=True)
        (out / "checkpoint-24").mkdir()
        elsewhere = " ".join(cmd).replace(str(REPO_ROOT), "/check/work/main")
        (out / STAGE_MARK).write_text(f"{elsewhere}\ncode aaa")
        assert "resuming" in fresh_or_resume(cmd, " ".join(cmd), code="aaa") and (out / "checkpoint-24").exists()
        changed = [*cmd, "--beta", "0.1"]
        assert "moved" in fresh_or_resume(changed, " ".join(changed), code="aaa")
    finally:
        import shutil
        for d in out.parent.glob(f"{out.name}*"):
            shutil.rmtree(d)


def test_the_smollm2_pipeline_trains_from_an_sft_adapter_on_1500_episodes_and_evaluates_350(tmp_path):
    """The stages of ``--model smollm2-135m --preset full``: GRPO from the given SFT adapter with the SmolLM2
    recipe (as its own parser reads the command: the recipe's values, the preset's and the pipeline's flags
    on top), the held-out persona out of training, at least 1,500 episodes, and an evaluation of every
    SmolLM2 buyer beside the expert on the whole builtin test split against all seven sellers."""
    from trl import ModelConfig, TrlParser

    from env.bargain.players import SELLERS
    from training import pipeline
    from training.common.cli import parse
    from training.rl.run import GRPOScriptArguments, HaggleGRPOConfig

    sft = "artifacts/checkpoints/sft-smollm2"
    plan = dict(pipeline.smollm2_stages(tmp_path, tmp_path / "art", "full", sft_from=sft))
    # the SFT stage is the given one; the full preset's rows then join the shipped tables
    assert list(plan) == ["grpo", "evaluate", "before_after", "generalisation", "join_evaluate", "join_generalisation"]
    sft_stage = dict(pipeline.smollm2_stages(tmp_path, tmp_path / "art", "full"))["sft"]
    assert sft_stage[sft_stage.index("--precision") + 1] == "auto"  # SFT measures this machine too
    market_sft = dict(pipeline.market_stages(tmp_path, tmp_path / "art", "smollm2-135m", "full", False))["sft"]
    assert market_sft[market_sft.index("--precision") + 1] == "auto" and "--bf16" not in market_sft
    grpo = plan["grpo"]
    (script, cfg, model), _ = parse(TrlParser((GRPOScriptArguments, HaggleGRPOConfig, ModelConfig)), grpo[1:], "grpo")
    assert model.model_name_or_path == sft and cfg.output_dir == str(tmp_path / "grpo")
    assert cfg.beta > 0 and cfg.max_steps * cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps >= 1500
    assert script.precision == "auto"  # CPUs here differ 2x each way in bf16 against fp32: measured at start
    assert pipeline.HELD_OUT_SELLER not in script.sellers and script.scenarios == pipeline.TRAIN_SCENARIOS
    assert script.curve == str(tmp_path / "art" / "grpo_smollm2_training_curve.json")
    ev = plan["evaluate"]
    buyers = dict(b.split("=", 1) for b in ev[ev.index("--buyer_models") + 1].split(","))
    assert buyers == {"smollm2_base": "smollm2-135m", "smollm2_sft": sft, "smollm2_grpo": str(tmp_path / "grpo" / "final")}
    assert "expert" in ev[ev.index("--buyers") + 1] and "--limit" not in ev and "--cell_cache" in ev
    assert 50 * len(SELLERS) * int(ev[ev.index("--seeds") + 1]) >= 350
    # the tiny buyers' episodes (same seeds), so the rows can join artifacts/eval_results.json
    tiny_eval = dict(pipeline.stages(tmp_path, tmp_path / "art", False, "builtin", "full"))["evaluate"]
    join = plan["join_evaluate"]
    assert ev[ev.index("--seeds") + 1] == tiny_eval[tiny_eval.index("--seeds") + 1] == join[join.index("--seeds") + 1]
    assert join[join.index("--include_rows") + 1].split(",") == [str(tmp_path / "art" / "eval_smollm2.json"),
                                                                 str(tmp_path / "art" / "eval_results.json")]
    assert join[join.index("--out") + 1] == str(tmp_path / "art" / "eval_results.json")
    gen, tiny_gen = plan["generalisation"], dict(pipeline.stages(tmp_path, tmp_path / "art", False, "builtin",
                                                                 "full"))["generalisation"]
    for flag in ("--seeds", "--limit", "--held_out_seller", "--train_source"):
        assert (flag in gen) == (flag in tiny_gen) and (flag not in gen or
                                                         gen[gen.index(flag) + 1] == tiny_gen[tiny_gen.index(flag) + 1])
    assert "join_evaluate" not in dict(pipeline.smollm2_stages(tmp_path, tmp_path / "art", "default", sft_from=sft))
    bad = subprocess.run([sys.executable, "training/pipeline.py", "--sft-from", sft], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "--sft-from is for --model smollm2-135m" in bad.stderr
    no_seller = subprocess.run([sys.executable, "training/pipeline.py", "--model", "smollm2-135m", "--preset", "full",
                                "--sft-from", sft], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert no_seller.returncode == 2 and "--seller-model" in no_seller.stderr, "study (d) would drop from the table"


def test_the_smollm2_pipeline_runs_a_whole_grpo_recipe_as_begun_and_ships_it_with_its_sft_start(tmp_path, capsys,
                                                                                                   monkeypatch):
    """``--grpo-recipe``: the GRPO stage is the recipe run exactly as ``grpo.py --config RECIPE`` (so a run begun by
    hand resumes: its folder is never moved aside), its start is the SFT buyer evaluated and its output the GRPO
    buyer. A recipe, or an SFT start (its ``--sft-curve``), that trained on what the evaluations hold out is
    refused. The shipped card names the start's curve, and PROVENANCE.md its command, read from that curve."""
    import yaml

    from training import pipeline
    recipe = "training/recipes/smollm2/grpo9.yaml"
    run = yaml.safe_load((ROOT / recipe).read_text())
    plan = dict(pipeline.smollm2_stages(tmp_path, tmp_path / "art", "full", grpo_recipe=recipe))
    assert list(plan) == ["grpo", "evaluate", "before_after", "generalisation", "join_evaluate", "join_generalisation"]
    assert plan["grpo"] == ["training/grpo.py", "--config", recipe]
    ev = plan["evaluate"]
    buyers = dict(b.split("=", 1) for b in ev[ev.index("--buyer_models") + 1].split(","))
    assert buyers["smollm2_sft"] == run["model_name_or_path"]
    assert buyers["smollm2_grpo"] == str(Path(run["output_dir"]) / "final")
    with pytest.raises(ValueError, match="not the start"):
        pipeline.smollm2_stages(tmp_path, tmp_path / "art", "full", sft_from="elsewhere", grpo_recipe=recipe)
    # a run begun by hand (checkpoints, no pipeline mark) is resumed, not moved aside
    begun = tmp_path / "begun.yaml"
    begun.write_text(yaml.safe_dump({**run, "output_dir": str(tmp_path / "grpo-run")}))
    (tmp_path / "grpo-run" / "checkpoint-18").mkdir(parents=True)
    cmd = dict(pipeline.smollm2_stages(tmp_path, tmp_path / "art", "full", grpo_recipe=str(begun)))["grpo"]
    pipeline.fresh_or_resume(cmd, " ".join(cmd), code="other code")
    assert (tmp_path / "grpo-run" / "checkpoint-18").is_dir()
    for change, match in (({"sellers": run["sellers"] + "," + pipeline.HELD_OUT_SELLER}, "held out"),
                          ({"scenarios": "builtin"}, "not 'builtin\\+synthetic'"),
                          ({"curve": "runs/curve.json"}, "outside artifacts"),
                          ({"curve": "artifacts/../curve.json"}, "outside artifacts"), ({"output_dir": None}, "output_dir")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(yaml.safe_dump({**run, **change}))
        with pytest.raises(ValueError, match=match):
            pipeline.grpo_recipe_run(bad)
    # the start's own curve: this start's, on the training distribution, the held-out persona left out
    good = {"provenance": {"command": "python training/sft.py --teacher steady --games 1600", "wall_time_s": 3240.0,
                           "machine": "host C", "config": {"checkpoint": "runs/start/final", "script": {
                               "sellers": run["sellers"], "scenarios": pipeline.TRAIN_SCENARIOS}}}}
    (tmp_path / "artifacts").mkdir()
    for name, change, match in (("good", {}, None), ("other", {"checkpoint": "runs/other/final"}, "not of the start"),
                                ("all", {"script": {"sellers": "all", "scenarios": pipeline.TRAIN_SCENARIOS}},
                                 pipeline.HELD_OUT_SELLER),
                                ("builtin", {"script": {"sellers": run["sellers"], "scenarios": "builtin"}}, "builtin")):
        curve = {"provenance": {**good["provenance"], "config": {**good["provenance"]["config"], **change}}}
        (tmp_path / "artifacts" / f"{name}.json").write_text(json.dumps(curve))
        monkeypatch.setattr(pipeline, "REPO_ROOT", tmp_path)
        if match is None:
            assert pipeline.check_sft_start(f"{name}.json", "runs/start/final")["scenarios"] == pipeline.TRAIN_SCENARIOS
        else:
            with pytest.raises(ValueError, match=match):
                pipeline.check_sft_start(f"{name}.json", "runs/start/final")
        monkeypatch.undo()
    with pytest.raises(ValueError, match=pipeline.HELD_OUT_SELLER):  # the steady student first trained: every seller
        pipeline.check_sft_start("probes/sft_steady1600_smollm2_training_curve.json", "runs/smollm2/sft_steady1600/final")
    for argv, said in ((["--grpo-recipe", recipe], "--grpo-recipe is for --model smollm2-135m"),
                       (["--model", "smollm2-135m", "--grpo-recipe", recipe], "needs --sft-curve"),
                       (["--model", "smollm2-135m", "--grpo-recipe", recipe, "--sft-curve", "/etc/hostname"],
                        "no such curve under artifacts/")):
        with pytest.raises(SystemExit):
            pipeline.main(argv)
        assert said in capsys.readouterr().err
    # a recipe's command names no --curve: its segments are read from the curve the recipe names
    curve = tmp_path / "artifacts" / "grpo_curve.json"
    curve.write_text(json.dumps({"provenance": {"segments": [{"wall_time_s": 3600.0, "machine": "host A"},
                                                             {"wall_time_s": 1800.0, "machine": "host B"}]}}))
    whole_run = tmp_path / "whole.yaml"
    whole_run.write_text(yaml.safe_dump({**run, "curve": str(curve)}))
    grpo = {"stage": "grpo", "command": f"python training/grpo.py --config {whole_run}", "wall_time_s": 1800.0,
            "hardware": "host B"}
    assert pipeline.with_segments(grpo)["wall_time_s"] == 5400.0
    final = tmp_path / "final"
    final.mkdir()
    (final / "adapter_config.json").write_text("{}")
    monkeypatch.setattr(pipeline, "REPO_ROOT", tmp_path)
    pipeline.ship_adapter(final, tmp_path / "ship", [grpo], ("good.json", "grpo_curve.json"))
    card = json.loads((tmp_path / "ship" / "card.json").read_text())
    assert card["curves"] == ["good.json", "grpo_curve.json"] and card["eval_buyer"] == "smollm2_grpo"
    made = (tmp_path / "ship" / "PROVENANCE.md").read_text()
    assert "python training/sft.py --teacher steady --games 1600  # sft: the last process 0.9 h on host C" in made
    assert "# grpo: 1.5 h on host A; host B" in made and (tmp_path / "ship" / "adapter_config.json").is_file()
    sft_ran = {"stage": "sft", "command": "python training/sft.py --games 400", "wall_time_s": 360.0, "hardware": "h"}
    pipeline.ship_adapter(final, tmp_path / "ship", [sft_ran, grpo], ("good.json", "grpo_curve.json"))
    made = (tmp_path / "ship" / "PROVENANCE.md").read_text()  # the stage the pipeline ran, not the curve's
    assert "--games 400  # sft: 0.1 h on h" in made and "--games 1600" not in made


@pytest.mark.slow
def test_an_rl_run_resumed_in_another_process_keeps_its_whole_curve(tiny_dir, tmp_path):
    """A GRPO run stopped after a checkpoint and resumed by a new process (another session, another machine):
    the curve has every step, the earlier steps exactly as they were played, and one segment per process;
    every checkpoint holds the curve so far, and the curve artifact is rewritten at each save."""
    from training import grpo
    from training.rl.run import RUN_RECORD
    out, curve = tmp_path / "grpo", tmp_path / "curve.json"
    argv = ["--smoke", "--model_name_or_path", str(tiny_dir), "--max_steps", "3", "--output_dir", str(out),
            "--curve", str(curve), "--precision", "auto"]
    grpo.main(argv)
    first = json.loads(curve.read_text())
    assert first["complete"] is True and [p["step"] for p in first["points"]] == [1, 2, 3]
    assert all(p["wall_s"] > 0 for p in first["points"]) and len(first["provenance"]["segments"]) == 1
    saved = json.loads((out / "checkpoint-2" / RUN_RECORD).read_text())
    assert [p["step"] for p in saved["steps"]] == [1, 2]
    shutil.rmtree(out / "checkpoint-3")  # stopped after step 2's checkpoint
    shutil.rmtree(out / "final")
    # a shaping weight and the sampling temperature changed on resume: the segments say so
    grpo.main([*argv, "--consistency_weight", "0.5", "--temperature", "0.4"])
    again = json.loads(curve.read_text())
    assert [p["step"] for p in again["points"]] == [1, 2, 3] and again["provenance"]["config"]["resumed"] is True
    keys = ("reward_mean", "deal_rate", "turns_mean", "wall_s")
    assert [{k: p[k] for k in keys} for p in again["points"][:2]] == [{k: p[k] for k in keys} for p in first["points"][:2]]
    segments = again["provenance"]["segments"]
    assert len(segments) == 2 and (segments[0]["last_step"], segments[1]["first_step"], segments[1]["last_step"]) == (2, 3, 3)
    assert again["provenance"]["wall_time_s"] == pytest.approx(sum(s["wall_time_s"] for s in segments), abs=0.01)
    assert [s["reward_weights"] for s in segments] == [
        {"episode_reward": 1.0}, {"episode_reward": 1.0, "false_thought_claims": 0.5}]
    assert [s["temperature"] for s in segments] == [first["provenance"]["config"]["grpo"]["temperature"], 0.4]
    for seg in segments:  # --precision auto: each process measured this machine and trained in the faster
        measured = seg["precision_measured"]
        assert set(measured["flops"]) == {"float32", "bfloat16"} and all(v > 0 for v in measured["flops"].values())
        assert seg["bf16"] == (measured["choice"] == "bfloat16")


def test_a_stage_resumed_across_runs_reports_the_wall_time_of_every_segment(tmp_path):
    """The pipeline times only the run that finished a stage; a stage resumed across sessions reports the sum of
    its curve's segments and every machine they ran on, in pipeline.json's stages and the shipped PROVENANCE.md."""
    from training.pipeline import _ship_lora, with_segments
    curve = tmp_path / "grpo_curve.json"
    seg = [{"wall_time_s": 3600.0, "machine": "host A"}, {"wall_time_s": 1800.0, "machine": "host B"},
           {"wall_time_s": 900.0, "machine": "host A"}]
    curve.write_text(json.dumps({"provenance": {"segments": seg}}))
    grpo = {"stage": "grpo", "command": f"python training/grpo.py --max_steps 3 --curve {curve}",
            "wall_time_s": 900.0, "hardware": "host A"}
    whole = with_segments(grpo)
    assert whole["wall_time_s"] == 6300.0 and whole["last_run_wall_time_s"] == 900.0 and whole["segments"] == 3
    assert whole["hardware"] == "host A; host B"
    one = {**grpo, "command": "python training/grpo.py --curve " + str(tmp_path / "one.json")}
    (tmp_path / "one.json").write_text(json.dumps({"provenance": {"segments": seg[:1]}}))
    assert with_segments(one) == one  # one run: its own time
    for cmd in ("python training/evaluate.py --out x.json", f"python training/grpo.py --curve {tmp_path / 'no.json'}",
                "python training/grpo.py --curve"):
        assert with_segments({**grpo, "command": cmd})["wall_time_s"] == 900.0  # no curve, or none written
    final = tmp_path / "final"
    final.mkdir()
    _ship_lora(final, tmp_path / "ship", [grpo], {"eval_buyer": "x"}, "An adapter", "--model smollm2-135m", "Rows.")
    assert "# grpo: 1.8 h on host A; host B" in (tmp_path / "ship" / "PROVENANCE.md").read_text()


def test_a_skipped_stage_leaves_its_model_out_of_every_evaluation(tmp_path):
    from training import pipeline
    plan = dict(pipeline.stages(tmp_path, tmp_path / "art", False, "builtin", "full", skip=frozenset({"sdpo"})))
    assert "sdpo" not in plan and "grpo" in plan
    for stage, flag in (("evaluate", "--buyer_models"), ("before_after", "--models")):
        models = plan[stage][plan[stage].index(flag) + 1]
        assert "grpo=" in models and "sdpo" not in models, (stage, models)
    full = dict(pipeline.stages(tmp_path, tmp_path / "art", False, "builtin", "full"))
    assert "sdpo=" in full["evaluate"][full["evaluate"].index("--buyer_models") + 1]
    bad = subprocess.run([sys.executable, "training/pipeline.py", "--skip", "sft"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "--skip takes stages from" in bad.stderr


def test_code_version_follows_the_code_not_the_docs(tmp_path, monkeypatch):
    """The fingerprint a finished stage is matched by: a change under training/ changes it, a README
    change does not (so editing docs never retrains, and editing code always does)."""
    from training.common import provenance
    repo = tmp_path / "repo"
    (repo / "training").mkdir(parents=True)
    (repo / "env").mkdir()
    for f, text in {"training/a.py": "x = 1\n", "env/b.py": "", "README.md": "hi\n", "pyproject.toml": "",
                    "requirements.txt": ""}.items():
        (repo / f).write_text(text)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "a"], cwd=repo, check=True)
    monkeypatch.setattr(provenance, "REPO_ROOT", repo)
    first = provenance.code_version()
    (repo / "README.md").write_text("docs changed\n")
    assert provenance.code_version() == first != "unknown"
    (repo / "training" / "a.py").write_text("x = 2\n")
    changed = provenance.code_version()
    assert changed != first
    subprocess.run([*git, "commit", "-qam", "b"], cwd=repo, check=True)
    assert provenance.code_version() not in (first, changed)  # committed: the tree hash moves instead


def test_a_rerun_skips_the_stages_an_earlier_run_finished(tmp_path):
    art = tmp_path / "art"
    cmd = [sys.executable, "training/pipeline.py", "--only", "tiny", "--workdir", str(tmp_path), "--artifacts", str(art)]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    stage = json.loads((art / "pipeline.json").read_text())["stages"][0]
    assert stage["stage"] == "tiny" and stage["hardware"] and stage["commit"] and "skipped_now" not in stage
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "finished by an earlier run, skipped" in again.stdout
    assert json.loads((art / "pipeline.json").read_text())["stages"][0]["skipped_now"] is True
    redo = subprocess.run(cmd + ["--restart"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "skipped" not in redo.stdout
    # the record says the stage ran other code (the code changed since): it runs again, and says why
    state = tmp_path / "pipeline_state.json"
    recorded = json.loads(state.read_text())
    recorded["tiny"]["code"] = "other"
    state.write_text(json.dumps(recorded))
    changed = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "skipped" not in changed.stdout and "on other code: running it again" in changed.stdout


def test_shipped_checkpoint_plays_offline():
    from env.bargain.play import play_episode
    from env.bargain.players import make_player
    from env.bargain.sources import get_split
    from training.engine.backends import SamplingConfig, TransformersBackend
    from training.engine.models import load_model
    from training.engine.rollout import LLMAgent
    from training.games.bargain.rollout import LLMPlayer

    path = ROOT / "artifacts" / "checkpoints" / "grpo-tiny"
    assert sum(f.stat().st_size for f in path.iterdir()) < 25 * 2**20
    model, tok = load_model(str(path), device="cpu")
    agent = LLMAgent(TransformersBackend(model, tok, SamplingConfig(temperature=0.0)), "option_a")
    env = play_episode(get_split("builtin", "test")[0], LLMPlayer(agent, "buyer"), make_player("seller", "neutral"), 1)
    assert env.metrics().end_reason != "running" and env.log[0]["role"] == "buyer"



def test_sdpo_dense_advantage_is_centred_so_a_biased_teacher_does_not_push_every_token_down():
    import torch

    from training.rl.hindsight import mixed_advantages
    torch.manual_seed(0)
    student = -torch.rand(4, 10)
    teacher = student - 0.8 + 0.3 * torch.randn(4, 10)  # a teacher that scores everything lower, plus signal
    mask = torch.ones(4, 10)
    mask[:, 7:] = 0  # environment tokens carry no advantage
    episode = torch.tensor([1.0, -1.0, 0.5, -0.5])
    raw, bias = mixed_advantages(episode, teacher, student, mask, lam=0.5, clamp=5.0, center="none")
    centred, bias2 = mixed_advantages(episode, teacher, student, mask, lam=0.5, clamp=5.0, center="batch")
    assert bias == bias2 < -0.5
    dense = (centred - 0.5 * episode.unsqueeze(1)) * mask
    assert abs(dense.sum().item() / mask.sum().item()) < 1e-5, "the dense term averages zero over buyer tokens"
    assert ((raw - 0.5 * episode.unsqueeze(1)) * mask).sum().item() / mask.sum().item() == pytest.approx(0.5 * bias)
    order = lambda a: torch.argsort(a[mask.bool()])  # noqa: E731
    assert torch.equal(order(raw - 0.5 * episode.unsqueeze(1)), order(dense)), "which tokens it prefers is kept"
    assert torch.all(centred[:, 7:] == 0.5 * episode.unsqueeze(1).expand(4, 3))


def test_verdict_labels_correct_each_false_verdict_word_in_the_policys_own_stream(tiny):
    """A buyer that plays the expert's moves but flips the verdict of every other Thought: each checkable verdict
    word's token is, in order, the word the truth calls for; only the flipped ones change; the loss covers the buyer's
    own tokens, the verdicts among them."""
    from env.bargain.catalog import builtin_catalog
    from env.bargain.consistency import standing_prices, verdicts
    from env.bargain.players.buyers import ExpertBuyer
    from training.engine.backends import TransformersBackend
    from training.engine.rollout import LLMAgent, Teacher
    from training.games.bargain.rollout import play_episodes
    from training.games.bargain.verdicts import verdict_example

    class Flipper(ExpertBuyer):
        def decide(self, obs):
            thought, talk, action = super().decide(obs)
            if obs.turn % 2 == 0:
                thought = thought.replace("over budget", "@").replace("within budget", "over budget").replace(
                    "@", "within budget")
            return thought, talk, action

    model, tok = tiny
    agent = LLMAgent(TransformersBackend(model, tok))
    records = play_episodes([(p, i) for i, p in enumerate(builtin_catalog()[:6])], Teacher(Flipper, agent), "boulware")
    flipped = kept = 0
    for rec in records:
        ex = verdict_example(rec, tok)
        full = rec.prompt_ids + rec.completion_ids
        turns, budget = rec.transcript["turns"], rec.transcript["scenario"]["budget"]
        wanted = [(ok, want) for i, ask, own in standing_prices(turns)
                  for _, ok, want in verdicts(turns[i]["thought"] or "", ask, budget, own)]
        assert (ex.true, ex.false) == (sum(ok for ok, _ in wanted), sum(not ok for ok, _ in wanted))
        assert [tok.decode([ex.input_ids[p]]).strip() for p in ex.verdicts] == [w for _, w in wanted]
        assert ex.over == [w == "over" for _, w in wanted]
        assert ex.completion_mask == [0] * len(rec.prompt_ids) + rec.env_mask
        assert all(ex.completion_mask[p] for p in ex.verdicts), "every verdict is the buyer's own token"
        changed = [p for p in range(len(full)) if ex.input_ids[p] != full[p]]
        assert len(ex.input_ids) == len(full) and len(changed) == ex.false and set(changed) <= set(ex.verdicts)
        flipped, kept = flipped + ex.false, kept + ex.true
    assert flipped and kept, "the games stated both false and true verdicts"


@pytest.mark.parametrize("balance", [False, True])
def test_weighted_verdict_loss_counts_each_verdict_token_w_times_and_the_rest_once(tiny_dir, tmp_path, balance):
    """``--verdict_weight W``: the loss is TRL's own-token loss plus (weight - 1) times each verdict token's NLL, over
    the same token count; prompt tokens, padding and verdicts cut off by ``--max_length`` carry no weight.
    ``--verdict_balance``: the "over" and "within" verdicts weigh W * n / (2 * n_class) each."""
    import torch
    from datasets import Dataset

    from training.engine.models import load_model
    from training.games.bargain.verdict_trainer import VerdictWeightedSFTTrainer

    model, tok = load_model(str(tiny_dir), device="cpu")
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(10, 200, (n,), generator=g).tolist() for n in (20, 15)]
    data = {"input_ids": ids, "completion_mask": [[0] * 5 + [1] * 15, [0] * 3 + [1] * 12],
            "verdicts": [[8, 12, 19], [6]], "verdict_over": [[True, True, False], [False]]}
    cfg = sft.HaggleSFTConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, max_length=18)
    trainer = VerdictWeightedSFTTrainer(model=model, args=cfg, train_dataset=Dataset.from_dict(data),
                                        processing_class=tok, verdict_weight=5, balance=balance)
    weight = {"over": 5 * 4 / (2 * 2), "within": 5 * 4 / (2 * 2)} if balance else {"over": 5, "within": 5}
    if balance:  # 2 of 4 labels "over" here: equal classes; the class weights follow the counts, not the batch
        assert trainer.class_weights == {True: 5.0, False: 5.0}
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    kind = batch["verdict_kind"]
    assert kind.shape == batch["labels"].shape == (2, 18)
    assert {(r, c): k for r, c, k in [(*rc, kind[tuple(rc)].item()) for rc in kind.nonzero().tolist()]} == {
        (0, 8): 1, (0, 12): 1, (1, 6): 2}  # 19: truncated away
    model.train()
    plain = trainer.compute_loss(model, {k: v for k, v in batch.items() if k != "verdict_kind"}).item()
    weighted = trainer.compute_loss(model, dict(batch)).item()
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    nll = -torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    tokens = (batch["labels"][:, 1:] != -100).sum().item()
    extra = sum((weight[w] - 1) * nll[r, c - 1].item() for r, c, w in ((0, 8, "over"), (0, 12, "over"),
                                                                         (1, 6, "within"))) / tokens
    assert weighted == pytest.approx(plain + extra, rel=1e-4) and extra > 0
    assert trainer._metrics["train"]["verdict_accuracy"] and trainer._metrics["train"]["verdict_accuracy_within"]
    with pytest.raises(ValueError, match="verdict_weight"):
        sft.SFTScriptArguments(verdict_weight=3)  # --teach expert has no verdicts to weigh
    with pytest.raises(ValueError, match="verdict_weight"):
        sft.SFTScriptArguments(teach="verdicts", verdict_weight=0.5)
    with pytest.raises(ValueError, match="verdict_balance"):
        sft.SFTScriptArguments(teach="verdicts", verdict_balance=True)


def test_balanced_verdict_weights_give_each_word_half_the_weight(tiny_dir, tmp_path):
    """Three "over" labels to one "within": "within" weighs three times "over", and the mean stays W; a dataset
    with one word only cannot be balanced."""
    from datasets import Dataset

    from training.engine.models import load_model
    from training.games.bargain.verdict_trainer import VerdictWeightedSFTTrainer

    model, tok = load_model(str(tiny_dir), device="cpu")
    cfg = sft.HaggleSFTConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, max_length=18)
    data = {"input_ids": [[11] * 12, [12] * 12], "completion_mask": [[0] * 2 + [1] * 10] * 2,
            "verdicts": [[4, 6, 8], [5]], "verdict_over": [[True, True, True], [False]]}
    trainer = VerdictWeightedSFTTrainer(model=model, args=cfg, train_dataset=Dataset.from_dict(data),
                                        processing_class=tok, verdict_weight=8, balance=True)
    w = trainer.class_weights
    assert w[False] == pytest.approx(3 * w[True]) and (3 * w[True] + w[False]) / 4 == pytest.approx(8)
    data["verdict_over"] = [[True, True, True], [True]]
    with pytest.raises(ValueError, match="both verdict words"):
        VerdictWeightedSFTTrainer(model=model, args=cfg, train_dataset=Dataset.from_dict(data),
                                  processing_class=tok, verdict_weight=8, balance=True)


@pytest.mark.slow
def test_sft_teach_verdicts_trains_the_shipped_tiny_buyer_on_its_own_games(tmp_path):
    """``--teach verdicts`` end to end: the shipped tiny buyer samples its own games (llama.cpp), the curve records
    the verdicts as written, and the model it saves has trained."""
    from safetensors.torch import load_file

    start = ROOT / "artifacts/checkpoints/grpo-tiny"
    _, final = sft.main(["--smoke", "--model", str(start), "--teach", "verdicts", "--games", "12",
                         "--verdict_weight", "10", "--output_dir", str(tmp_path / "v"),
                         "--curve", str(tmp_path / "v.json")])
    curve = json.loads((tmp_path / "v.json").read_text())
    own = curve["own_games"]
    assert own["verdicts_true"] + own["verdicts_false"] > 0
    assert -1 <= own["reward_mean"] <= 1 and "expert_reward_mean" not in curve
    assert curve["provenance"]["config"]["script"]["teach"] == "verdicts" and curve["points"]
    assert curve["provenance"]["config"]["script"]["verdict_weight"] == 10
    assert any("verdict_accuracy" in p for p in curve["points"]), "the weighted stage logs its verdicts' accuracy"
    assert "comparisons" not in curve, "no drill was mixed in"
    before, after = load_file(start / "model.safetensors"), load_file(final / "model.safetensors")
    assert any(not (after[k] == before[k]).all() for k in after if k in before)
    with pytest.raises(ValueError, match="--teach"):
        sft.SFTScriptArguments(teach="verdicts", role="seller")
    with pytest.raises(ValueError, match="--teach"):
        sft.SFTScriptArguments(teach="nonsense")


def test_sft_teacher_steady_writes_the_steady_buyers_games_and_refuses_what_it_cannot_teach():
    """``--teacher steady``: the cloned games are the steady buyer's own (its last-round offer, never the expert's
    last-round grab), in the model's stream with the loss on the buyer's replies; the seed rule names the teacher;
    an unknown teacher, another game, the seller's role or another ``--teach`` are refused."""
    from training.engine.backends import TransformersBackend
    from training.engine.models import load_model
    from training.engine.rollout import LLMAgent
    from training.games import game_for

    model, tok = load_model(str(SHIPPED_TINY), device="cpu", dtype="float32")
    agent = LLMAgent(TransformersBackend(model, tok), "option_a")
    texts = {}
    for teacher in ("expert", "steady"):
        game = game_for(sft.SFTScriptArguments(teacher=teacher, sellers="boulware,unyielding"))
        data, rewards = game.expert_games([agent], 8)
        assert len(data) == len(rewards) == 8 and all(-1 <= r <= 1 for r in rewards)
        texts[teacher] = [tok.decode([t for t, m in zip(ids, mask) if m]) for ids, mask in
                          zip(data["input_ids"], data["completion_mask"])]
        assert ("buyer steady" in game.expert_seed_rule(1)) == (teacher == "steady")
    assert any("Last round: offer 85% of budget." in t for t in texts["steady"])
    assert not any("Last round: accept" in t for t in texts["steady"])
    assert not any("Last round: offer" in t for t in texts["expert"])
    for bad, match in (({"teacher": "nobody"}, "--teacher must"), ({"teacher": "steady", "env": "market"}, "--teacher"),
                       ({"teacher": "steady", "role": "seller"}, "--teacher"),
                       ({"teacher": "steady", "teach": "dagger", "temperature": 0}, "--teacher")):
        with pytest.raises(ValueError, match=match):
            sft.SFTScriptArguments(**bad)


def test_dagger_labels_each_state_of_the_policys_own_games_with_the_experts_reply_there():
    """``--teach dagger``'s data: the policy's own games (greedy here), and for each of its replies k one example whose
    context is that game's stream before reply k (the policy's own moves and the seller's answers, untrained) and whose
    loss falls on one reply, the expert buyer's in that state: it names the ask the policy's game stands at, never
    takes an ask over the budget, takes one within it at the last round; the record counts what it labelled."""
    from collections import Counter

    from env.bargain.consistency import standing_prices
    from env.bargain.protocol import format_price
    from training.engine.backends import SamplingConfig, TransformersBackend
    from training.engine.models import load_model
    from training.engine.rollout import LLMAgent
    from training.games import game_for
    from training.games.bargain.adapter import _move_kind

    model, tok = load_model("artifacts/checkpoints/grpo-tiny", device="cpu", dtype="float32")
    agent = LLMAgent(TransformersBackend(model, tok, SamplingConfig(temperature=0.0)), "option_a")
    game = game_for(sft.SFTScriptArguments(teach="dagger", temperature=0, sellers="neutral,conceder,boulware"))
    data, record = game.dagger_games(agent, 6, chunk=4)
    rows = game.rows(6)
    own = game.play(agent, rows[:4]) + game.play(agent, rows[4:])  # greedy, batched alike: the same games again
    states = [(i, k) for i, rec in enumerate(own) for k in range(len(rec.turns))]
    assert record["own_games"] == 6 and record["states"] == len(data) == len(states) > 6, "games of several replies"
    kinds, differ, words = Counter(), 0, Counter()
    for (i, k), ids, mask, at_words, over in zip(states, data["input_ids"], data["completion_mask"], data["verdicts"],
                                                 data["verdict_over"]):
        context = mask.index(1)
        assert ids[:context] == own[i].turns[k].prompt_ids, "the state is the policy's own game before reply k"
        assert all(mask[context:]) and ids[-1] == agent.eos_id, "one reply, trained to its end"
        reply = tok.decode(ids[context:], skip_special_tokens=True)
        kind = _move_kind(reply)
        kinds[kind] += 1
        differ += reply.strip() != own[i].turns[k].text.strip()
        turns, scenario = own[i].transcript["turns"], own[i].transcript["scenario"]
        at, ask, _ = standing_prices(turns)[k]
        assert len(at_words) == len(over) and all(context <= j < len(ids) for j in at_words), "in the label alone"
        for j, is_over in zip(at_words, over):  # --verdict_weight's positions: the expert's true words
            assert tok.decode([ids[j]]).strip() == ("over" if is_over else "within")
            words["over" if is_over else "within"] += 1
        if ask is None:
            assert kind == "BUY" and not at_words, "the expert opens with an offer, no ask to judge"
            continue
        assert [ask > scenario["budget"]] == over, "one verdict, the ask's against the budget, and it is true"
        assert f"Ask {format_price(ask)} vs budget {format_price(scenario['budget'])}" in reply
        if ask > scenario["budget"]:
            assert kind == "BUY", "the expert never takes an ask over its budget"
        elif turns[at]["turn"] == own[i].transcript["max_turns"]:
            assert kind == "DEAL", "the expert takes an ask within its budget at the last round"
    assert record["expert_moves"] == dict(sorted(kinds.items())) and 0 <= record["own_move_agrees"] <= 1
    assert record["verdicts"] == {"over": words["over"], "within": words["within"]} and words["over"]
    assert differ, "the labels are the expert's replies, not the policy's own"
    assert -1 <= record["own_reward_mean"] <= 1 and 0 <= record["own_deal_rate"] <= 1
    with pytest.raises(ValueError, match="--temperature"):
        sft.SFTScriptArguments(teach="verdicts", temperature=0)  # verdicts' games are sampled; dagger's may be greedy
    with pytest.raises(ValueError, match="--teach dagger"):
        sft.SFTScriptArguments(teach="dagger", role="seller")


def test_verdict_tokens_find_the_comparison_signs_before_each_verdict_with_its_truth(tiny):
    """``verdict_tokens(symbols=True)`` (``--verdict_symbols``): besides each verdict word, every sign of the
    digit-by-digit comparison just before it ("1=1, 5<7: within"), each at the token that is that sign and labelled
    with its verdict's truth and word; nothing else in the Thought (the prices' digits, a sign elsewhere)."""
    from types import SimpleNamespace

    from training.games.bargain.verdicts import verdict_tokens

    _, tok = tiny
    for thought, true, word in [("Ask $155.00 vs budget $157.59: 1=1, 5=5, 5<7: within budget. Offer $150.00.", True,
                                 "within"),
                                ("Ask $35.00 vs budget $43.99: 3>4: over budget. Note 2<3 is not a verdict's.", False,
                                 "within"),
                                ("Ask $70.00 vs budget $43.99: 7>4: over budget.", True, "over")]:
        reply = f"Thought: {thought}\nTalk: Hello.\nAction: [BUY] $30.00"
        turn = SimpleNamespace(completion_ids=tok(reply, add_special_tokens=False)["input_ids"])
        ask, budget = (float(thought.split("$")[i].split()[0].rstrip(":")) for i in (1, 2))
        words = verdict_tokens(turn, thought, ask, budget, None, tok)
        found = verdict_tokens(turn, thought, ask, budget, None, tok, symbols=True)
        signs = "".join(c for c in thought.split(": ")[1] if c in "<=>")
        written = thought.split(": ")[2].split()[0]  # the verdict word as the Thought wrote it
        assert [tok.decode([turn.completion_ids[k]]).strip() for k, *_ in words] == [written]
        assert "".join(tok.decode([turn.completion_ids[k]]).strip() for k, *_ in found) == signs + written
        assert {(t, w) for _, t, w, _ in found} == {(true, word)}, "each sign carries its verdict's truth and word"
    assert not verdict_tokens(turn, "not the reply's Thought", 70.0, 43.99, None, tok, symbols=True)
    with pytest.raises(ValueError, match="--verdict_symbols"):
        sft.SFTScriptArguments(teach="dagger", temperature=0, verdict_symbols=True)  # nothing weighted
    with pytest.raises(ValueError, match="--verdict_symbols"):
        sft.SFTScriptArguments(verdict_weight=3, teach="verdicts", verdict_symbols=True)


@pytest.mark.slow
def test_sft_teach_dagger_trains_the_shipped_tiny_buyer_on_the_experts_replies_in_its_own_games(tmp_path):
    """``--teach dagger`` end to end (llama.cpp plays the own games greedily): the curve records the labelled states,
    the seeds' rule and the own games' reward, and the model it saves has trained."""
    from safetensors.torch import load_file

    start = ROOT / "artifacts/checkpoints/grpo-tiny"
    _, final = sft.main(["--smoke", "--model", str(start), "--teach", "dagger", "--games", "4", "--temperature", "0",
                         "--output_dir", str(tmp_path / "d"), "--curve", str(tmp_path / "d.json")])
    curve = json.loads((tmp_path / "d.json").read_text())
    dagger = curve["dagger"]
    assert dagger["own_games"] == 4 and dagger["states"] >= 4 and sum(dagger["expert_moves"].values()) == dagger["states"]
    assert "expert_reward_mean" not in curve and "own_games" not in curve
    assert curve["provenance"]["config"]["script"]["teach"] == "dagger" and curve["points"]
    assert "train product" in curve["provenance"]["seeds"]["games"]
    before, after = load_file(start / "model.safetensors"), load_file(final / "model.safetensors")
    assert any(not (after[k] == before[k]).all() for k in after if k in before)


def test_the_comparison_drill_states_each_verdict_of_its_prices_half_of_each_word(tiny):
    """``--teach comparisons``' examples: the budget as the buyer's prompt states it, the seller's ask as the
    environment renders it, then the buyer's Thought through its verdict, whose word is the truth of the two prices
    (alternating over / within); the loss falls on the Thought and nothing after it. ``verdict_accuracy`` ranks the two
    words: a model that always prefers "over" scores 100% on the asks above the budget, 0% on the others."""
    from types import SimpleNamespace

    import torch

    from training.games.bargain.comparisons import (comparison_examples, draw_ask, stream_verdict_accuracy,
                                                    verdict_accuracy)
    _, tok = tiny
    products = [SimpleNamespace(budget=b, title=f"Thing {i}", category="misc", list_price=b * 1.25)
                for i, b in enumerate((47.99, 155.19, 1234.5, 0.99))]
    data = comparison_examples(tok, products, 40, seed=3)
    assert data["verdict_over"] == [i % 2 == 0 for i in range(40)]
    for ids, mask, at, over, ask, budget in zip(data["input_ids"], data["completion_mask"], data["verdict_at"],
                                                data["verdict_over"], data["ask"], data["budget"]):
        assert (ask > budget) == over and budget in (47.99, 155.19, 1234.5, 0.99)
        word = "over" if over else "within"
        assert ids[at] == tok(" " + word, add_special_tokens=False)["input_ids"][0]
        thought = f"Thought: Ask ${ask:,.2f} vs budget ${budget:,.2f}: {word} budget."
        assert tok.decode([i for i, m in zip(ids, mask) if m]) == thought and mask[-1] == 1
        assert mask == sorted(mask) and mask[at], "the loss is on the Thought, the verdict among it, and no prompt"
        text = tok.decode(ids)
        assert f"Action: [SELL] ${ask:,.2f}" in text and f"Your budget: ${budget:,.2f} (private)." in text
    assert data["input_ids"] == comparison_examples(tok, products, 40, seed=3)["input_ids"], "seeded"
    rng = __import__("random").Random(0)
    for _ in range(2000):  # fuzz: any budget, either side
        budget, over = round(10 ** rng.uniform(-2, 6), 2), rng.random() < 0.5
        ask = draw_ask(rng, budget, over)
        assert ask >= 0.01 and (ask > budget) == over
    over_id = tok(" over", add_special_tokens=False)["input_ids"][0]

    class SaysOver(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            logits = torch.zeros(*input_ids.shape, len(tok))
            logits[..., over_id] = 1.0
            return SimpleNamespace(logits=logits)

    model = SaysOver()
    model.device = torch.device("cpu")
    score = verdict_accuracy(model, tok, data, batch_size=7)
    assert score == {"accuracy": 0.5, "accuracy_over": 1.0, "accuracy_within": 0.0, "examples": 40}

    class SaysOverInGames(torch.nn.Module):  # the stream form: logits kept at the verdict positions alone
        def forward(self, input_ids, logits_to_keep):
            logits = torch.zeros(1, len(logits_to_keep), len(tok))
            logits[..., over_id] = 1.0
            return SimpleNamespace(logits=logits)

    streams = {"input_ids": [], "verdicts": [], "verdict_over": []}
    for ids, at, over in zip(data["input_ids"], data["verdict_at"], data["verdict_over"]):
        streams["input_ids"].append(ids + ids)  # two verdicts a stream, the second after the first
        streams["verdicts"].append([at, len(ids) + at])
        streams["verdict_over"].append([over, over])
    games = SaysOverInGames()
    games.device = torch.device("cpu")
    score = stream_verdict_accuracy(games, tok, streams)
    assert score == {"accuracy": 0.5, "accuracy_over": 1.0, "accuracy_within": 0.0, "examples": 80}


def test_a_lying_history_turns_verdicts_to_the_other_word_and_out_of_the_loss(tiny):
    """``--drill_flip``: in the expert's verdict streams each verdict turns to the wrong word with the given
    probability (the stream re-tokenized, still the game's text) and leaves the loss; the verdicts kept are the true
    words at their new positions. No turn leaves the stream as it was; a turn of every verdict leaves nothing."""
    import random
    import re

    from training.engine.rollout import LLMAgent
    from training.engine.backends import TransformersBackend
    from training.games import game_for
    from training.games.bargain.verdicts import flip_history

    model, tok = tiny
    game = game_for(sft.SFTScriptArguments(teach="verdicts"))
    agent = LLMAgent(TransformersBackend(model, tok), "option_a")
    plain, (over, within) = game.expert_verdict_games(agent, 12, seed=5)
    assert over > 0 and within > 0
    said = lambda ids: re.findall(r": (over|within) budget", tok.decode(ids))  # noqa: E731
    turned_all = 0
    for i, (ids, at, words) in enumerate(zip(plain["input_ids"], plain["verdicts"], plain["verdict_over"])):
        assert said(ids) == ["over" if o else "within" for o in words]
        assert flip_history(ids, at, words, tok, random.Random(i), 0.0) == (ids, at, words, 0)
        new, kept, kept_over, n = flip_history(ids, at, words, tok, random.Random(i), 0.5)
        before, after = said(ids), said(new)
        assert len(after) == len(before) and sum(a != b for a, b in zip(after, before)) == n
        assert len(kept) == len(at) - n and kept == sorted(kept)
        assert [tok.decode(new[k: k + 3]).split()[0] for k in kept] == ["over" if o else "within" for o in kept_over]
        assert sorted(kept_over) == sorted(o for o, a, b in zip(words, after, before) if a == b)
        turned_all += flip_history(ids, at, words, tok, random.Random(i), 0.999999)[3] == len(at)
    assert turned_all == len(plain)
    lying, (l_over, l_within, flipped) = game.flip_streams(plain, tok, 0.5, seed=3)
    assert flipped > 0 and l_over + l_within + flipped == over + within
    for ids, mask, at, words in zip(lying["input_ids"], lying["completion_mask"], lying["verdicts"],
                                    lying["verdict_over"]):
        assert [i for i, m in enumerate(mask) if m] == at
        assert [tok.decode(ids[k: k + 3]).split()[0] for k in at] == ["over" if o else "within" for o in words]
    with pytest.raises(ValueError, match="--drill_flip"):
        sft.SFTScriptArguments(teach="verdicts", drill_games=4, drill_flip=1.0)
    with pytest.raises(ValueError, match="--drill_games"):
        sft.SFTScriptArguments(teach="verdicts", drill_flip=0.3)


@pytest.mark.slow
def test_sft_teach_comparisons_drills_the_verdict_and_records_its_held_out_accuracy(tmp_path):
    """``--teach comparisons`` end to end on the shipped tiny buyer: the curve records the held-out accuracy before
    and after (on test products) and the training points; the saved model has trained."""
    from safetensors.torch import load_file

    start = ROOT / "artifacts/checkpoints/grpo-tiny"
    _, final = sft.main(["--smoke", "--model", str(start), "--teach", "comparisons", "--games", "24",
                         "--output_dir", str(tmp_path / "c"), "--curve", str(tmp_path / "c.json")])
    curve = json.loads((tmp_path / "c.json").read_text())
    drill = curve["comparisons"]
    assert drill["train_examples"] == 24 and drill["held_out_examples"] == 512 and drill["held_out_products"] > 0
    for when in ("before", "after"):
        assert 0 <= drill[when]["accuracy"] <= 1 and drill[when]["examples"] == 512
    assert curve["points"] and "expert_reward_mean" not in curve and "own_games" not in curve
    before, after = load_file(start / "model.safetensors"), load_file(final / "model.safetensors")
    assert any(not (after[k] == before[k]).all() for k in after if k in before)
    with pytest.raises(ValueError, match="--teach comparisons"):
        sft.SFTScriptArguments(teach="comparisons", role="seller")


@pytest.mark.slow
def test_sft_teach_verdicts_mixes_a_drill_whose_verdicts_carry_the_weight(tmp_path, monkeypatch):
    """``--teach verdicts --drill N``: N drill examples (the loss on the verdict word alone) join the own games, each
    with its one verdict position for the weighted loss; the curve records the own games and the drill's held-out
    accuracy before and after."""
    from training.games.bargain import verdict_trainer

    seen = {}
    original = verdict_trainer.VerdictWeightedSFTTrainer.__init__

    def spy(self, *args, **kwargs):
        seen["data"] = kwargs["train_dataset"]
        original(self, *args, **kwargs)

    monkeypatch.setattr(verdict_trainer.VerdictWeightedSFTTrainer, "__init__", spy)
    start = ROOT / "artifacts/checkpoints/grpo-tiny"
    sft.main(["--smoke", "--model", str(start), "--teach", "verdicts", "--games", "8", "--drill", "20",
              "--drill_games", "6", "--verdict_weight", "10", "--output_dir", str(tmp_path / "m"),
              "--curve", str(tmp_path / "m.json")])
    data = seen["data"]
    assert len(data) == 8 + 20 + 6, "every expert game states a verdict"
    tok = __import__("transformers").AutoTokenizer.from_pretrained(start)
    streams = data.select(range(28, 34))
    for ids, mask, at, over in zip(streams["input_ids"], streams["completion_mask"], streams["verdicts"],
                                   streams["verdict_over"]):  # the loss on the expert's true verdict words alone
        assert at and [i for i, m in enumerate(mask) if m] == at
        assert [tok.decode([ids[i]]).strip() for i in at] == ["over" if o else "within" for o in over]
        assert "Thought: Ask $" in tok.decode(ids[: at[-1]]), "each verdict is read after the game's history"
    drill = data.select(range(8, 28))
    for ids, mask, at, over in zip(drill["input_ids"], drill["completion_mask"], drill["verdicts"],
                                   drill["verdict_over"]):
        assert len(at) == 1 and sum(mask) == 1 and mask[at[0]] == 1 and len(over) == 1
    assert [o[0] for o in drill["verdict_over"]] == [i % 2 == 0 for i in range(20)]
    curve = json.loads((tmp_path / "m.json").read_text())
    assert curve["own_games"] and curve["comparisons"]["train_examples"] == 20
    assert curve["comparisons"]["loss"] == "verdict" and set(curve["comparisons"]) >= {"before", "after"}
    in_games = curve["comparisons_in_games"]
    assert in_games["train_games"] == 6 and in_games["held_out_games"] == sft.DRILL_GAMES_HELD_OUT
    held = in_games["held_out_verdicts"]
    for when in ("before", "after"):
        assert in_games[when]["examples"] == held["over"] + held["within"] > 0
        assert 0 <= in_games[when]["accuracy"] <= 1
    with pytest.raises(ValueError, match="--drill"):
        sft.SFTScriptArguments(drill=5)  # --teach expert
    with pytest.raises(ValueError, match="--drill_games"):
        sft.SFTScriptArguments(drill_games=5)


@pytest.mark.slow
def test_sft_from_an_adapter_checkpoint_trains_that_adapter_on(tiny_llama_dir, tmp_path):
    """A refresher: SFT given a LoRA checkpoint (a trainer's folder, no lineage of its own) goes on training its
    adapter, not a second one on top, and the result still loads on the same base."""
    from safetensors.torch import load_file

    from training.common.provenance import read_lineage
    from training.engine.models import load_model

    _, first = sft.main(["--smoke", "--model", str(tiny_llama_dir), "--output_dir", str(tmp_path / "a"), "--curve", ""])
    checkpoint = tmp_path / "checkpoint-3"  # as an RL trainer saves one: adapter and tokenizer, no lineage
    shutil.copytree(first, checkpoint)
    (checkpoint / "lineage.json").unlink()
    _, final = sft.main(["--smoke", "--model", str(checkpoint), "--output_dir", str(tmp_path / "b"),
                         "--curve", str(tmp_path / "b.json")])
    before, after = load_file(first / "adapter_model.safetensors"), load_file(final / "adapter_model.safetensors")
    assert set(after) == set(before), "the same adapter's weights, none nested under a second one"
    assert any(not (after[k] == before[k]).all() for k in after), "the adapter trained on"
    config = json.loads((final / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_llama_dir)
    lineage = read_lineage(final)
    assert lineage["base_model"] == str(tiny_llama_dir) and lineage["stages"][-1]["stage"] == "sft"
    curve = json.loads((tmp_path / "b.json").read_text())["provenance"]["config"]
    assert curve["lora"] is True and curve["continued_adapter"] == str(checkpoint)
    model, _ = load_model(str(final), device="cpu")
    assert type(model).__name__ == "PeftModelForCausalLM"
    with pytest.raises(SystemExit, match="--lora no"):
        sft.main(["--smoke", "--model", str(checkpoint), "--lora", "no", "--output_dir", str(tmp_path / "c")])


def test_sft_can_teach_a_model_the_sellers_side_and_it_then_sells_regulated(tiny_dir, tmp_path):
    from training import evaluate
    from training.engine.backends import TransformersBackend
    from training.games.bargain import BargainGame
    from training.engine.models import load_model
    from training.engine.rollout import LLMAgent

    script = sft.SFTScriptArguments(model=str(tiny_dir), role="seller", sellers="neutral,insulting", games=8)
    game = BargainGame(script)
    model, tok = load_model(str(tiny_dir), device="cpu")
    data, rewards = game.expert_games([LLMAgent(TransformersBackend(model, tok), "option_a")], 8, role="seller")
    assert len(data) == 8 and all(0 <= r <= 1 for r in rewards), "the seller's reward: never below cost"
    for ids, mask in zip(data["input_ids"], data["completion_mask"]):
        trained = tok.decode([t for t, m in zip(ids, mask) if m])
        assert "floor" in trained and ("[SELL]" in trained or "[DEAL]" in trained)  # the seller's own moves
        assert "[BUY]" not in trained, "the buyer's moves carry no loss"
    _, final = sft.main(["--smoke", "--model", str(tiny_dir), "--role", "seller", "--output_dir", str(tmp_path / "s"),
                         "--curve", ""])
    art = evaluate.run(BargainEvalArgs(scenarios="builtin", buyers="expert", seller_model=str(final),
                                           seller_name="llm_seller", limit=2, seeds=1, out="", transcripts="",
                                           progress=False, temperatures="0"))
    rows = [r for r in art["rows"] if r["seller"] == "llm_seller"]
    assert rows and not any(r["buyer"] == "oracle" for r in art["rows"]), "no ceiling without a scripted floor"
    assert rows[0]["episodes"] == 2
    with pytest.raises(ValueError, match="--role"):
        sft.SFTScriptArguments(role="auctioneer")


def test_generalisation_studies_say_what_they_run_and_the_model_seller_plays_the_first_products():
    from env.bargain.sources import amazon_path
    from training.generalisation import GeneralisationConfig, studies
    plan = studies(GeneralisationConfig(buyer_models="grpo=x", held_out_seller="boulware", limit=30))
    assert plan["b_held_out_seller"]["options"]["sellers"] == "boulware"
    assert plan["c_adversarial"]["options"]["sellers"] == "begging,insulting,unyielding"
    assert plan["d_llm_seller"]["options"] is None and "--seller_model" in plan["d_llm_seller"]["why_not"]
    with_seller = studies(GeneralisationConfig(buyer_models="grpo=x", seller_model="m", limit=30, seller_model_limit=4))
    d = with_seller["d_llm_seller"]
    assert d["options"]["seller_model"] == "m" and d["options"]["limit"] == 4 and "first 4 test products" in d["question"]
    assert with_seller["b_held_out_seller"]["options"]["limit"] == 30, "the scripted studies keep --limit"
    as_limit = studies(GeneralisationConfig(buyer_models="grpo=x", seller_model="m", limit=30, seller_model_limit=0))
    assert as_limit["d_llm_seller"]["options"]["limit"] == 30
    # trained on the catalog plus generated products: (a) is the source left out, (b)-(d) the catalog's test split
    union = studies(GeneralisationConfig(buyer_models="grpo=x", train_source="builtin+synthetic", seller_model="m"))
    assert {union[k]["options"]["scenarios"] for k in ("b_held_out_seller", "c_adversarial", "d_llm_seller")} == \
        {"builtin"}
    if amazon_path().is_dir():
        assert union["a_other_source"]["options"]["scenarios"] == "amazon"
    both = studies(GeneralisationConfig(buyer_models="grpo=x", train_source="amazon+builtin"))
    assert both["a_other_source"]["options"] is None and "every evaluation source" in both["a_other_source"]["why_not"]
    with pytest.raises(ValueError, match="--held_out_seller"):
        GeneralisationConfig(buyer_models="grpo=x", held_out_seller="nobody")
    with pytest.raises(ValueError, match="--seller_model_limit"):
        GeneralisationConfig(buyer_models="grpo=x", seller_model_limit=-1)


@pytest.mark.parametrize("mode", ["option_a", "option_b"])
def test_every_expert_reply_sft_teaches_fits_the_reply_budget_of_training_and_evaluation(tiny, mode):
    """A reply longer than the budget is cut into a format error: a budget below the expert's replies
    punishes the policy for writing what SFT taught it (GRPO's old 64 cut 19% of them)."""
    from training.engine.backends import REPLY_TOKENS, SamplingConfig, TransformersBackend
    from training.games.bargain import BargainGame
    from training.rl.run import GRPOScriptArguments
    from training.engine.rollout import LLMAgent

    assert GRPOScriptArguments.max_new_tokens == SamplingConfig.max_new_tokens == REPLY_TOKENS
    model, tok = tiny
    longest = 0
    for source in ("builtin", "synthetic"):
        game = BargainGame(sft.SFTScriptArguments(scenarios=source, games=70))
        data, _ = game.expert_games([LLMAgent(TransformersBackend(model, tok), mode)], 70)
        for mask in data["completion_mask"]:  # each run of 1s is one buyer reply
            run = 0
            for m in [*mask, 0]:
                if m:
                    run += 1
                else:
                    longest, run = max(longest, run), 0
    think = SamplingConfig.think_tokens if mode == "option_b" else 0
    assert 60 < longest <= REPLY_TOKENS + think, longest


def test_generalisation_rows_of_an_earlier_run_join_the_studies_played_with_the_same_options(tmp_path, tiny_dir):
    """A model studied once (its rows in one artifact) joins a fresh run's studies, each row naming its
    artifact; a study played with other options is refused, and so is an artifact with nothing to add."""
    from training import generalisation
    from training.common.provenance import relative
    common = ["--held_out_seller", "boulware", "--seeds", "1", "--limit", "1", "--max_new_tokens", "8"]
    first, joined = tmp_path / "first.json", tmp_path / "joined.json"
    generalisation.main(["--buyer_models", f"m={tiny_dir}", "--out", str(first), *common])
    generalisation.main(["--include_rows", str(first), "--out", str(joined), *common])
    a, b = (json.loads(p.read_text()) for p in (first, joined))
    label = relative(str(first))
    for name, study in a["studies"].items():
        if not study["ran"]:
            continue
        mine = [r for r in b["studies"][name]["rows"] if r["buyer"] == "m"]
        assert mine == [{**r, "from_artifact": label} for r in study["rows"] if r["buyer"] == "m"] and mine
        assert {r["buyer"] for r in b["studies"][name]["rows"]} == {r["buyer"] for r in study["rows"]}
    assert b["included_rows"][label]["command"] == a["provenance"]["command"]
    assert [r for r in b["rows"] if r["buyer"] == "m"], "the flat row list holds the joined rows too"
    again = tmp_path / "again.json"  # joined from the joined one: the rows still name where they were played
    generalisation.main(["--include_rows", str(joined), "--out", str(again), *common])
    c = json.loads(again.read_text())
    assert {r["from_artifact"] for r in c["rows"] if r["buyer"] == "m"} == {label}
    assert c["included_rows"][label]["command"] == a["provenance"]["command"]
    with pytest.raises(ValueError, match="other options"):
        generalisation.main(["--include_rows", str(first), "--out", "", *common[:-4], "--limit", "2",
                             "--max_new_tokens", "8"])
    with pytest.raises(ValueError, match="no model rows"):
        generalisation.main(["--buyer_models", f"m={tiny_dir}", "--include_rows", str(first), "--out", "", *common])
    # a study the earlier run played but this one cannot (no model seller here) is refused before any play
    a["studies"]["d_llm_seller"] = {"ran": True, "options": {"seller_model": "m"}, "rows": []}
    (tmp_path / "with_d.json").write_text(json.dumps(a))
    with pytest.raises(ValueError, match="d_llm_seller, which cannot run here"):
        generalisation.main(["--include_rows", str(tmp_path / "with_d.json"), "--out", "", *common])


def test_flat_groups_are_replaced_by_spare_groups_that_carry_signal():
    """--spare_groups (dynamic sampling in one round): a group whose episodes all scored the same is replaced in
    place by the next spare group whose rewards differ; flat spares are skipped, a group split with another
    process is left alone, and the share of flat groups as sampled is reported."""
    from types import SimpleNamespace as R

    from training.rl.run import replace_flat_groups
    rows = [0, 0, 1, 1, 2, 2, 3]  # row 3: half a group here (its other half is on another process)
    rewards = [0.5, 0.5, 0.1, 0.9, -1.0, -1.0, 0.2]
    spare_rows, spare_rewards = [10, 10, 11, 11], [0.3, 0.3, 0.0, 0.4]
    records, kept, stats = replace_flat_groups(rows, [R(reward=x) for x in rewards], spare_rows,
                                               [R(reward=x) for x in spare_rewards], group=2)
    assert kept == [11, 11, 1, 1, 2, 2, 3]  # row 0 got the spare with variance; row 2 stays (no spare left)
    assert [r.reward for r in records] == [0.0, 0.4, 0.1, 0.9, -1.0, -1.0, 0.2]
    assert stats == {"frac_zero_std": 2 / 3, "replaced": 1}
    none, same, _ = replace_flat_groups(rows, [R(reward=x) for x in rewards], [], [], group=2)
    assert same == rows and [r.reward for r in none] == rewards


def test_spares_on_demand_play_only_as_many_groups_as_are_flat_and_replace_as_one_round_would():
    """--spares_on_demand: the step's groups are played first, then rounds of spare groups, each as many as the flat
    groups still unreplaced (a flat spare calls for another), until none is left or the spares are spent. The groups
    trained on are the ones a single round over every spare would have chosen."""
    from types import SimpleNamespace as R

    from training.rl.run import EpisodeRollouts, replace_flat_groups

    rewards = {0: [0.5, 0.5], 1: [0.1, 0.9], 2: [-1.0, -1.0], 3: [0.2, 0.2],  # rows 0, 2, 3 flat
               10: [0.3, 0.3], 11: [0.0, 0.4], 12: [0.2, 0.6], 13: [0.1, 0.7], 14: [0.5, 0.1]}

    class Game:
        def __init__(self):
            self.calls = []

        def play(self, agent, episodes, opponent):
            self.calls.append(list(episodes))
            seen: dict[int, int] = {}
            out = []
            for e in episodes:
                out.append(R(reward=rewards[e][seen.get(e, 0)]))
                seen[e] = seen.get(e, 0) + 1
            return out

    def run(rows, spares):
        game = Game()
        rollouts = EpisodeRollouts(R(spare_groups=len(spares) // 2, episode_log="", spares_on_demand=True),
                                   R(num_generations=2), game, episodes=list(range(10)), spares=list(range(10, 15)))
        played, spare_played = rollouts._play_on_demand(None, rows, spares)
        return game.calls, played, spare_played

    rows, spares = [0, 0, 1, 1, 2, 2, 3, 3], [10, 10, 11, 11, 12, 12, 13, 13, 14, 14]
    calls, played, spare_played = run(rows, spares)
    # 3 flat groups: a round of 3 spares (10 is flat), then one more for the last
    assert calls == [rows, [10, 10, 11, 11, 12, 12], [13, 13]] and spare_played == [10, 10, 11, 11, 12, 12, 13, 13]
    records, kept, stats = replace_flat_groups(rows, played[:8], spare_played, played[8:], group=2)
    one_round = replace_flat_groups(rows, played[:8], spares, [R(reward=x) for r in (10, 11, 12, 13, 14)
                                                                  for x in rewards[r]], group=2)
    assert kept == one_round[1] == [11, 11, 1, 1, 12, 12, 13, 13] and stats == one_round[2] == {"frac_zero_std": 3 / 4,
                                                                                                "replaced": 3}
    assert [r.reward for r in records] == [r.reward for r in one_round[0]]
    calls, played, spare_played = run([1, 1], spares)  # nothing flat: no spare is played
    assert calls == [[1, 1]] and spare_played == []
    calls, _, spare_played = run([0, 0, 2, 2, 3, 3], [10, 10, 11, 11])  # the spares run out: two rounds, then stop
    assert calls == [[0, 0, 2, 2, 3, 3], [10, 10, 11, 11]] and spare_played == [10, 10, 11, 11]
    calls, _, _ = run([0, 0, 1], spares)  # row 1's group is split with another process: it never asks for a spare
    assert calls[1:] == [[10, 10], [11, 11]]


def test_a_resumed_run_draws_spares_on_from_where_its_steps_left_the_pool():
    """--spare_groups after a resume: a new process starting at step 5 draws the spare rows a run that never
    stopped draws at step 5, never the pool's first rows again (they were played at step 1); two processes
    never share a spare."""
    from types import SimpleNamespace

    from training.rl.run import EpisodeRollouts

    def rollouts():
        script = SimpleNamespace(spare_groups=2, episode_log="")
        return EpisodeRollouts(script, SimpleNamespace(num_generations=3), game=None, episodes=list(range(10)),
                               spares=list(range(100)))

    whole = rollouts()
    drawn = [whole._draw_spares(0, 1, step) for step in range(8)]
    assert drawn[0] == [10, 10, 10, 11, 11, 11] and drawn[5] == [20, 20, 20, 21, 21, 21]
    resumed = rollouts()
    assert [resumed._draw_spares(0, 1, step) for step in (5, 6, 7)] == drawn[5:]
    two = [rollouts(), rollouts()]
    a, b = ([r._draw_spares(p, 2, step) for step in (3, 4)] for p, r in enumerate(two))
    assert not {x for rows in a for x in rows} & {x for rows in b for x in rows}
    assert a[0][0] == 10 + 2 * 3 * 2  # process 0, step 3: the pool's rows 12 on, every other one


@pytest.mark.slow
@pytest.mark.parametrize("on_demand", [False, True])
def test_grpo_with_spare_groups_trains_on_the_replacements_and_logs_both_shares(tiny_dir, tmp_path, on_demand):
    """A GRPO run with --spare_groups plays the spares in the step's batch (or, --spares_on_demand, only as many as
    it has flat groups): the curve logs the share of flat groups as sampled and as trained and the episodes played,
    and every episode it trained on (episode log) is a train row, spares included, never one of another step. The
    log's folder is made when missing."""
    from training import grpo
    out, curve, log = tmp_path / "grpo", tmp_path / "curve.json", tmp_path / "logs" / "run" / "episodes"
    grpo.main(["--smoke", "--model_name_or_path", str(tiny_dir), "--output_dir", str(out), "--curve", str(curve),
               "--spare_groups", "2", "--episode_log", str(log), "--expert_prefix", "0.5",
               *(["--spares_on_demand", "true"] if on_demand else [])])
    points = json.loads(curve.read_text())["points"]
    assert [p["step"] for p in points] == [1, 2]
    for p in points:
        flat = round(p["frac_reward_zero_std_sampled"] * 2)  # the step's 2 groups of 4
        if on_demand:  # a spare group played for each flat group at least, never more than the 2 drawn
            assert p["episodes"] == 8 and 8 + 4 * min(flat, 2) <= p["episodes_played"] <= 8 + 4 * 2
            assert p["episodes_played"] == 8 or flat
        else:
            assert p["episodes"] == 8 and p["episodes_played"] == 16
        assert p["expert_prefix_share"] in (0, 0.25, 0.5, 0.75, 1)  # whole groups of 4 start late or none
        assert p["frac_reward_zero_std"] <= p["frac_reward_zero_std_sampled"]
        assert p["groups_replaced"] == round((p["frac_reward_zero_std_sampled"] - p["frac_reward_zero_std"]) * 2)
        assert -1 <= p["reward_mean_sampled"] <= 1
        if not p["groups_replaced"]:  # nothing replaced: what was sampled is what was trained
            assert p["reward_mean_sampled"] == pytest.approx(p["reward_mean"])
    played = [json.loads(line) for line in log.with_name("episodes.rank0.jsonl").read_text().splitlines()]
    assert len(played) == 16 and all(e["row"] == e["episode"]["seed"] for e in played)
    assert sum(p["expert_prefix_share"] * p["episodes"] for p in points) == sum(e["episode"]["handover"] > 0 for e in played)
    assert any(e["episode"]["handover"] for e in played)
    assert json.loads(curve.read_text())["provenance"]["segments"][-1]["expert_prefix"] == 0.5
    spares = {e["row"] for e in played if e["row"] >= 16}  # the dataset holds 2 steps x 8 rows
    assert spares <= set(range(16, 16 + 2 * 2)) and sum(p["groups_replaced"] for p in points) == len(spares)
    with pytest.raises(SystemExit):
        grpo.main(["--smoke", "--spare_groups", "-1"])
    with pytest.raises(SystemExit):
        grpo.main(["--smoke", "--spares_on_demand", "true"])


@pytest.mark.slow
def test_a_run_stopped_at_a_step_plays_the_full_runs_rows_and_records_the_stop(tiny_dir, tmp_path):
    """--stop_at_step: a short branch ends after its step (checkpoint saved, the curve saying where and why) and
    plays the rows the full --max_steps run plays at that step, spares included: runs side by side compare."""
    from training import grpo

    def run(name, *extra):
        out, curve, log = tmp_path / name, tmp_path / f"{name}.json", tmp_path / name / "episodes"
        grpo.main(["--smoke", "--model_name_or_path", str(tiny_dir), "--output_dir", str(out), "--curve", str(curve),
                   "--spare_groups", "1", "--episode_log", str(log), *extra])
        played = [json.loads(line) for line in log.with_name("episodes.rank0.jsonl").read_text().splitlines()]
        return json.loads(curve.read_text()), {(e["step"], e["row"]) for e in played}, out

    full, full_rows, _ = run("full")
    short, short_rows, out = run("short", "--stop_at_step", "1")
    assert [p["step"] for p in full["points"]] == [1, 2] and "stopped" not in full
    assert [p["step"] for p in short["points"]] == [1] and short["max_steps"] == 2
    assert short["stopped"]["at_step"] == 1 and short["stopped"]["reason"] == "--stop_at_step 1"
    assert {r for s, r in short_rows} == {r for s, r in full_rows if s == 1}
    assert (out / "checkpoint-1").is_dir() and not (out / "checkpoint-2").exists()


def test_expert_prefix_rows_start_late_in_the_experts_own_game():
    """--expert_prefix keeps every row's product and seed and starts a share of them (drawn from the seed) late in
    the expert's game against the row's seller: the expert keeps at least its first reply and the policy plays at
    most --expert_prefix_replies of the replies the expert made there."""
    from env.bargain.play import play_episode
    from env.bargain.players import make_player
    from training.games import game_for
    from training.rl.run import GRPOScriptArguments

    sellers = "neutral,boulware,unyielding"
    plain = game_for(GRPOScriptArguments(scenarios="builtin", sellers=sellers)).rows(200)
    game = game_for(GRPOScriptArguments(scenarios="builtin", sellers=sellers, expert_prefix=0.5,
                                        expert_prefix_replies=2))
    rows = game.rows(200)
    assert rows == game.rows(200) and not any(r.handover for r in plain)
    assert [(r.product, r.seed) for r in rows] == [(r.product, r.seed) for r in plain]
    late = [r for r in rows if r.handover]
    assert 60 < len(late) < 140
    for r in late:
        env = play_episode(game.train[r.product], make_player("buyer", "expert"),
                           make_player("seller", sellers.split(",")[r.seed % 3]), r.seed)
        replies = sum(t["role"] == "buyer" for t in env.log)
        assert max(1, replies - 2) <= r.handover <= replies - 1
    assert {r.handover for r in late} >= {4, 5}
    with pytest.raises(ValueError, match="expert_prefix"):
        GRPOScriptArguments(expert_prefix=1.5)


def test_greedy_prefix_groups_replay_the_policys_own_greedy_game_and_sample_its_last_replies():
    """--greedy_prefix: each distinct row is played once greedily by the policy; its group replays that game's first
    replies untrained (mask 0), move for move, and samples the last --greedy_prefix_replies or fewer (trained); the
    backend samples again after the greedy games, and the greedy games are kept for the curve."""
    from dataclasses import replace

    from training.engine.backends import SamplingConfig, TransformersBackend, greedy_decoding
    from training.engine.models import load_model
    from training.engine.rollout import LLMAgent
    from training.games import game_for
    from training.rl.run import GRPOScriptArguments

    sellers = "neutral,boulware,conceder"
    game = game_for(GRPOScriptArguments(scenarios="builtin", sellers=sellers, greedy_prefix=1.0,
                                        greedy_prefix_replies=2))
    rows = game.rows(40)
    assert all(r.greedy_prefix for r in rows) and not any(r.handover for r in rows)
    half = [r.greedy_prefix for r in game_for(GRPOScriptArguments(scenarios="builtin", greedy_prefix=0.5)).rows(200)]
    assert 60 < sum(half) < 140
    model, tok = load_model("artifacts/checkpoints/grpo-tiny", device="cpu", dtype="float32")
    agent = LLMAgent(TransformersBackend(model, tok, SamplingConfig(temperature=1.0, seed=3)), "option_a")
    groups = [rows[i] for i in (0, 1, 2) for _ in range(3)]
    records = game.play(agent, groups)
    kept = game.last_greedy
    assert agent.backend.sampling.temperature == 1.0 and len(kept) == 3
    with greedy_decoding(agent.backend):
        assert agent.backend.sampling.temperature == 0
        alone = game.play(agent, [replace(r, greedy_prefix=False) for r in rows[:3]])
    started_late = 0
    for i, rec in enumerate(records):
        greedy = [t for t in alone[i // 3].transcript["turns"] if t["role"] == "buyer"]
        assert kept[i // 3].transcript == alone[i // 3].transcript
        k = rec.handover
        assert max(0, len(greedy) - 2) <= k <= len(greedy) - 1
        assert [t for t in rec.transcript["turns"] if t["role"] == "buyer"][:k] == greedy[:k]
        assert [sum(t.mask) == 0 for t in rec.turns] == [j < k for j in range(len(rec.turns))]
        started_late += k > 0
    assert started_late, "some greedy game had more than one reply, so a group started late"
    assert len({r.handover for r in records[:3]}) == 1  # one handover a group
    assert not any(r.guided for r in records)
    # --greedy_prefix_guide 1: the first episode of each group has the expert play on from the greedy game's state,
    # its replies trained on (mask 1), the prefix replayed untrained; the other episodes are the policy's as above
    guided_game = game_for(GRPOScriptArguments(scenarios="builtin", sellers=sellers, greedy_prefix=1.0,
                                               greedy_prefix_replies=2, greedy_prefix_guide=1))
    again = guided_game.play(agent, groups)
    assert [r.guided for r in again] == [True, False, False] * 3
    for i, rec in enumerate(again):
        k, greedy = rec.handover, alone[i // 3]
        assert k == records[i].handover
        buyer = [t for t in rec.transcript["turns"] if t["role"] == "buyer"]
        assert buyer[:k] == [t for t in greedy.transcript["turns"] if t["role"] == "buyer"][:k]
        assert [sum(t.mask) == 0 for t in rec.turns] == [j < k for j in range(len(rec.turns))]
        if rec.guided:  # the expert wrote every reply after the prefix: none unreadable, no deal over the budget
            assert not rec.metrics["overshoot"] and not rec.metrics["format_errors"] and len(buyer) > k
    with pytest.raises(ValueError, match="greedy_prefix_guide"):
        GRPOScriptArguments(greedy_prefix_guide=1)
    with pytest.raises(ValueError, match="greedy_prefix"):
        GRPOScriptArguments(greedy_prefix=1.5)
    with pytest.raises(ValueError, match="greedy_prefix"):
        GRPOScriptArguments(greedy_prefix=0.5, expert_prefix=0.5)
    with pytest.raises(ValueError, match="greedy_prefix"):
        game.play(agent, rows[:1], opponent=object())


@pytest.mark.slow
def test_grpo_with_greedy_prefix_logs_the_greedy_games_and_the_late_share(tiny_dir, tmp_path):
    """A GRPO run with --greedy_prefix plays each step's rows greedily first: the curve logs how many greedy games,
    their reward and deal rate, and the share of trained episodes that started late; the episode log each handover.
    With --greedy_prefix_guide the curve logs the guided share and the policy's own episodes' reward."""
    from training import grpo
    curve, log = tmp_path / "curve.json", tmp_path / "episodes"
    grpo.main(["--smoke", "--model_name_or_path", str(tiny_dir), "--output_dir", str(tmp_path / "grpo"), "--curve",
               str(curve), "--episode_log", str(log), "--greedy_prefix", "1", "--greedy_prefix_guide", "1"])
    run = json.loads(curve.read_text())
    for p in run["points"]:
        assert p["greedy_games"] == 2 and -1 <= p["greedy_reward_mean"] <= 1 and 0 <= p["greedy_deal_rate"] <= 1
        assert 0 <= p["greedy_prefix_share"] <= 1
        assert p["guided_share"] == 0.25 and -1 <= p["reward_mean_policy"] <= 1  # one guided episode a group of 4
    played = [json.loads(line) for line in log.with_name("episodes.rank0.jsonl").read_text().splitlines()]
    assert all(e["episode"]["greedy_prefix"] and e["handover"] >= 0 for e in played)
    assert sum(p["greedy_prefix_share"] * p["episodes"] for p in run["points"]) == sum(e["handover"] > 0 for e in played)
    assert run["provenance"]["segments"][-1]["greedy_prefix_guide"] == 1
    assert run["provenance"]["segments"][-1]["greedy_prefix"] == 1 and "greedy game" in run["provenance"]["seeds"]["rows"]


def test_with_signal_keeps_the_groups_that_differ_and_fills_the_micro_batches_with_the_shortest_flat_rows():
    import torch

    from training.rl.trim import with_signal
    adv = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.5, -0.5, 0.5, -0.5, 0.2, 0.2, 0.2, 0.2])  # flat, signal, flat (rounding may leave it off 0)
    lengths = torch.tensor([5, 2, 7, 3, 4, 4, 4, 4, 1, 9, 9, 9])
    batch = {"advantages": adv, "prompt_mask": torch.ones(12, 1, dtype=torch.long),
             "completion_mask": (torch.arange(10)[None, :] < lengths[:, None] - 1).long(),
             "names": list("abcdefghijkl"), "num_items_in_batch": torch.tensor(57)}
    out = with_signal(batch, group=4, chunks=2)
    assert out["names"] == list("efgh") and out["num_items_in_batch"].item() == 57
    out = with_signal(batch, group=4, chunks=3)  # 4 rows with signal: 6 for 3 micro-batches, the 2 shortest flat
    assert out["names"] == list("befghi") and out["advantages"].tolist() == pytest.approx([0, .5, -.5, .5, -.5, .2])
    flat = {**batch, "advantages": torch.zeros(12)}
    assert with_signal(flat, group=4, chunks=2)["names"] == list("bi")  # nothing to learn: the shortest, to step
    per_token = {**flat, "advantages": torch.zeros(12, 3)}  # SDPO's: a flat group still carries the teacher's term
    assert with_signal(per_token, group=4, chunks=2) is per_token
    with pytest.raises(ValueError):
        with_signal(batch, group=5, chunks=2)


@pytest.mark.slow
def test_grpo_without_kl_skips_flat_groups_and_takes_the_same_step(tmp_path, monkeypatch):
    """With --beta 0 a flat group's rows have zero loss: leaving them out of the forward and backward trains the same
    policy, up to float rounding, as training on every row."""
    import torch
    from safetensors.torch import load_file

    from training import grpo
    from training.rl import trim
    kept = []
    keep = trim.with_signal
    monkeypatch.setattr(trim, "with_signal", lambda b, *a: kept.append((b["advantages"], keep(b, *a))) or kept[-1][1])
    runs = {}
    for skip in (True, False):
        monkeypatch.setattr(trim.TrimmedBatches, "skip_flat_groups", skip)
        out = tmp_path / f"skip{skip}"
        grpo.main(["--smoke", "--model_name_or_path", str(SHIPPED_TINY), "--output_dir", str(out), "--curve",
                   str(out / "curve.json"), "--beta", "0", "--learning_rate", "1e-3", "--max_new_tokens", "64"])
        runs[skip] = load_file(out / "final" / "model.safetensors"), json.loads((out / "curve.json").read_text())
    assert len(kept) == 2, "the skipping run's two steps, none of the other's"
    assert any(len(o["advantages"]) < len(a) for a, o in kept), "a flat group was left out"
    assert any(o["advantages"].abs().max() > 0 for _, o in kept), "and a group with signal trained"
    start = load_file(SHIPPED_TINY / "model.safetensors")
    (skipped, curve), (full, full_curve) = runs[True], runs[False]
    assert [p["reward_mean"] for p in curve["points"]] == [p["reward_mean"] for p in full_curve["points"]]
    moved = max((full[k] - start[k]).abs().max().item() for k in start)
    assert moved > 0 and max((skipped[k] - full[k]).abs().max().item() for k in start) < 1e-3 * moved


@pytest.mark.slow
@pytest.mark.parametrize("consistency", ["per_false_claim", "signed_share"])
def test_grpo_samples_its_episodes_on_llamacpp_and_trains_on_them(tmp_path, monkeypatch, consistency):
    """--rollout_backend llamacpp: every step exports the policy it is about to sample from (the curve says how long
    that took), plays the step's episodes on the engine and trains on them. With --consistency_weight the false
    claims of the buyer's Thoughts are a second reward, logged apart from the environment's."""
    pytest.importorskip("llama_cpp")
    import torch
    from safetensors.torch import load_file

    from training import grpo
    from training.rl.run import EpisodeRollouts
    handed = []  # what the rollout hands TRL each step
    play = EpisodeRollouts.__call__
    monkeypatch.setattr(EpisodeRollouts, "__call__", lambda self, *a: handed.append(play(self, *a)) or handed[-1])
    out, curve = tmp_path / "grpo", tmp_path / "curve.json"
    grpo.main(["--smoke", "--model_name_or_path", str(SHIPPED_TINY), "--output_dir", str(out), "--curve", str(curve),
               "--max_new_tokens", "128", "--learning_rate", "1e-3", "--rollout_backend", "llamacpp",
               "--rollout_precision", "float32", "--consistency_weight", "0.5", "--consistency_reward", consistency])
    artifact = json.loads(curve.read_text())
    points = artifact["points"]
    assert [p["step"] for p in points] == [1, 2]
    assert artifact["provenance"]["config"]["grpo"]["reward_weights"] == [1.0, 0.5]
    # no made-up log-probs: the engine gives none, so TRL scores the tokens in the trainer's forward (SDPO too)
    assert len(handed) == 2 and all(h["logprobs"] is None and len(h["completion_ids"]) == 8 for h in handed)
    for p in points:
        assert p["episodes"] == 8 and p["export_s"] > 0 and p["rollout_s"] > 0 and p["context_full"] == 0
        assert -1 <= p["reward_mean"] <= 1 and p["grad_norm"] > 0
        false = p["thought_claims"] * (1 - (p["thought_consistency"] or 0))  # this step's false claims
        if consistency == "per_false_claim":
            assert p["rewards/false_thought_claims/mean"] == pytest.approx(-false / p["episodes"])
        else:  # each episode's (true - false) / claims, 0 where it stated none, averaged over the step
            got = handed[p["step"] - 1]
            assert sum(got["claims"]) == p["thought_claims"] and sum(got["true_claims"]) == p["thought_claims"] - false
            shares = [(2 * t - n) / n if n else 0.0 for t, n in zip(got["true_claims"], got["claims"])]
            assert p["rewards/thought_claims_signed_share/mean"] == pytest.approx(sum(shares) / len(shares))
    start, end = load_file(SHIPPED_TINY / "model.safetensors"), load_file(out / "final" / "model.safetensors")
    assert any(not torch.equal(start[k], end[k]) for k in start), "the policy trained on the engine's episodes"
    assert (out / "gguf" / "process0").is_dir() and not any((out / "gguf" / "process0").iterdir()), \
        "every export deleted after training"
    with pytest.raises(SystemExit):
        grpo.main(["--smoke", "--rollout_precision", "int8"])


@pytest.mark.slow
def test_the_lm_head_at_trained_positions_only_leaves_the_training_unchanged(tmp_path):
    """GRPO with the LM head scored at the trained player's tokens only (the default) against every completion
    position: the same rollouts, losses, KL, entropy and gradient norms per step, and the same weights after, with a
    KL term (the reference forward) in the loss."""
    from safetensors.torch import load_file

    from training import grpo
    runs = {}
    for flag in ("true", "false"):
        out, curve = tmp_path / flag, tmp_path / f"{flag}.json"
        grpo.main(["--smoke", "--model_name_or_path", str(SHIPPED_TINY), "--output_dir", str(out), "--curve", str(curve),
                   "--beta", "0.04", "--max_new_tokens", "64", "--max_steps", "3", "--learning_rate", "1e-3",
                   "--lm_head_trained_only", flag])
        runs[flag] = json.loads(curve.read_text())["points"], load_file(out / "final" / "model.safetensors")
    (fast, w_fast), (full, w_full) = runs["true"], runs["false"]
    assert [p["reward_mean"] for p in fast] == [p["reward_mean"] for p in full]  # the same episodes
    for a, b in zip(fast, full):
        for key in ("loss", "kl", "entropy", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (key, a[key], b[key])
    assert any(p["kl"] > 0 for p in fast) and all(p["grad_norm"] > 0 for p in fast)  # KL and policy terms at work
    # the weights after: as close as float rounding leaves them (Adam turns the rounding of near-zero gradients into
    # steps of up to the learning rate, so the bound is a fraction of one step, far below what training moved them)
    start = load_file(SHIPPED_TINY / "model.safetensors")
    moved = max(float((w_full[k] - start[k]).abs().max()) for k in w_full)
    gap = max(float((w_fast[k] - w_full[k]).abs().max()) for k in w_full)
    assert gap < 0.5 * moved, (gap, moved)


def test_curves_compare_on_the_reward_as_sampled_and_pool_thought_claims(tmp_path, capsys):
    """training/compare_runs.py (training.rl.compare) reads a spares run's reward as sampled (before its flat groups were replaced), so runs
    are compared on the same rows; Thought consistency pools claims over steps; a bad file is one clear error."""
    from training.rl import compare
    plain = [{"step": 1, "episodes": 8, "reward_mean": 0.1, "frac_reward_zero_std": 0.5, "deal_rate": 0.5,
              "thought_claims": 10, "thought_consistency": 0.9, "wall_s": 10.0},
             {"step": 2, "episodes": 8, "reward_mean": 0.3, "frac_reward_zero_std": 0.0, "deal_rate": 0.7,
              "thought_claims": 30, "thought_consistency": 0.5, "wall_s": 30.0}]
    spares = [{**p, "reward_mean": p["reward_mean"] + 0.2, "reward_mean_sampled": p["reward_mean"],
               "episodes_played": 16, "frac_reward_zero_std_sampled": 0.5, "frac_reward_zero_std": 0.0} for p in plain]
    a, b = compare.summarize(plain), compare.summarize(spares)
    assert a["reward_sampled"] == pytest.approx(0.2) == b["reward_sampled"]
    assert a["reward_second_half"] == pytest.approx(0.3)
    assert a["thought_consistency"] == pytest.approx((9 + 15) / 40)  # pooled, not the mean of 0.9 and 0.5
    assert (b["episodes"], b["episodes_played"], b["zero_std_sampled"], b["zero_std_trained"]) == (16, 32, 0.5, 0.0)
    assert a["step_s"] == 20.0 and a["rollout_s"] is None
    path = tmp_path / "x_training_curve.json"
    path.write_text(json.dumps({"points": spares}))
    compare.main([str(path), f"plain={path}"])
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("| x | 2 | 16 (32) | +0.200 |") and out[3].startswith("| plain |")
    compare.main([str(path), "--from_step", "2"])  # a branch's own steps: the resumed checkpoint's are left out
    assert capsys.readouterr().out.splitlines()[2].startswith("| x | 1 | 8 (16) | +0.300 |")
    compare.main([str(path), "--to_step", "1"])  # a longer run read over a shorter one's steps
    assert capsys.readouterr().out.splitlines()[2].startswith("| x | 1 | 8 (16) | +0.100 |")
    with pytest.raises(SystemExit, match="no step from 3 on"):
        compare.main([str(path), "--from_step", "3"])
    with pytest.raises(SystemExit, match="cannot read a training curve"):
        compare.main([str(tmp_path / "missing.json")])
    with pytest.raises(ValueError, match="no points"):
        compare.summarize([])


def test_the_signed_share_consistency_reward_pays_true_claims_and_never_pays_silence():
    """``--consistency_reward signed_share``: all true +1, all false -1, half and half 0, no claim 0 (a buyer that
    stops stating comparisons gains nothing over one that states them truly), bounded whatever the count; and a
    form that is not one of the two is refused."""
    from training.rl.run import GRPOScriptArguments, thought_claims_signed_share

    assert thought_claims_signed_share([None] * 5, true_claims=[4, 0, 2, 0, 30], claims=[4, 3, 4, 0, 31]) == \
        pytest.approx([1.0, -1.0, 0.0, 0.0, 29 / 31])
    with pytest.raises(ValueError, match="--consistency_reward must be one of"):
        GRPOScriptArguments(consistency_reward="per_claim")
