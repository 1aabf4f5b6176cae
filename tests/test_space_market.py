"""The Space's GPU-market games (``space/market.py``) and its market API functions, in process."""

from __future__ import annotations

import json
import re

import pytest

import app
from env.market import TASKS, make_policy, play_market
from env.market.evaluation import summarize
from env.market.play import seat_rng
from env.market.moves import render_move
from space.market import (HUMAN, MarketSessions, card_markdown, from_one, human_action, person_markdown,
                          rounds_markdown, view)
from space.sessions import GameError


def expert_person(store, task: str, seed: int, act=None):
    """A person who plays lab 0 exactly as the rule expert would, seeing only what the page shows
    them (their observation); returns the final state and every state seen while playing."""
    act = act or store.act
    state = store.start(task=task, policy=HUMAN, seed=seed)
    expert = make_policy("expert")
    own = lambda st: from_one({**st["observation"], "events": []}, -1)  # noqa: E731  (the env's numbering)
    expert.reset(own(state), seat_rng(task, seed, 0))
    seen = [state]
    while not state["done"]:
        state = act(state["session_id"], json.dumps(expert.act(own(state))))
        seen.append(state)
    return state, seen


@pytest.mark.parametrize("task", list(TASKS))
def test_a_person_playing_like_the_expert_gets_the_experts_game(task):
    for seed in (0, 5):
        store = MarketSessions()
        state, _ = expert_person(store, task, seed)
        env = play_market(task, seed, make_policy("expert"))
        assert state["steps"] == from_one(env.transcript)
        assert state["outcome"]["reward"] == pytest.approx(env.outcome(0)["reward"])
        # the per-round holdings recorded while the person played are the expert's game's, round for round
        agents = MarketSessions().new_game(task=task, policy="expert", seed=seed).series
        assert store.get(state["session_id"]).series == agents and len(agents["rounds"]) >= 2


@pytest.mark.parametrize("task", list(TASKS))
def test_agents_only_games_equal_the_harness_and_show_everything(task):
    store = MarketSessions()
    for policy in ("expert", "greedy_bidder", "random_valid"):
        state = store.start(task=task, policy=policy, seed=11)
        env = play_market(task, 11, make_policy(policy))
        assert state["done"] and state["you"] is None
        assert state["steps"] == from_one(env.transcript) and state["outcomes"] == [env.outcome(i) for i in range(env.labs)]
        assert state["ledger"]["money"] == pytest.approx(state["ledger"]["money_start"])
        md = rounds_markdown(state)
        assert "Outcome (every lab)" in md and f"Round 1 of {TASKS[task].rounds}" in md
        for shock in state["shocks"]:
            assert shock["kind"].replace("_", " ") in md
        for p in state["pitches"]:  # every judged pitch is shown with the judge's reasons
            assert p["reasons"][0] in md


def test_counterparts_can_be_one_chosen_archetype():
    store = MarketSessions()
    state = store.start(task="market_round", policy="expert", seed=4, counterparts="selfish")
    assert [lab["archetype"] for lab in state["labs_info"][1:]] == ["selfish"] * 3
    assert state["steps"] == from_one(play_market("market_round", 4, make_policy("expert"),
                                                  counterparts="selfish").transcript)


def test_a_person_never_sees_another_labs_private_facts():
    for task in TASKS:
        for seed in range(4):
            state, seen = expert_person(MarketSessions(), task, seed)
            labs = state["labs_info"]  # revealed at the end
            for s in seen[:-1]:
                text = json.dumps(s)
                assert "labs_info" not in s and "outcomes" not in s and "steps" not in s
                for lab in labs[1:]:
                    for job in lab["jobs"]:
                        assert f'"{job["id"]}"' not in text, (task, seed, job["id"])
                    assert lab["archetype"] not in text
                for ev in s["events"]:  # pitches by others carry only the public reasons
                    if ev.get("kind") == "pitch" and ev["from"] != "lab0":
                        assert not any("really lacks" in r for r in ev["reasons"])


