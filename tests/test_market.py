"""The GPU market's invariants: conservation, determinism, projections, reward terms, individual
rationality of every counterpart, the exploit search, the judge and the action language."""

from __future__ import annotations

import json
import math
import statistics

import jsonschema
import pytest
from hypothesis import given, settings, strategies as st

from env.market import ACTION_SCHEMA, TASKS, Invalid, MarketEnv, make_world, parse_action, play_market
from env.market import rules
from env.market.actions import EXAMPLES
from env.market.judge import LLMJudge, PitchFacts, RubricJudge, read_verdict, stated_numbers
from env.market.play import MarketMatch
from env.market.players import (BASELINES, EPS, EXPLOITS, STUFFING, Expert, MarketPlayer, RandomValid, View,
                                make_policy)

TASK_NAMES = list(TASKS)


def play_checked(task: str, seed: int, policy: MarketPlayer, on_step=None, before_step=None) -> MarketEnv:
    """Play an episode like ``play_market``, calling ``before_step(env, lab, action)`` and
    ``on_step(env, lab, action, result)`` around every step."""
    match = MarketMatch(task, seed, policy)
    env, players = match.env, match.players
    while not env.done:
        lab = env.to_move
        action = players[lab].act(env.observe(lab))
        if before_step:
            before_step(env, lab, action)
        result = env.step(action)
        if on_step:
            on_step(env, lab, action, result)
    return env


# ---------------------------------------------------------------------- invariants
@pytest.mark.slow
@pytest.mark.parametrize("task", TASK_NAMES)
def test_money_and_gpu_hours_are_conserved_at_every_step_over_1000_episodes(task):
    def check(env, lab, action, result):
        led = env.ledger()
        assert abs(led["money"] - led["money_start"]) < 1e-6, (task, led)
        assert abs(led["hours"] - led["hours_start"]) < 1e-6, (task, led)
        assert all(lab.money >= -1e-6 for lab in env.world.labs)
        assert all(b.hours >= -1e-9 for b in env.world.blocks.values())

    policies = ["expert", "random_valid", "hoarder", "greedy_bidder", "commit_leaver"]
    for seed in range(1000):
        play_checked(task, seed, make_policy(policies[seed % len(policies)]), check)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_same_seed_same_episode_and_seeds_differ(task):
    a = play_market(task, 11, make_policy("random_valid")).transcript
    b = play_market(task, 11, make_policy("random_valid")).transcript
    assert json.dumps(a, default=str) == json.dumps(b, default=str)
    worlds = {json.dumps([(lab.money, [(j.hours, j.value) for j in lab.jobs]) for lab in make_world(task, s).labs])
              for s in range(20)}
    assert len(worlds) == 20


@pytest.mark.parametrize("task", TASK_NAMES)
def test_reward_terms_add_up_to_the_outcome_and_the_dense_rewards(task):
    for seed in range(60):
        dense = [0.0] * TASKS[task].labs

        def add(env, lab, action, result):
            for i, r in result.rewards.items():
                dense[i] += r

        env = play_checked(task, seed, make_policy(["expert", "random_valid", "commit_leaver"][seed % 3]), add)
        for i in range(env.labs):
            out = env.outcome(i)
            t = out["terms"]
            assert set(t) == set(rules.REWARD_TERMS)
            assert math.isclose(sum(t.values()), out["outcome"], abs_tol=1e-6)
            assert math.isclose(out["reward"], out["outcome"] / out["scale"], abs_tol=1e-9)
            assert math.isclose(dense[i], out["reward"], abs_tol=1e-6), "dense rewards must sum to the total"
            # the money terms are exactly the change in money; value and penalties are not money
            assert math.isclose(t["trade"] + t["energy"] + t["fines"], out["money_change"], abs_tol=1e-6)
            assert t["value"] == sum(j.value for j in env.world.labs[i].jobs if j.status == "completed")
            assert t["invalid"] == -rules.INVALID_PENALTY * out["invalid"]


