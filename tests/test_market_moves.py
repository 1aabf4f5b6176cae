"""The moves a market lab's view lists (``env.market.moves``): each one the environment accepts, the
expert's every action among them, nothing in them the view does not hold, and the prompt shows them."""

from __future__ import annotations

import copy
import json
import re

import pytest

from env.market import TASKS, MarketEnv
from env.market.moves import FREE, action_text, fill, legal_moves, render_move
from env.market.play import MarketMatch
from env.market.players import make_policy
from env.market.prompts import MOVES_HEAD, market_user_message

IDS = ("offer", "coalition", "block", "job", "lot", "to", "side")
NAMED = ("offer", "coalition", "block", "job", "lot", "to")  # fields that name something in the view


def ids(action: dict) -> tuple:
    """An action's name and the ids it names (numbers and words aside)."""
    ask = action.get("ask") or {}
    return (action["action"], *(action.get(k) for k in IDS), ask.get("job"), ask.get("block"))


def watched(task: str, seed: int, policy: str, check) -> MarketMatch:
    """Play an episode with ``policy`` in lab 0, calling ``check(env, obs, action)`` before each of its actions."""
    player = make_policy(policy)
    act = player.act
    match = None

    def acting(obs):
        action = act(obs)
        check(match.env, obs, action)
        return action

    player.act = acting
    match = MarketMatch(task, seed, player)
    while not match.env.done:
        match.advance()
    return match


@pytest.mark.parametrize("task", list(TASKS))
def test_every_listed_move_is_accepted_by_the_environment(task):
    """Each move the view lists, its price and words filled in, is carried out, in states reached by the
    expert and by random play. The one exception is an accept where lab 0 sells: the buyer's cash is
    private, so the trade can fail on the buyer's side (and the list cannot know)."""
    tried, refused = 0, []

    def check(env, obs, action):
        nonlocal tried
        for m in obs["moves"]:
            trial = copy.deepcopy(env)
            result = trial.step(fill(m["move"], price=1.0, text="We need these hours for a job."))
            tried += 1
            offer = env.offers.get(m["move"].get("offer", ""))
            if not result.ok and not (result.code == "no_money" and offer is not None and offer.seller == 0):
                refused.append((m["move"], result.code))

    for seed, policy in ((1, "expert"), (2, "random_valid"), (3, "naive_pitcher")):
        watched(task, seed, policy, check)
    assert tried > 30 and refused == []


@pytest.mark.parametrize("task", list(TASKS))
def test_the_experts_every_action_is_a_listed_move(task):
    """The expert (what SFT teaches) never needs a move the list leaves out: same action, same ids."""
    missing = []
    for seed in range(8):
        watched(task, seed, "expert", lambda env, obs, a: ids(a) in {ids(m["move"]) for m in obs["moves"]}
                or missing.append(a))
    assert missing == []


def test_moves_name_only_what_the_view_holds_and_none_off_turn():
    """Every id in a move appears in the view's standing state (not only in an old event); a lab not to move gets
    none."""
    for task in TASKS:
        for seed in range(4):
            match = MarketMatch(task, seed, make_policy("expert"))
            env = match.env
            for _ in match.moves():
                if env.done:
                    break
                lab = env.to_move
                obs = env.observe(lab)
                view_text = json.dumps({k: v for k, v in obs.items() if k not in ("moves", "events")})
                for m in obs["moves"]:
                    for name in (v for k, v in _items(m["move"]) if k in NAMED):
                        assert f'"{name}"' in view_text, (name, m)
                    assert all(f'"{lab}"' in view_text for lab in m["move"].get("members", []))
                assert obs["moves"] == legal_moves(obs) and obs["moves"][-1]["move"] == {"action": "wait"}
                assert all(env.observe(i)["moves"] == [] for i in range(env.labs) if i != lab)