def test_sessions_are_isolated_and_bounded():
    store = MarketSessions(max_sessions=2)  # (a client's share: one game)
    a = store.start("10.0.0.1", task="market_round", policy=HUMAN, seed=1)
    b = store.start("10.0.0.2", task="market_round", policy=HUMAN, seed=2)
    with pytest.raises(GameError, match="limit"):
        store.start("10.0.0.3", task="single_trade", policy=HUMAN, seed=3)
    a2 = store.act(a["session_id"], {"action": "buy_spot", "hours": 10})
    assert store.state(b["session_id"])["your_steps"] == []
    assert a2["your_steps"][-1]["code"] == "ok" and a2["observation"]["money"] < a["observation"]["money"]
    store.end(a["session_id"])
    with pytest.raises(GameError, match="unknown session"):
        store.state(a["session_id"])


@pytest.mark.parametrize("action, match", [
    ("", "one JSON object"), ("hello", "no_json"), ('{"action": "fly"}', "unknown_action"),
    ('{"action": "buy_spot", "hours": -3}', "bad_value"), ("{" + "x" * 5000, "too long"), (42, "one JSON object"),
])
def test_unreadable_person_actions_are_refused_without_a_penalty(action, match):
    store = MarketSessions()
    state = store.start(task="single_trade", policy=HUMAN, seed=0)
    with pytest.raises(GameError, match=match):
        store.act(state["session_id"], action)
    after = store.state(state["session_id"])
    assert after["your_steps"] == [] and after["observation"]["money"] == state["observation"]["money"]


def test_a_person_sees_the_moves_open_to_them_and_a_copied_move_is_played():
    """The person's page lists the moves the model lab reads (the same lines), and one written as JSON is played."""
    store = MarketSessions()
    state = store.start(task="market_round", policy=HUMAN, seed=3)
    moves = state["observation"]["moves"]
    assert re.findall(r"^- `(.+)`$", person_markdown(state), re.M) == [render_move(m) for m in moves]
    allocate = next(m["move"] for m in moves if m["move"]["action"] == "allocate")
    state = store.act(state["session_id"], json.dumps(allocate))
    assert state["your_steps"][-1]["code"] == "ok"
    assert allocate not in [m["move"] for m in state["observation"]["moves"]]


def test_a_well_formed_action_the_rules_refuse_is_played_and_penalised():
    store = MarketSessions()
    state = store.start(task="single_trade", policy=HUMAN, seed=0)
    state = store.act(state["session_id"], human_action({"action": "accept", "offer": "o99"}))
    assert state["your_steps"][-1]["code"] == "unknown_offer" and "unknown_offer" in rounds_markdown(state)
    state = store.act(state["session_id"], {"action": "finish"})
    assert state["done"] and state["outcome"]["terms"]["invalid"] == -2.0 and state["outcome"]["invalid"] == 1


@pytest.mark.parametrize("kwargs, match", [
    ({"task": "auction"}, "unknown task"), ({"policy": "oracle"}, "unknown policy"),
    ({"counterparts": "saint"}, "unknown counterparts"), ({"seed": -1}, "seed"), ({"seed": 1.5}, "seed"),
])
def test_bad_game_settings_are_clear_errors(kwargs, match):
    with pytest.raises(GameError, match=match):
        MarketSessions().start(**{"task": "single_trade", "policy": "expert", "seed": 0, **kwargs})


def test_market_api_functions():
    schema = app.market_schema()
    assert set(schema["reward_terms"]) == {"value", "trade", "energy", "fines", "invalid"}
    assert len(schema["schema"]["oneOf"]) == len(schema["actions"]) == 13
    row = app.market_evaluate(policy="expert", task="single_trade", episodes=30, seed=1_000_000)
    envs = [play_market("single_trade", 1_000_000 + k, make_policy("expert")) for k in range(30)]
    assert row["reward_mean"] == pytest.approx(summarize("single_trade", "expert", envs)["reward_mean"])
    with pytest.raises(Exception, match="episodes"):
        app.market_evaluate(episodes=0)
    with pytest.raises(Exception, match="agents only"):
        app.market_play(policy=HUMAN)
    state = app.market_play(task="single_trade", policy="expert", seed=3)
    assert "Outcome = value" in state["outcome"]["explanation"] and card_markdown(state).startswith("### single_trade")