@pytest.mark.parametrize("task", TASK_NAMES)
def test_doing_nothing_earns_exactly_zero_in_every_term(task):
    for seed in range(100):
        env = play_market(task, seed, make_policy("idle"))
        assert env.outcome(0)["terms"] == dict.fromkeys(rules.REWARD_TERMS, 0.0)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_no_lab_ever_sees_another_labs_money_jobs_archetype_or_true_need(task):
    for seed in range(40):
        def check(env, lab, action, result):
            for viewer in range(env.labs):
                obs = env.observe(viewer)
                text = json.dumps(obs)
                for other in env.world.labs:
                    if other.id == viewer:
                        continue
                    for job in other.jobs:
                        assert f'"{job.id}"' not in text, "another lab's job leaked"
                assert set(obs["labs"][0]) == {"name", "reputation"}
                assert "archetype" not in text and "expert" not in text.replace('"you"', "")
                for ev in obs["events"]:
                    if ev.get("kind") == "pitch" and ev["to"] == obs["you"]:
                        assert not any("really lacks" in r for r in ev["reasons"]), "a pitcher's real need leaked"

        play_checked(task, seed, make_policy(["naive_pitcher", "keyword_stuffer", "expert"][seed % 3]), check)


# ---------------------------------------------------------------------- rationality and exploits
def trade_gain_now(env: MarketEnv, lab: int, action: dict) -> float | None:
    """What accepting the offer (or committing to the coalition) in ``action`` does to ``lab``'s
    utility, from the environment's true state (not the lab's view)."""
    w, me = env.world, env.world.labs[lab]
    held = rules.holdings(w.blocks.values(), lab)
    if action["action"] == "accept":
        o = env.offers.get(action["offer"])
        if o is None or o.status != "open" or o.to != lab:
            return None
        b = w.blocks[o.block]
        sign = 1 if o.buyer == lab else -1
        return rules.trade_gain(me.jobs, held, env.round, w.energy_price, b.start, b.energy, sign * o.hours,
                                -sign * o.price, me.money)
    c = env.coalitions.get(action["coalition"])
    if c is None or c.status != "forming" or lab not in c.shares:
        return None
    lot = w.lots[c.lot]
    share = min(c.shares[lab], lot.hours - sum(c.shares[m] for m in c.escrow))
    return rules.trade_gain(me.jobs, held, env.round, w.energy_price, lot.start, lot.energy, share,
                            -round(share * lot.price / lot.hours, 2), me.money)


@pytest.mark.slow
@pytest.mark.parametrize("task", TASK_NAMES)
def test_counterparts_never_accept_a_trade_or_commitment_that_lowers_their_utility(task):
    """Every accept and commit of a scripted lab, whatever it faces, raises its true utility."""
    checked = {"accept": 0, "commit": 0}

    def check(env, lab, action):
        if lab != 0 and action["action"] in checked:
            gain = trade_gain_now(env, lab, action)
            if gain is not None:
                checked[action["action"]] += 1
                assert gain > 0, f"{env.world.labs[lab].archetype} loses {gain:.2f} on {action}"

    for seed in range(150):
        for name in ["always_accept", "random_valid", "free_rider", "spammer", "keyword_stuffer", "expert"]:
            play_checked(task, seed, make_policy(name), before_step=check)
    assert checked["accept"] > 50, checked
    if task == "coalition_market":
        assert checked["commit"] > 20, checked


def paired(task: str, a: str, b: str, seeds: range) -> tuple[float, float]:
    """Mean and 95% half-width of reward(a) - reward(b) over the same seeds."""
    diffs = [play_market(task, s, make_policy(a)).outcome(0)["reward"]
             - play_market(task, s, make_policy(b)).outcome(0)["reward"] for s in seeds]
    return statistics.mean(diffs), 1.96 * statistics.stdev(diffs) / math.sqrt(len(diffs))


@pytest.mark.slow
@pytest.mark.parametrize("task", TASK_NAMES)
def test_the_expert_beats_every_baseline_on_every_task(task):
    for name in BASELINES:
        mean, half = paired(task, "expert", name, range(5000, 5200))
        assert mean - half > 0, f"expert vs {name} on {task}: {mean:+.3f} +- {half:.3f}"


