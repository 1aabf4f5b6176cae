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
                          str(sft_final), "--output_dir", str(tmp_path / "grpo"), "--curve", str(tmp_path / "g.json")])
    assert (final / "config.json").exists()
    points = json.loads((tmp_path / "g.json").read_text())["points"]
    assert [p["step"] for p in points] == [1, 2]
    for p in points:
        assert {"reward_mean", "job_completion_rate", "invalid_rate", "deal_rate", "frac_reward_zero_std"} <= set(p)
        assert p["episodes"] == 8 and -10 < p["reward_min"] <= p["reward_mean"] <= p["reward_max"]
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
])
def test_grpo_refuses_what_the_market_cannot_do(argv, match, capsys):
    with pytest.raises(SystemExit):
        grpo.main(argv)
    assert match in capsys.readouterr().err


def test_sdpo_says_it_is_for_the_bilateral_game(capsys):
    with pytest.raises(SystemExit):
        sdpo.main(["--env", "market"])
    assert "grpo.py --env market" in capsys.readouterr().err


def test_market_evaluation_needs_something_to_evaluate(capsys):
    with pytest.raises(SystemExit):
        evaluate.main(["--env", "market", "--policies", "none"])
    assert "nothing to evaluate" in capsys.readouterr().err