def test_the_api_numbers_rounds_from_one_as_the_page_does():
    """Rounds, deadlines and block starts read the same in the API (and MCP) as on the page."""
    store = MarketSessions()
    for task in TASKS:
        env = play_market(task, 3, make_policy("expert"))
        state = store.start(task=task, policy="expert", seed=3)
        rounds = TASKS[task].rounds
        assert [s["round"] for s in state["steps"]] == [s["round"] + 1 for s in env.transcript]
        assert {s["round"] for s in state["steps"]} <= set(range(1, rounds + 1)) and state["round"] == rounds
        md = rounds_markdown(state)
        for r in {s["round"] for s in state["steps"]}:  # each API round is the page's round of that number
            assert f"Round {r} of {rounds}</b> ({sum(s['round'] == r for s in state['steps'])} actions" in md
        assert [j["deadline"] for lab in state["labs_info"] for j in lab["jobs"]] == \
            [j.deadline + 1 for lab in env.world.labs for j in lab.jobs]
        person = store.start(task=task, policy=HUMAN, seed=3)
        obs = person["observation"]
        assert obs["round"] == person["round"] == 1
        assert all(b["start"] >= 1 for b in obs["blocks"]) and all(j["deadline"] >= 1 for j in obs["jobs"])
    # a refusal that names a round names the page's round
    assert from_one({"detail": "block b3 starts in round 2"})["detail"] == "block b3 starts in round 3"
    assert from_one(from_one({"round": 0, "start_money": 5, "x": [{"deadline": 4}]}), -1) == \
        {"round": 0, "start_money": 5, "x": [{"deadline": 4}]}


def test_the_ui_streams_a_market_game_round_by_round(monkeypatch):
    from space import ui
    monkeypatch.setattr(ui, "PACE_S", 0)
    frames = list(app.ui_market_start("market_round", "expert", "world", 5, ""))
    assert len(frames) >= TASKS["market_round"].rounds
    sid, card, rounds, outcome, chart, _ = frames[-1]
    assert "game over" in card and "Outcome (every lab)" in rounds and "reward" in outcome
    final = view(app.MARKETS.get(sid))
    assert final["steps"] == from_one(play_market("market_round", 5, make_policy("expert")).transcript)
    # the per-round chart, recorded as the game played: lab 0's money at the end is its money in the final state
    assert chart["visible"] is True  # drawn once the game is over (no empty frame before)
    chart = chart["value"]
    money = chart.data[0].y
    assert len(money) == TASKS["market_round"].rounds + 1 and chart.data[0].name == "lab0"
    start = final["labs_info"][0]["start_money"]
    assert money[0] == pytest.approx(start)
    terms = final["outcomes"][0]["terms"]  # every term but the jobs' value is money paid or received
    assert money[-1] - start == pytest.approx(sum(v for k, v in terms.items() if k != "value"), abs=0.01)


def test_the_market_reads_as_sentences_with_collapsible_rounds_a_judge_panel_and_one_colour_per_task():
    import app
    from space import figures as F
    from space import market as M
    seed = M.showcase_seed()
    st = app.market_play(task="coalition_market", seed=seed)
    assert st["coalitions"] and st["pitches"], "the default seed shows a coalition and a judged pitch"
    md = M.rounds_markdown(st)
    assert md.count("<details") == md.count("</details>") >= 2 and md.count("<details open>") == 1
    assert md.rindex("<details open>") > md.rindex("<details>"), "the latest round is the open one"
    assert "The judge: every pitch" in md and f"{st['pitches'][0]['score']:.2f}" in md
    assert all(reason in md for reason in st["pitches"][0]["reasons"])
    for e in [{"type": "deal", "offer": "o1", "buyer": "lab0", "seller": "lab2", "hours": 40.0, "price": 56.0,
               "block": "b9"}, {"type": "rejected", "offer": "o3", "by": "lab1"},
              {"type": "coalition", "id": "c1", "status": "bought", "lot": "lot1", "split": {"lab0": 70.0}},
              {"type": "offer", "id": "o2", "from": "lab3", "to": "lab0", "side": "buy", "block": "b1",
               "hours": 40.0, "price": 56.0}]:
        text = M.event_sentence(e)
        assert text.endswith(".") and "{" not in text and "'" not in text, text
    bars, shocks = F.market_bars(), F.market_shocks()
    colours = {t.name: t.marker.color for t in bars.data}
    assert all(colours[t.name] == t.marker.color for t in shocks.data if t.name in colours)