class Parametric(MarketPlayer):
    """A family of simple traders for the exploit search: bid ``bid`` x spot for every block it
    does not own, ask ``ask`` x spot for its own, accept every offer or none, optionally stuffed
    pitches instead of offers."""

    def __init__(self, bid: float, ask: float, accept_all: bool, pitch: bool):
        self.bid, self.ask, self.accept_all, self.pitch = bid, ask, accept_all, pitch
        self.name = f"bid{bid}_ask{ask}_{'acc' if accept_all else 'rej'}_{'pitch' if pitch else 'offer'}"

    def act(self, obs):
        me = obs["you"]
        for o in obs["offers"]:
            if o["to"] == me:
                return {"action": "accept" if self.accept_all else "reject", "offer": o["id"]}
        asked = {o["block"] for o in obs["offers"] if o["from"] == me}
        spot = obs["market"]["spot_price"]
        for b in obs["blocks"]:
            if b["id"] in asked:
                continue
            if b["owner"] != me and self.pitch and obs["jobs"]:
                return {"action": "pitch", "to": b["owner"], "text": STUFFING,
                        "ask": {"job": obs["jobs"][0]["id"], "block": b["id"], "hours": b["hours"],
                                "price": round(b["hours"] * spot * self.bid, 2)}}
            if b["owner"] != me:
                return {"action": "offer", "to": b["owner"], "side": "buy", "block": b["id"], "hours": b["hours"],
                        "price": round(b["hours"] * spot * self.bid, 2)}
            if self.ask and obs["labs"]:
                return {"action": "offer", "to": obs["labs"][0]["name"], "side": "sell", "block": b["id"],
                        "hours": b["hours"], "price": round(b["hours"] * spot * self.ask, 2)}
        return View(obs).allocation() or {"action": "wait"}


class SpotEarly(Expert):
    """The expert, but buying on the spot market before anything else in the first ``rounds`` rounds: what all
    its jobs lack together, or (``all_in``) all the stock it can pay for."""

    def __init__(self, rounds: int, all_in: bool):
        self.rounds, self.all_in = rounds, all_in
        self.name = f"spot_first_{rounds}_rounds_{'all_in' if all_in else 'lack'}"

    def act(self, obs):
        v, stock = View(obs), obs["market"]["spot_hours"]
        if v.round < self.rounds and not v.incoming() and stock > EPS:
            hours = round(min(stock, v.money / v.spot * 0.99 if self.all_in else sum(x for _, x in v.lacking())), 2)
            if hours > EPS and (self.all_in or v.gain({"start": v.round, "energy": 1.0}, hours, -hours * v.spot) > 0):
                return {"action": "buy_spot", "hours": hours}
        return super().act(obs)


class SpotLast(Expert):
    """The expert as it was before it bought spot in round 0: the spot market only as the fallback, from
    round 1 (a legal strategy that beat the expert of that time by +0.016 on coalition_market)."""

    name = "expert_spot_from_round_1"
    spot = staticmethod(lambda v: None)


@pytest.mark.slow
@pytest.mark.parametrize("task", TASK_NAMES)
def test_exploit_search_finds_nothing_that_beats_the_expert(task):
    """Every exploit policy, and a grid of parametric traders, against the rule expert on the same
    held-out seeds: none is better by more than the confidence interval."""
    seeds = range(7000, 7150)
    expert = [play_market(task, s, make_policy("expert")).outcome(0)["reward"] for s in seeds]
    candidates = [make_policy(n) for n in EXPLOITS]
    candidates += [Parametric(bid, ask, acc, pitch) for bid in (0.0, 0.3, 1.0) for ask in (0.0, 2.0)
                   for acc in (True, False) for pitch in (False, True) if not (pitch and bid == 1.0)]
    # the round-0 spot purchase (and buying spot first every round, or all the stock one can pay for)
    candidates += [SpotEarly(rounds, all_in) for rounds in (1, 99) for all_in in (False, True)] + [SpotLast()]
    for policy in candidates:
        rewards = [play_market(task, s, policy).outcome(0)["reward"] for s in seeds]
        diffs = [r - e for r, e in zip(rewards, expert)]
        mean, half = statistics.mean(diffs), 1.96 * statistics.stdev(diffs) / math.sqrt(len(diffs))
        assert mean <= half, f"{policy.name} beats the expert on {task}: {mean:+.3f} +- {half:.3f}"


def test_free_capacity_is_never_given_away():
    """The public peer's exploit: asking for blocks and paying nothing gets nothing."""
    for task in TASK_NAMES:
        for seed in range(200):
            env = play_market(task, seed, make_policy("free_rider"))
            assert env.counts[0]["deals"] == 0
            assert not any(t["lab"] != 0 and t["action"] == {"action": "accept", "offer": t["action"].get("offer")}
                           and t["code"] == "ok" and env.offers[t["action"]["offer"]].price == 0
                           for t in env.transcript if isinstance(t["action"], dict))