def test_a_move_line_names_every_field_and_marks_the_free_ones():
    env = MarketEnv()
    obs = env.reset(seed=3, options={"task": "coalition_market"})
    lines = [render_move(m) for m in obs["moves"]]
    pitch = next(line for line in lines if line.startswith("pitch "))
    assert re.fullmatch(r"pitch to=lab\d text=T ask=\{job=j0\.\d block=b\d+ hours=[\d.]+ price=P\} "
                        r"\(at spot \$[\d,.]+\)", pitch)
    for m, line in zip(obs["moves"], lines):
        assert None not in _leaves(fill(m["move"], price=2.5, text="hi")), line
        free = {k for k, v in _items(m["move"]) if v is None}
        assert {k for k, mark in FREE.items() if f"{k}={mark}" in line} == free, line
    assert lines[-1] == "wait"


def _items(action: dict) -> list:
    return [kv for k, v in action.items() for kv in (_items(v) if isinstance(v, dict) else [(k, v)])]


def _leaves(action: dict) -> list:
    return [v for _, v in _items(action)]


def test_action_text_writes_whole_numbers_without_a_point():
    assert action_text({"action": "allocate", "block": "b1", "job": "j0.0", "hours": 70.0}) == \
        '{"action": "allocate", "block": "b1", "job": "j0.0", "hours": 70}'
    assert '"hours": 2.5' in action_text({"action": "buy_spot", "hours": 2.5})


def test_every_user_turn_ends_with_the_moves_open_now():
    """The first move of a turn (the whole view) and every later one (the result only) end with the
    moves as they stand after the previous action: an allocated block's move is gone."""
    env = MarketEnv()
    obs = env.reset(seed=3, options={"task": "market_round"})
    text = market_user_message(obs)
    assert text.split("\n")[-len(obs["moves"]) - 1:] == [MOVES_HEAD, *map(render_move, obs["moves"])]
    alloc = next(m for m in obs["moves"] if m["move"]["action"] == "allocate")
    step = env.step(alloc["move"])
    assert step.ok and env.to_move == 0
    later = env.observe(0)
    text = market_user_message(later, step)
    assert "Your jobs" not in text and text.endswith("\n".join(map(render_move, later["moves"])))
    assert render_move(alloc) not in text


def test_evaluation_rows_count_acting_moves_and_each_refusal_reason():
    """``acts_mean`` counts lab 0's actions that are not wait or finish; ``refused_by_code`` splits
    ``invalid_rate`` by reason (what the market lab's refusals were, before and after the moves list)."""
    from env.market.evaluation import evaluate

    rows, _ = evaluate(["market_round"], {p: (lambda p=p: make_policy(p)) for p in ("idle", "expert", "random_valid")},
                       6)
    by = {r["policy"]: r for r in rows}
    assert by["idle"]["acts_mean"] == 0 and by["idle"]["actions_mean"] > 0 and by["idle"]["refused_by_code"] == {}
    assert 0 < by["expert"]["acts_mean"] < by["expert"]["actions_mean"]
    shares = by["random_valid"]["refused_by_code"]
    assert shares and abs(sum(shares.values()) - by["random_valid"]["invalid_rate"]) < 1e-9


def test_the_grpo_curve_logs_acts_and_refusals_by_reason():
    """``MarketGame.step_stats`` (a GRPO step's curve point): acts per episode beside all actions, and each
    refusal reason's share of the step's actions."""
    from types import SimpleNamespace

    from training.games.market.adapter import MarketGame

    out = {"deals": 0, "jobs_completed": 0, "jobs": 1}
    records = [SimpleNamespace(metrics={**out, "actions": 4, "invalid": 0, "acts": 0, "refused_by_code": {}}),
               SimpleNamespace(metrics={**out, "actions": 6, "invalid": 2, "acts": 5,
                                        "refused_by_code": {"not_owner": 1, "no_money": 1}})]
    point = MarketGame.step_stats(records)
    assert point["acts_mean"] == 2.5 and point["actions_mean"] == 5 and point["invalid_rate"] == 0.2
    assert point["refused_by_code"] == {"not_owner": 0.1, "no_money": 0.1}