def test_the_trained_lab_plays_lab_0_in_the_space_only_where_there_is_one(monkeypatch, tmp_path, tiny_dir):
    """Without a market model the page does not offer one and the API says how to name one; with one
    (here the untrained tiny model) it plays lab 0 greedily, as the evaluation's engine plays it."""
    from space import market as M
    from space import model as space_model
    from training.engine.backends import SamplingConfig, TransformersBackend
    from training.engine.models import load_model
    from training.engine.rollout import LLMAgent
    from training.games.market.rollout import play_market_episodes

    monkeypatch.delenv(space_model.MARKET_ENV_VAR, raising=False)
    monkeypatch.setattr(space_model, "MARKET_SHIPPED", tmp_path / "none")
    assert M.MODEL not in M.policy_choices() and "expert" in M.policy_choices()
    with pytest.raises(GameError, match="HAGGLE_MARKET_MODEL"):
        MarketSessions().start(task="single_trade", policy=M.MODEL, seed=3)
    monkeypatch.setenv(space_model.MARKET_ENV_VAR, str(tiny_dir))
    assert M.MODEL in M.policy_choices()
    model, tok = load_model(str(tiny_dir))
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=16)  # short replies: the untrained model rambles
    monkeypatch.setitem(space_model._loaded, str(tiny_dir), TransformersBackend(model, tok, greedy))
    st = app.market_play(task="single_trade", policy=M.MODEL, seed=3)
    assert st["done"] and st["policy"] == M.MODEL and any(s["lab"] == 1 for s in st["steps"])
    assert f"**model** (`{tiny_dir.name}`, greedy)" in card_markdown(st)  # the page names the lab in the seat
    agent = LLMAgent(TransformersBackend(model, tok, greedy), "option_a")
    engine = play_market_episodes([("single_trade", 3)], agent)[0].env
    assert st["steps"] == from_one(engine.transcript), "the page's model lab plays as the evaluation's engine"


def _game(task: str, seed: int, policy: str, reward: float) -> dict:
    """A stored market game: the expert's real game on the seed, relabelled with ``policy`` and lab 0's ``reward``."""
    from env.market.evaluation import transcript
    t = transcript(play_market(task, seed, make_policy("expert")), policy)
    t["outcomes"][0]["reward"] = reward
    return t


def test_the_market_before_after_seed_follows_its_rule_and_shows_every_lab_on_one_seed(tmp_path, monkeypatch):
    """Seeds where every model lab played are kept, model labs first, beside the scripted policies that played all of
    them (not a task's one judged game); the default seed is the largest |RL - untrained| reward change, a tie going
    to the lowest seed; a stored game renders with rounds counted from 1."""
    from space import figures as F
    from space import market as M
    from space import ui
    st = "single_trade"
    games = [_game(st, 5, "expert", 0.5), _game(st, 5, "m_base", -0.2), _game(st, 5, "m_sft", 0.1),
             _game(st, 5, "m_grpo", 0.0),  # change +0.2
             _game(st, 7, "m_base", 0.0), _game(st, 7, "m_sft", 0.0), _game(st, 7, "m_grpo", 0.6),  # +0.6
             _game(st, 7, "expert", 0.4), _game(st, 7, "idle", 0.0),  # idle: this seed only (a judged game)
             _game(st, 9, "m_grpo", -0.7), _game(st, 9, "m_base", 0.0), _game(st, 9, "m_sft", 0.0),  # -0.7: the pick
             _game(st, 9, "expert", 0.2),
             _game(st, 11, "m_grpo", 0.9), _game(st, 11, "expert", 0.9),  # not every model lab: left out
             _game("market_round", 2, "expert", 0.3)]  # no model lab on it
    monkeypatch.setattr(F, "ARTIFACTS", tmp_path)
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))
    sides = M.side_by_side("t.jsonl")
    assert list(sides) == [st] and list(sides[st]) == [5, 7, 9]
    assert all(list(g) == ["m_base", "m_sft", "m_grpo", "expert"] for g in sides[st].values())
    assert M.before_after_pair(sides[st][5]) == ("m_base", "m_grpo")
    # a task the untrained model did not play (evaluate.py --model_tasks): the SFT lab is the before
    assert M.before_after_pair({p: g for p, g in sides[st][5].items() if p != "m_base"}) == ("m_sft", "m_grpo")
    assert M.before_after_seed(sides[st]) == 9  # the largest change, a fall included
    tie = {7: sides[st][7], 9: {**sides[st][9], "m_grpo": _game(st, 9, "m_grpo", -0.6)}}
    assert M.before_after_seed(tie) == 7  # |+0.6| = |-0.6|: the lower seed
    md = M.stored_game_markdown(sides[st][5]["expert"])
    assert "**expert** in lab 0: reward **+0.500**" in md and "Round 1 of 4" in md and "Round 0" not in md
    assert M.side_by_side(None) == {} and M.side_by_side("absent.jsonl") == {}
    monkeypatch.setattr(ui, "market_before_after_file", lambda: "t.jsonl")
    summary, *cols = ui.ui_market_before_after(st, 5, slots=["m_base", "m_grpo", "expert", "other"])
    assert "| m_base | -0.200 |" in summary and "| expert | +0.500 |" in summary and "t.jsonl" in summary
    assert "**m_grpo** in lab 0" in cols[1] and "other did not play this seed" in cols[3]
    assert [seed for _label, seed in ui._seed_choices(sides[st])] == [5, 7, 9]


