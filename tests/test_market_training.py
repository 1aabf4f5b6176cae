"""Language-model labs in the GPU market: prompts, the rollout engine, and training with --env market."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from env.core import LeakError
from env.market import TASKS, MarketEnv, make_policy, parse_action, play_market
from env.market.prompts import assert_market_no_leak, market_system_prompt, market_user_message
from training import evaluate, grpo, sdpo, sft
from training.engine.backends import SamplingConfig, TransformersBackend
from training.engine.rollout import LLMAgent, Teacher
from training.games.market import MarketEpisode, MarketGame
from training.games.market.rollout import play_market_episodes

TASK_NAMES = list(TASKS)


def _agent(tiny, mode="option_a", **sampling):
    model, tok = tiny
    cfg = dict(temperature=0.7, max_new_tokens=24, think_tokens=12, seed=3)
    cfg.update(sampling)
    return LLMAgent(TransformersBackend(model, tok, SamplingConfig(**cfg)), mode)


def _other_job_ids(env: MarketEnv) -> list[str]:
    return [j.id for lab in env.world.labs[1:] for j in lab.jobs]


def _check_record(rec, tok):
    full = rec.prompt_ids + rec.completion_ids
    assert len(rec.completion_ids) == len(rec.env_mask) == len(rec.logprobs)
    lab0 = [s for s in rec.env.transcript if s["lab"] == 0]
    assert len(rec.turns) == len(lab0) > 0, "one model turn per lab-0 action"
    covered = [0] * len(full)
    for t, step in zip(rec.turns, lab0):
        start = len(t.prompt_ids)
        assert full[:start] == t.prompt_ids and full[start: start + len(t.completion_ids)] == t.completion_ids
        for j, m in enumerate(t.mask):
            covered[start + j] = m
        # what the environment read is exactly what the model wrote (a refused reply is kept as written)
        assert step["action"] == (parse_action(t.text) if step["code"] == "ok" else t.text)
    assert covered[len(rec.prompt_ids):] == rec.env_mask, "mask 1 exactly on generated tokens"
    stream = tok.decode(full)
    for job in _other_job_ids(rec.env):  # another lab's private jobs never reach the model
        assert not re.search(rf"(?<![\w.]){re.escape(job)}(?![\w.]|\.\d)", stream), job
    assert rec.reward == pytest.approx(rec.env.outcome(0)["reward"])
    led = rec.env.ledger()
    assert led["money"] == pytest.approx(led["money_start"]) and led["hours"] == pytest.approx(led["hours_start"])


@pytest.mark.parametrize("mode", ["option_a", "option_b"])
def test_teacher_games_are_the_experts_games_token_for_token(tiny, mode):
    agent = _agent(tiny, mode)
    eps = [(task, seed) for task in TASK_NAMES for seed in (1, 2)]
    records = play_market_episodes(eps, Teacher("expert", agent))
    for rec, (task, seed) in zip(records, eps):
        assert rec.env.transcript == play_market(task, seed, make_policy("expert")).transcript
        _check_record(rec, tiny[1])
        for t in rec.turns:
            assert t.mask == [1] * len(t.mask)
            assert t.text.startswith("<think>") == (mode == "option_b")
            assert isinstance(parse_action(t.text), dict), t.text


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["option_a", "option_b"])
def test_an_untrained_model_plays_every_task_end_to_end(tiny, mode):
    agent = _agent(tiny, mode)
    eps = [(task, 40 + k) for task in TASK_NAMES for k in range(2)]
    records = play_market_episodes(eps, agent)
    for rec in records:
        assert rec.env.done and rec.trained_role == "lab0"
        _check_record(rec, tiny[1])
        out = rec.metrics
        # the untrained model's replies are not actions: each one refused, penalised, and the game goes on
        assert out["invalid"] <= out["actions"] and out["terms"]["invalid"] == -2.0 * out["invalid"]
        # what the curve reads: its acts, and its refusals by reason adding up to the refused count
        assert 0 <= out["acts"] <= out["actions"] and sum(out["refused_by_code"].values()) == out["invalid"]


@pytest.mark.slow
def test_engine_matches_one_episode_at_a_time(tiny):
    agent = _agent(tiny, temperature=0.0)
    eps = [("single_trade", 70 + k) for k in range(4)]
    batched = play_market_episodes(eps, agent)
    single = [play_market_episodes([e], agent)[0] for e in eps]
    same = sum(a.env.transcript == b.env.transcript for a, b in zip(batched, single))
    assert same >= 3, "greedy decoding: padding may flip at most a rare near-tie"


def test_scripted_policies_through_the_engine_equal_the_harness():
    eps = [(task, 9) for task in TASK_NAMES]
    for name in ("expert", "greedy_bidder"):
        for rec, (task, seed) in zip(play_market_episodes(eps, name), eps):
            assert rec.env.transcript == play_market(task, seed, make_policy(name)).transcript
            assert rec.completion_ids == [] and rec.reward == rec.env.outcome(0)["reward"]


def test_prompts_show_the_labs_own_view_and_the_leak_guard_fires():
    env = MarketEnv()
    env.reset(3, {"task": "coalition_market"})
    obs = env.observe(0)
    text = market_system_prompt(obs) + market_user_message(obs)
    assert_market_no_leak(text, env)
    for job in env.world.labs[0].jobs:
        assert job.id in text
    assert '"action": "pitch"' in text and "coalition_market" in text
    other = _other_job_ids(env)[0]
    with pytest.raises(LeakError, match=other):
        assert_market_no_leak(text + f" their job {other} is urgent", env)


def test_market_training_rows_and_defaults_stay_apart_from_evaluation_and_the_bilateral_runs():
    script = SimpleNamespace(env="market", curve="artifacts/grpo_training_curve.json",
                             task_names=["single_trade", "market_round"])
    game = MarketGame(script)
    assert game.rows(5) == [MarketEpisode("single_trade", 0), MarketEpisode("market_round", 1),
                            MarketEpisode("single_trade", 2), MarketEpisode("market_round", 3),
                            MarketEpisode("single_trade", 4)]
    with pytest.raises(ValueError, match="held-out"):
        game.rows(1_000_001)
    cfg = SimpleNamespace(output_dir="runs/grpo")
    game.defaults(cfg, "artifacts/grpo_training_curve.json", "runs/grpo")
    assert script.curve == "artifacts/grpo_market_training_curve.json" and cfg.output_dir == "runs/grpo-market"
    script.curve, cfg = "mine.json", SimpleNamespace(output_dir="runs/x")
    game.defaults(cfg, "artifacts/grpo_training_curve.json", "runs/grpo")
    assert script.curve == "mine.json" and cfg.output_dir == "runs/x"


@pytest.mark.slow
def test_sft_then_grpo_train_on_the_market(tiny_dir, tmp_path):
    _, sft_final = sft.main(["--smoke", "--env", "market", "--tasks", "single_trade", "--model", str(tiny_dir),
                             "--output_dir", str(tmp_path / "sft"), "--curve", str(tmp_path / "sft.json")])
    curve = json.loads((tmp_path / "sft.json").read_text())
    assert [p["step"] for p in curve["points"]] == [1, 2] and curve["expert_reward_mean"] > 0
    assert "single_trade" in curve["provenance"]["seeds"]["games"]
    _, final = grpo.main(["--smoke", "--env", "market", "--tasks", "single_trade", "--model_name_or_path",
                          str(sft_final), "--output_dir", str(tmp_path / "grpo"), "--curve", str(tmp_path / "g.json"),
                          "--refusal_weight", "0.5"])
    assert (final / "config.json").exists()
    curve = json.loads((tmp_path / "g.json").read_text())
    assert curve["provenance"]["config"]["grpo"]["reward_weights"] == [1.0, 0.5]
    points = curve["points"]
    assert [p["step"] for p in points] == [1, 2]
    for p in points:
        assert {"reward_mean", "job_completion_rate", "invalid_rate", "deal_rate", "frac_reward_zero_std"} <= set(p)
        assert p["episodes"] == 8 and -10 < p["reward_min"] <= p["reward_mean"] <= p["reward_max"]
        # TRL saw the shaping as its own reward function: minus the step's refused actions per episode, which our
        # stats count apart (refusals / actions x actions per episode); reward_mean stays the environment's
        assert p["rewards/refused_actions/mean"] == pytest.approx(-p["invalid_rate"] * p["actions_mean"])
    out = tmp_path / "eval.json"
    artifact = evaluate.main(["--env", "market", "--policies", "none", "--models", f"grpo={final}", "--tasks",
                              "single_trade", "--episodes", "3", "--max_new_tokens", "16", "--out", str(out),
                              "--transcripts", "", "--progress", "false"])
    (row,) = artifact["rows"]
    assert row["policy"] == "grpo" and row["episodes"] == 3
    assert json.loads(out.read_text())["provenance"]["seeds"]["base"] == 1_000_000


@pytest.mark.parametrize("argv, match", [
    (["--env", "market", "--push_to_hub"], "not wired for --env market"),
    (["--env", "auction"], "--env must be"),
    (["--env", "market", "--tasks", "poker"], "unknown task"),
    (["--env", "market", "--refusal_weight", "-0.1"], "must be 0 or more"),  # a reward for refusals
    (["--env", "market", "--refusal_weight", "nan"], "must be 0 or more"),
    (["--refusal_weight", "0.1"], "counts none"),  # the bilateral game ends a bad reply at -1: nothing to shape
    (["--env", "market", "--refusal_weight", "0.1", "--reward_weights", "1", "2"], "drop --reward_weights"),
    (["--env", "market", "--consistency_weight", "0.1"], "checks none"),  # the market scores no Thought
    (["--consistency_weight", "-0.1"], "must be 0 or more"),
    (["--consistency_weight", "0.1", "--reward_weights", "1", "2"], "drop --reward_weights"),
    (["--rollout_backend", "ct2"], "--rollout_backend must be one of transformers, llamacpp"),
    (["--env", "market", "--time_budget_s", "-5"], "--time_budget_s must be 0 (none) or more"),
    (["--time_budget_s", "nan"], "--time_budget_s must be 0 (none) or more"),
    (["--stop_at_step", "-1"], "--stop_at_step must be 0 (none) or more"),
])
def test_grpo_refuses_what_the_market_cannot_do(argv, match, capsys):
    with pytest.raises(SystemExit):
        grpo.main(argv)
    assert match in capsys.readouterr().err


def test_a_time_budget_ends_training_at_the_last_step_that_fits():
    """--time_budget_s: after each step, training stops when one more step as long as the longest so far would pass
    the budget (counted from the run's start); the run records where it stopped."""
    from types import SimpleNamespace

    from transformers import TrainerControl

    from training.rl.run import TimeBudget
    now = [5.0]  # the run began at 0: loading took 5 s
    run = SimpleNamespace(script=SimpleNamespace(time_budget_s=100.0), start=0.0, stopped=None)
    budget, state, stops = TimeBudget(run, clock=lambda: now[0]), SimpleNamespace(global_step=0, max_steps=12), []
    for seconds in (30, 20, 40, 10):
        now[0] += seconds
        state.global_step += 1
        control = TrainerControl()
        budget.on_step_end(None, state, control)
        stops.append(control.should_training_stop)
    # after step 2: 55 s used, the longest 30: 85 fits; after step 3: 95 s + 40 would pass 100
    assert stops == [False, False, True, True]
    assert run.stopped["at_step"] == 4 and "--time_budget_s 100" in run.stopped["reason"]
    last = SimpleNamespace(global_step=12, max_steps=12)  # the last step: nothing left to stop
    control = TrainerControl()
    budget.on_step_end(None, last, control)
    assert not control.should_training_stop


def test_sdpo_says_it_is_for_the_bilateral_game(capsys):
    with pytest.raises(SystemExit):
        sdpo.main(["--env", "market"])
    assert "grpo.py --env market" in capsys.readouterr().err


def test_market_evaluation_needs_something_to_evaluate(capsys):
    with pytest.raises(SystemExit):
        evaluate.main(["--env", "market", "--policies", "none"])
    assert "nothing to evaluate" in capsys.readouterr().err


def test_the_market_evaluation_stores_every_lab_on_the_first_seeds_to_read_side_by_side(tiny_dir, tmp_path,
                                                                                         monkeypatch, capsys):
    """--transcript_seeds N: the model lab's games and the expert's on each task's first N held-out seeds go to the
    transcripts (the expert's exactly as the harness plays it), one record per task, seed and policy."""
    from env.market.evaluation import MARKET_EVAL_SEED_BASE, transcript
    from space import figures as F
    from space import market as M
    out = tmp_path / "t.jsonl"
    art = evaluate.main(["--env", "market", "--policies", "expert,idle", "--models", f"lm={tiny_dir}", "--tasks",
                         "single_trade", "--episodes", "3", "--batch_size", "3", "--max_new_tokens", "16",
                         "--transcript_seeds", "3", "--transcripts", str(out), "--out", "", "--progress", "false"])
    records = [json.loads(line) for line in out.read_text().splitlines()]
    keys = [(r["task"], r["seed"], r["policy"]) for r in records]
    assert len(keys) == len(set(keys))
    seeds = [MARKET_EVAL_SEED_BASE + k for k in range(3)]
    assert {("single_trade", s, p) for s in seeds for p in ("lm", "expert")} <= set(keys)
    assert not any(p == "idle" and s in seeds for _t, s, p in keys)  # only the expert among the scripted policies
    expert = next(r for r in records if r["seed"] == seeds[1] and r["policy"] == "expert")
    assert expert == json.loads(json.dumps(transcript(play_market("single_trade", seeds[1], make_policy("expert")),
                                                      "expert")))
    lm = [r["outcomes"][0]["reward"] for r in records if r["policy"] == "lm"]
    (row,) = [r for r in art["rows"] if r["policy"] == "lm"]
    assert len(lm) == 3 and sum(lm) / 3 == pytest.approx(row["reward_mean"])  # the very games of its row
    monkeypatch.setattr(F, "ARTIFACTS", tmp_path)
    assert list(M.side_by_side("t.jsonl")["single_trade"]) == seeds
    with pytest.raises(SystemExit):
        evaluate.main(["--env", "market", "--policies", "expert", "--episodes", "3", "--transcript_seeds", "4"])
    assert "--transcript_seeds must be from 0 to --episodes (3), got 4" in capsys.readouterr().err


@pytest.mark.parametrize("task", TASK_NAMES)
def test_a_model_game_replays_from_its_recorded_actions(tiny, task):
    """What the evaluation cache keeps (lab 0's actions as handed over) is enough to play the game again exactly;
    actions that run out or are left over are refused."""
    from env.market.play import replay_market
    (rec,) = play_market_episodes([(task, 5)], _agent(tiny, max_new_tokens=16))
    assert rec.actions and len(rec.actions) == len(rec.turns)
    again = replay_market(task, 5, rec.actions)
    assert again.transcript == rec.env.transcript and again.outcome(0) == rec.env.outcome(0)
    with pytest.raises(ValueError, match="did not reach the end"):
        replay_market(task, 5, rec.actions[:-1])
    with pytest.raises(ValueError, match="ended after"):
        replay_market(task, 5, rec.actions + ['{"action": "pass"}'])


def test_market_model_evaluation_resumes_from_its_cell_cache_and_joins_scripted_rows(tiny_dir, tmp_path, monkeypatch,
                                                                                        capsys):
    """A rerun with --cell_cache plays nothing (the model is not even loaded) and writes the same rows; a later run
    on more seeds includes those model rows, labelled as played on the first seeds, with the scripted rows of the
    same seeds beside them."""
    from training.games.market import adapter
    cache, first = tmp_path / "cells.jsonl", tmp_path / "a.json"
    argv = ["--env", "market", "--policies", "expert,idle", "--models", f"lm={tiny_dir}", "--tasks", "single_trade",
            "--episodes", "3", "--batch_size", "2", "--max_new_tokens", "16", "--cell_cache", str(cache),
            "--transcripts", "", "--progress", "false"]
    a = evaluate.main([*argv, "--out", str(first)])
    assert len(cache.read_text().splitlines()) == 2  # two batches: seeds 0-1 and 2

    def no_model(*_a, **_k):
        raise AssertionError("a cached batch loaded the model")
    monkeypatch.setattr(adapter, "build_agent", no_model)
    b = evaluate.main([*argv, "--out", str(tmp_path / "b.json")])
    assert b["rows"] == a["rows"] and len(b["cells_resumed"]) == 2
    # --model_tasks: the lab plays its own tasks only (read back: the option is not in a batch's key), the scripted
    # policies every task
    two = ["--tasks", "single_trade,market_round", "--model_tasks", "lm=single_trade"]
    c = evaluate.main([*argv, *two, "--out", ""])
    assert [r for r in c["rows"] if r["policy"] == "lm"] == [r for r in a["rows"] if r["policy"] == "lm"]
    assert {(r["policy"], r["task"]) for r in c["rows"] if r["policy"] != "lm"} == \
        {(p, t) for p in ("expert", "idle") for t in ("single_trade", "market_round")}
    for bad, says in ((["--model_tasks", "other=single_trade"], "not in --models"),
                      (["--model_tasks", "lm=coalition_market"], "not in --tasks"),
                      (["--model_tasks", "lm"], "name=task+task"),
                      (["--model_tasks", "lm=single_trade,lm=market_round"], "twice"),
                      (["--model_tasks", "lm=spot"], "spot")):
        with pytest.raises(SystemExit):
            evaluate.main([*argv, "--tasks", "single_trade,market_round", *bad, "--out", ""])
        assert says in capsys.readouterr().err
    monkeypatch.undo()
    joined = evaluate.main(["--env", "market", "--policies", "expert", "--tasks", "single_trade", "--episodes", "5",
                            "--include_rows", str(first), "--out", "", "--transcripts", "", "--progress", "false"])
    expert, lm = joined["rows"]
    assert expert["policy"] == "expert" and expert["episodes"] == 5
    assert lm["policy"] == "lm" and lm["episodes"] == 3 and "first 3 of these 5" in lm["episodes_subset"]
    (same,) = joined["same_seeds"]
    assert same["episodes"] == 3 and {r["policy"] for r in same["rows"]} == {"expert", "idle"}
    assert [r for r in same["rows"] if r["policy"] == "expert"][0] == [r for r in a["rows"] if r["policy"] == "expert"][0]
    with pytest.raises(SystemExit, match="seed base"):
        evaluate.main(["--env", "market", "--policies", "expert", "--tasks", "single_trade", "--episodes", "5",
                       "--seed_base", "7", "--include_rows", str(first), "--out", "", "--transcripts", ""])
    with pytest.raises(SystemExit, match="more than this run's 2"):  # model rows on more seeds than this run's
        evaluate.main(["--env", "market", "--policies", "expert", "--tasks", "single_trade", "--episodes", "2",
                       "--include_rows", str(first), "--out", "", "--transcripts", ""])
    # the join of a join keeps the rows (and their label and same-seed rows) that artifact had included
    second = tmp_path / "joined.json"
    second.write_text(json.dumps(joined))
    again = evaluate.main(["--env", "market", "--policies", "expert", "--tasks", "single_trade", "--episodes", "5",
                           "--include_rows", str(second), "--out", "", "--transcripts", "", "--progress", "false"])
    assert again["rows"][1] == lm and again["same_seeds"] == joined["same_seeds"]


@pytest.mark.slow
def test_the_market_pipeline_trains_and_evaluates_a_lab_through_one_command(tmp_path):
    """--env market: tiny model -> market SFT -> market GRPO -> the three labs beside every scripted policy on the
    same held-out seeds, each stage recorded; a rerun finds every stage finished and replays nothing."""
    import subprocess
    import sys
    from pathlib import Path

    from env.market import POLICIES
    root = Path(__file__).resolve().parent.parent
    argv = [sys.executable, "training/pipeline.py", "--env", "market", "--smoke", "--workdir", str(tmp_path)]
    proc = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    art = tmp_path / "artifacts"
    pipe = json.loads((art / "pipeline_market.json").read_text())
    assert [s["stage"] for s in pipe["stages"]] == ["tiny", "sft", "grpo", "evaluate"]
    assert not (art / "eval_market.json").exists()  # the shipped 500-seed table is the full SmolLM2 run's to join
    rows = json.loads((art / "eval_tiny_market.json").read_text())["rows"]
    assert {r["policy"] for r in rows} == {*POLICIES, "tiny_market_base", "tiny_market_sft", "tiny_market_grpo"}
    assert {r["task"] for r in rows} == {"single_trade"} and {r["episodes"] for r in rows} == {2}
    for name in ("sft_tiny_market_training_curve.json", "grpo_tiny_market_training_curve.json"):
        curve = json.loads((art / name).read_text())
        assert curve["points"] and "--env market" in curve["provenance"]["command"]
    assert len((tmp_path / "evaluate" / "cells.jsonl").read_text().splitlines()) == 3  # a batch per model
    again = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stdout.count("finished by an earlier run") == 4, again.stdout[-2000:]


def test_the_market_plans_train_what_fits_and_ship_only_the_full_smollm2_run(tmp_path):
    from training import pipeline
    tiny = dict(pipeline.market_stages(tmp_path, tmp_path / "art", "tiny", "default", False))
    assert all(cmd[cmd.index("--tasks") + 1] == "single_trade" for k, cmd in tiny.items() if "--tasks" in cmd)
    assert "join_evaluate" not in tiny and "eval_tiny_market.json" in " ".join(tiny["evaluate"])
    assert all(cmd[cmd.index("--out") + 1] != str(tmp_path / "art" / "eval_market.json") for cmd in tiny.values()
               if "--out" in cmd)
    full = dict(pipeline.market_stages(tmp_path, tmp_path / "art", "smollm2-135m", "full", False))
    assert full["sft"][full["sft"].index("--model") + 1] == "smollm2-135m"
    assert "recipes/smollm2/market_grpo.yaml" in " ".join(full["grpo"])
    assert float(full["grpo"][full["grpo"].index("--beta") + 1]) > 0  # held near its SFT start, as the bilateral RL
    # GRPO on the subset of tasks the preset names (one --tasks: the stage's own replaces the family's); the
    # evaluation on every task
    assert [x for x in full["grpo"] if x == "--tasks"] == ["--tasks"]
    assert full["grpo"][full["grpo"].index("--tasks") + 1] == "single_trade,market_round"
    assert full["evaluate"][full["evaluate"].index("--tasks") + 1] == "single_trade,market_round,coalition_market"
    # the command parses as grpo.py's own parser reads it (recipe, then flags): the environment's reward alone (the
    # refusal-shaped first run's greedy lab waited at every move)
    from trl import ModelConfig, TrlParser

    from training.common.cli import parse
    from training.rl.run import GRPOScriptArguments, HaggleGRPOConfig
    (script, cfg, _), _ = parse(TrlParser((GRPOScriptArguments, HaggleGRPOConfig, ModelConfig)), full["grpo"][1:],
                                "grpo")
    assert script.env == "market" and script.refusal_weight == 0 and cfg.max_steps == 12 and cfg.beta > 0
    assert script.tasks == "single_trade,market_round"
    ev = full["evaluate"]
    assert ev[ev.index("--temperature") + 1] == "0" and "--cell_cache" in ev
    assert ev[ev.index("--model_tasks") + 1] == "smollm2_market_base=single_trade"  # names a lab of --models
    labs = [x.split("=")[0] for x in ev[ev.index("--models") + 1].split(",")]
    assert labs == ["smollm2_market_grpo", "smollm2_market_sft", "smollm2_market_base"]  # the headline row first
    assert int(ev[ev.index("--transcript_seeds") + 1]) > 0  # every lab's games on the first seeds: the Space's before/after
    join = full["join_evaluate"]
    assert join[join.index("--include_rows") + 1].split(",") == [str(tmp_path / "art" / "eval_smollm2_market.json"),
                                                                 str(tmp_path / "art" / "eval_market.json")]
    assert join[join.index("--out") + 1] == str(tmp_path / "art" / "eval_market.json")
    # gpu: the same SFT and evaluation (a GPU run continues the full one's, and its rows join the same table); GRPO
    # plays 32 episodes a step under a time budget
    gpu = dict(pipeline.market_stages(tmp_path, tmp_path / "art", "smollm2-135m", "gpu", False))
    assert gpu["sft"] == full["sft"] and gpu["evaluate"] == full["evaluate"] and "join_evaluate" in gpu
    (script, cfg, _), _ = parse(TrlParser((GRPOScriptArguments, HaggleGRPOConfig, ModelConfig)), gpu["grpo"][1:],
                                "grpo")
    assert script.time_budget_s > 0 and cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps == 32
    for bad in (["--preset", "gpu"], ["--model", "smollm2-135m", "--preset", "gpu"]):  # the market's preset only
        with pytest.raises(SystemExit):
            pipeline.main(bad)
    for bad in (["--sft-from", "x"], ["--preset", "full"], ["--skip", "sdpo"]):  # full: not for the tiny model
        with pytest.raises(SystemExit):
            pipeline.main(["--env", "market", *bad])


def test_the_shipped_market_cards_results_are_the_evaluations_rows_beside_the_expert_best_baseline_and_idle(tmp_path):
    """The card tables each task a model lab played: every model row, the expert, the best scripted baseline (by
    mean, on the same file) and idle, with their numbers as the evaluation wrote them; no model rows, no table."""
    from training import pipeline

    def row(policy, task, mean, invalid=0.0):
        return {"policy": policy, "task": task, "episodes": 50, "reward_mean": mean,
                "reward_ci95": [mean - 0.1, mean + 0.1], "invalid_rate": invalid, "deals_mean": 0.5,
                "job_completion_rate": 0.25}

    rows = [row("expert", "single_trade", 0.7), row("no_negotiation", "single_trade", 0.4),
            row("greedy_bidder", "single_trade", -0.1), row("idle", "single_trade", 0.0),
            row("smollm2_market_grpo", "single_trade", 0.0), row("smollm2_market_sft", "single_trade", 0.02, 0.07),
            row("expert", "market_round", 0.8), row("greedy_bidder", "market_round", 0.3)]  # no model lab here
    (tmp_path / "e.json").write_text(json.dumps({"rows": rows}))
    md = pipeline.market_results_md(tmp_path / "e.json")
    table = [line for line in md.splitlines() if line.startswith("| single_trade")]
    assert [line.split(" | ")[1] for line in table] == ["smollm2_market_grpo", "smollm2_market_sft", "expert",
                                                          "no_negotiation (best baseline)", "idle"]
    assert "+0.020 (-0.080, +0.120) | 7.0%" in md and "market_round" not in md
    assert pipeline.market_results_md(tmp_path / "missing.json") == ""
    (tmp_path / "s.json").write_text(json.dumps({"rows": rows[:4]}))  # scripted rows only
    assert pipeline.market_results_md(tmp_path / "s.json") == ""