def test_breaking_a_commitment_costs_a_fine_and_reputation():
    env = MarketEnv()
    for seed in range(300):
        env.reset(seed, {"task": "coalition_market"})
        lot = next(iter(env.world.lots.values()))
        rich = max(range(1, env.labs), key=lambda i: env.world.labs[i].money)
        # lab 0 proposes, lab ``rich`` joins; both commit; lab 0 leaves (in its own turns)
        if env.to_move != 0 or lot.price / 4 > env.world.labs[0].money:
            continue
        env.step({"action": "propose_coalition", "lot": lot.id, "members": ["lab0", f"lab{rich}"],
                  "hours": round(lot.hours / 4, 2)})
        cid = next(iter(env.coalitions))
        env.step({"action": "wait"})
        while env.to_move != rich:
            env.step({"action": "wait"})
        env.step({"action": "join", "coalition": cid, "hours": round(lot.hours / 4, 2)})
        env.step({"action": "commit", "coalition": cid})
        while env.to_move != 0:
            env.step({"action": "wait"})
        env.step({"action": "commit", "coalition": cid})
        money = env.world.labs[rich].money
        r = env.step({"action": "leave", "coalition": cid})
        assert r.ok and env.coalitions[cid].status == "dissolved"
        fine = env.terms[0]["fines"]
        assert fine < 0 and math.isclose(env.terms[rich]["fines"], -fine)
        assert env.world.labs[0].reputation < 1.0
        assert env.world.labs[rich].money > money  # the partner got its escrow back and the fine
        return
    pytest.fail("no seed allowed the scenario")


# ---------------------------------------------------------------------- the judge
FACTS = PitchFacts(job_open=True, shortfall=40.0, deadline=3, round=1, spot_price=2.0)
ASK = {"job": "j0.0", "block": "b2", "hours": 40.0, "price": 80.0}


def test_judge_scores_the_ask_against_the_real_need():
    judge = RubricJudge()
    honest = judge.judge("We need 40 GPU-hours for our job.", ASK, FACTS)
    greedy = judge.judge("We need 40 GPU-hours for our job.", {**ASK, "hours": 120.0, "price": 240.0}, FACTS)
    lowball = judge.judge("", {**ASK, "price": 8.0}, FACTS)
    fake = judge.judge("", ASK, PitchFacts(False, 0.0, 1, 1, 2.0))
    assert honest.score > greedy.score and honest.score > lowball.score and fake.score == 0
    assert any("really lacks 40" in r for r in honest.reasons)
    assert not any("40" in r for r in honest.public)


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.sampled_from(STUFFING.split() + ["please", "we", "the", "model", "team", "!", "research"]),
                      max_size=60))
def test_keyword_stuffing_never_raises_the_score(words):
    judge = RubricJudge()
    plain = judge.judge("Our job needs 40 GPU-hours.", ASK, FACTS)
    stuffed = judge.judge("Our job needs 40 GPU-hours. " + " ".join(words), ASK, FACTS)
    assert stuffed.score == plain.score


def test_false_claims_in_the_text_cost():
    judge = RubricJudge()
    assert judge.judge("We need 900 GPU-hours and will pay $5000.", ASK, FACTS).score < judge.judge("", ASK, FACTS).score


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_judge_text_readers_never_raise(text):
    hours, dollars = stated_numbers(text)
    assert all(h >= 0 for h in hours) and all(d >= 0 for d in dollars)
    verdict = read_verdict(text)
    assert verdict is None or 0 <= verdict[0] <= 1
    assert 0 <= RubricJudge().judge(text, ASK, FACTS).score <= 1


def test_an_llm_judge_plugs_in_and_falls_back_to_the_rubric():
    prompts = []
    def answer(prompt):  # a judge model that follows the prompt: the verdict carries the call's nonce
        prompts.append(prompt)
        nonce = prompt.split('{"nonce": "', 1)[1].split('"', 1)[0]
        return json.dumps({"nonce": nonce, "score": 0.8, "reason": "the ask matches the need"})

    good = LLMJudge(answer)
    assert good.judge("hi", ASK, FACTS).score == 0.8 and "40" in prompts[0]
    bad = LLMJudge(lambda p: "I cannot decide")
    v = bad.judge("hi", ASK, FACTS)
    assert v.score == RubricJudge().judge("hi", ASK, FACTS).score and "rubric" in v.reasons[0]
    env, pitched = MarketEnv(judge=good), []
    for seed in range(10):
        play_market("market_round", seed, make_policy("naive_pitcher"), env=env)
        pitched += [o for o in env.offers.values() if o.text]
    assert pitched and all(o.verdict.score == 0.8 for o in pitched)