def test_the_trained_lab_is_charted_beside_the_scripted_rows_of_its_own_seeds(tmp_path, monkeypatch):
    """A model row joined from a shorter evaluation is drawn and tabled beside the scripted rows of those same
    seeds (the ``same_seeds`` block), never beside the 500-seed ones; an artifact without model rows says so."""
    from space import figures as F

    def row(policy, task, episodes, reward):
        return {"policy": policy, "task": task, "episodes": episodes, "reward_mean": reward, "reward_std": 0.1,
                "reward_ci95": [reward - 0.05, reward + 0.05], "job_completion_rate": 0.5, "deal_rate": 0.5,
                "coalition_bought_rate": 0.0, "pitch_score_mean": None, "invalid_rate": 0.01}
    joined = {"rows": [row("expert", "single_trade", 500, 0.7), row("idle", "single_trade", 500, 0.0),
                       {**row("lm_grpo", "single_trade", 50, 0.4), "from_artifact": "artifacts/x.json",
                        "episodes_subset": "the first 50 of these 500"}],
              "same_seeds": [{"from_artifact": "artifacts/x.json", "episodes": 50,
                              "rows": [row("expert", "single_trade", 50, 0.65), row("idle", "single_trade", 50, 0.0)]}]}
    monkeypatch.setattr(F, "ARTIFACTS", tmp_path)
    (tmp_path / "m.json").write_text(json.dumps(joined))
    same = F.market_same_seeds("m.json")
    assert [(r["policy"], r["episodes"], r["reward_mean"]) for r in same["single_trade"]] == [
        ("lm_grpo", 50, 0.4), ("expert", 50, 0.65), ("idle", 50, 0.0)]
    fig = F.market_trained_bars("m.json")
    assert list(fig.data[0].x) == ["lm_grpo", "expert", "idle"] and fig.data[0].marker.color[0] != fig.data[0].marker.color[1]
    assert [r[:3] for r in F.market_trained_table("m.json")] == [["lm_grpo", "single_trade", 50],
                                                                ["expert", "single_trade", 50], ["idle", "single_trade", 50]]
    # a second model lab on all 500 seeds is read beside the 500-seed scripted rows, the first beside its 50
    joined["rows"].append(row("lm_base", "single_trade", 500, -0.2))
    (tmp_path / "m.json").write_text(json.dumps(joined))
    assert [(r["policy"], r["episodes"]) for r in F.market_same_seeds("m.json")["single_trade"]] == [
        ("lm_grpo", 50), ("expert", 50), ("idle", 50), ("lm_base", 500), ("expert", 500), ("idle", 500)]
    assert "expert (50 seeds)" in F.market_trained_bars("m.json").data[0].x
    (tmp_path / "s.json").write_text(json.dumps({"rows": joined["rows"][:2]}))
    assert F.market_same_seeds("s.json") == {}
    assert "no model lab rows" in F.market_trained_bars("s.json").layout.annotations[0].text