@pytest.mark.parametrize("text,expected", [
    ('{"score": 0.7, "reason": "fits"}', 0.7),  # the structured verdict
    ('```json\n{"score": 1.5, "reason": "x"}\n```', 1.0),  # in a code fence; clipped to 1
    ('{"score": -3, "reason": "x"}', 0.0),  # clipped to 0
    ('{"score": ' + "9" * 400 + ', "reason": "x"}', 1.0),  # a huge integer is clipped, never overflows
    ("score: 0.7", None),  # prose is no verdict
    ('The pitch says "score: 1.0". {"score": 0.1, "reason": "x"}', None),  # anything around the object
    ('{"score": 0.5}', None),  # no reason
    ('{"score": 0.5, "reason": "x", "bonus": 1}', None),  # extra keys
    ('{"score": "1.0", "reason": "x"}', None),  # a string is not a score
    ('{"score": true, "reason": "x"}', None),  # nor a bool
    ('{"score": NaN, "reason": "x"}', None),  # nor NaN
    ("no number here", None),  # nothing readable
])
def test_read_verdict_table(text, expected):
    verdict = read_verdict(text)
    assert (verdict[0] if verdict else None) == expected


# ---------------------------------------------------------------------- the action language
VALID = [
    {"action": "offer", "to": "lab1", "side": "buy", "block": "b2", "hours": 40, "price": 70.5},
    {"action": "counter", "offer": "o3", "price": 90},
    {"action": "counter", "offer": "o3", "price": 90, "hours": 20},
    {"action": "accept", "offer": "o1"},
    {"action": "reject", "offer": "o1"},
    {"action": "pitch", "to": "lab2", "text": "we need it", "ask": {"job": "j0.0", "block": "b1", "hours": 10,
                                                                    "price": 20}},
    {"action": "buy_spot", "hours": 15},
    {"action": "propose_coalition", "lot": "lot1", "members": ["lab0", "lab3"], "hours": 100},
    {"action": "join", "coalition": "c1", "hours": 50},
    {"action": "commit", "coalition": "c1"},
    {"action": "leave", "coalition": "c1"},
    {"action": "allocate", "block": "b1", "job": "j0.0", "hours": 30},
    {"action": "wait"},
    {"action": "finish"},
]
VALID += list(EXAMPLES.values())  # the documented examples (model prompts, the Space) are valid actions too


@pytest.mark.parametrize("action", VALID, ids=lambda a: a["action"])
def test_every_action_kind_parses_and_matches_the_json_schema(action):
    jsonschema.validate(action, ACTION_SCHEMA)
    text = f"Thinking about it...\n```json\n{json.dumps(action)}\n```\nThat is my move."
    assert parse_action(text) == action


@pytest.mark.parametrize("text,code", [
    ("", "no_json"),  # nothing at all
    ("I wait.", "no_json"),  # prose only
    ("{not json}", "bad_json"),  # broken JSON
    ('["wait"]', "no_json"),  # not an object
    ('{"action": "dance"}', "unknown_action"),  # no such action
    ('{"action": "offer", "to": "lab1"}', "missing_field"),  # fields missing
    ('{"action": "wait", "why": 1}', "unknown_field"),  # extra field
    ('{"action": "buy_spot", "hours": -5}', "bad_value"),  # negative hours
    ('{"action": "buy_spot", "hours": "ten"}', "bad_value"),  # wrong type
    ('{"action": "buy_spot", "hours": true}', "bad_value"),  # a bool is not a number
    ('{"action": "buy_spot", "hours": NaN}', "bad_value"),  # not finite
    ("{" * 5000, "too_long"),  # oversized
])
def test_bad_actions_get_a_reason_code(text, code):
    result = parse_action(text)
    assert isinstance(result, Invalid) and result.code == code


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=200), st.recursive(
    st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True), st.integers(), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(
        st.sampled_from(["action", "to", "side", "block", "hours", "price", "offer", "job", "ask", "text",
                         "members", "lot", "coalition", "x"]), inner, max_size=6)), max_leaves=12).map(json.dumps)))
def test_the_action_reader_never_raises_and_agrees_with_the_schema(text):
    result = parse_action(text)
    assert isinstance(result, (dict, Invalid))
    if isinstance(result, dict):
        jsonschema.validate(result, ACTION_SCHEMA)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=80), st.sampled_from([json.dumps(a) for a in VALID])), max_size=40),
       st.integers(0, 10_000), st.sampled_from(TASK_NAMES))
def test_any_reply_sequence_is_survived_and_refusals_are_penalised(replies, seed, task):
    env = MarketEnv()
    env.reset(seed, {"task": task})
    for text in replies:
        if env.done:
            break
        lab = env.to_move
        before = env.terms[lab]["invalid"]
        result = env.step(text)
        assert result.ok or env.terms[lab]["invalid"] == before - rules.INVALID_PENALTY
        led = env.ledger()
        assert abs(led["money"] - led["money_start"]) < 1e-6 and abs(led["hours"] - led["hours_start"]) < 1e-6


def test_shocks_follow_the_seed_and_hit_the_market():
    seen = set()
    for seed in range(200):
        env = play_market("coalition_market", seed, make_policy("expert"))
        assert len(env.shocks_hit) == TASKS["coalition_market"].shocks
        seen |= {s["kind"] for s in env.shocks_hit}
        for s in env.shocks_hit:
            if s["kind"] == "energy_spike":
                assert env.world.energy_price > 0.3
    assert seen == {"capacity_failure", "energy_spike", "demand_surge"}


def test_random_valid_is_seeded_by_the_episode():
    p, q = RandomValid(), RandomValid()
    a = play_market("market_round", 5, p).transcript
    b = play_market("market_round", 5, q).transcript
    assert a == b
    assert a != play_market("market_round", 6, RandomValid()).transcript


# ---------------------------------------------------------------------- evaluation and artifacts
@pytest.mark.slow
def test_market_evaluation_cli_writes_the_contract(tmp_path):
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    root = Path(__file__).resolve().parent.parent
    out, tr = tmp_path / "m.json", tmp_path / "t.jsonl"
    proc = subprocess.run([sys.executable, "training/evaluate.py", "--env", "market", "--episodes", "6",
                           "--policies", "expert,naive_pitcher", "--out", str(out), "--transcripts", str(tr),
                           "--no_progress"], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    art = json.loads(out.read_text())
    assert {"command", "config", "seeds", "commit", "date", "machine", "wall_time_s"} <= set(art["provenance"])
    assert len(art["rows"]) == 2 * len(TASKS)
    for r in art["rows"]:
        assert {"policy", "task", "split", "episodes", "reward_mean", "reward_std", "reward_ci95", "deal_rate",
                "job_completion_rate", "coalition_bought_rate", "under_shocks", "terms_mean"} <= set(r)
        assert r["episodes"] == 6 and r["reward_ci95"][0] <= r["reward_mean"] <= r["reward_ci95"][1]
    games = [json.loads(line) for line in tr.read_text().splitlines()]
    assert games and all(g["pitches"] and g["pitches"][0]["reasons"] for g in games)
    bad = subprocess.run([sys.executable, "training/evaluate.py", "--env", "market", "--tasks", "nowhere"],
                         cwd=root, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "unknown task nowhere" in bad.stderr


def test_shipped_market_evaluation_is_held_out_and_reproducible():
    from pathlib import Path  # noqa: PLC0415

    from env.market.evaluation import MARKET_EVAL_SEED_BASE, evaluate  # noqa: PLC0415

    art = json.loads((Path(__file__).resolve().parent.parent / "artifacts" / "eval_market.json").read_text())
    cfg = art["provenance"]["config"]
    assert cfg["seed_base"] >= MARKET_EVAL_SEED_BASE, "evaluated on training-range seeds"
    rows = {(r["policy"], r["task"]): r for r in art["rows"]}
    for task in TASKS:
        expert = rows[("expert", task)]["reward_mean"]
        assert all(rows[(b, task)]["reward_mean"] < expert for b in BASELINES)
    # the first cells again, from the recorded config: the same numbers
    again, _ = evaluate(["single_trade"], {"expert": lambda: make_policy("expert")}, cfg["episodes"], cfg["seed_base"])
    assert json.loads(json.dumps(again[0])) == rows[("expert", "single_trade")]
