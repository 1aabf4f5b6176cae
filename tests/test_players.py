"""Scripted players: registry, protocol text, variety, and the expert's edge."""

from __future__ import annotations

import statistics

import pytest

from env.bargain.evaluation import play_cell
from env.bargain.play import play_episode
from env.bargain.players import BASELINES, BUYERS, PERSONAS, SELLERS, make_player
from env.bargain.protocol import parse_reply
from env.bargain.sources import get_split


def test_registry_sizes_and_errors():
    assert "expert" in BUYERS and len(BASELINES) >= 5
    assert "neutral" in SELLERS and len(PERSONAS) >= 5
    assert {"begging", "insulting", "unyielding"} <= set(PERSONAS)
    with pytest.raises(ValueError, match="unknown seller"):
        make_player("seller", "nobody")
    with pytest.raises(ValueError, match="role"):
        make_player("judge", "expert")
    with pytest.raises(ValueError, match="reasoning_mode"):
        make_player("buyer", "expert", "option_c")


@pytest.mark.parametrize("mode,private_marker", [("option_a", "Thought:"), ("option_b", "<think>")])
def test_players_write_protocol_text(mode, private_marker):
    scenario = get_split("builtin", "test")[0]
    env = play_episode(scenario, make_player("buyer", "expert", mode), make_player("seller", "neutral", mode), 1)
    assert env.log and all(t["error"] is None for t in env.log)
    buyer = make_player("buyer", "expert", mode)
    obs = env.reset(2, {"scenario": scenario})
    import random
    buyer.reset(obs, random.Random(0))
    text = buyer.act(obs)
    assert text.startswith(private_marker) and parse_reply(text).ok


def test_seller_talk_is_varied_and_seeded():
    scenarios = get_split("builtin", "test")
    for name in SELLERS:
        talks = set()
        for seed in range(20):
            env = play_episode(scenarios[seed % len(scenarios)], make_player("buyer", "expert"),
                               make_player("seller", name), seed)
            talks.update(t["talk"] for t in env.log if t["role"] == "seller")
        assert len(talks) >= 5, name


def test_expert_beats_every_baseline_against_the_mix():
    scenarios = get_split("builtin", "train")[:60]  # tuning never looks at the test split
    means = {}
    for b in BUYERS:
        rewards = []
        for s in SELLERS:
            metrics, _ = play_cell(scenarios, lambda: make_player("buyer", b), lambda: make_player("seller", s), 2)
            rewards += [m.reward for m in metrics]
        means[b] = statistics.mean(rewards)
    assert max(means, key=means.get) == "expert", means


def test_adversarial_personas_behave_as_named():
    scenarios = get_split("builtin", "train")[:80]
    walked = 0
    for i, sc in enumerate(scenarios):
        env = play_episode(sc, make_player("buyer", "lowballer"), make_player("seller", "insulting"), i)
        walked += env.metrics().end_reason == "seller_quit"
    assert walked > 40, "the insulting seller walks away from repeated lowballs"
    deals = {}
    for name in ("unyielding", "conceder"):
        metrics, _ = play_cell(scenarios, lambda: make_player("buyer", "expert"), lambda: make_player("seller", name), 1)
        deals[name] = sum(m.deal for m in metrics)
    assert deals["unyielding"] < deals["conceder"]


def test_compare_digits_agrees_with_the_numbers_on_random_prices():
    """The expert's digit-by-digit comparison is what SFT teaches the buyer before it accepts: its
    verdict must be the true order of the two prices, for any prices (fuzzed over six orders of
    magnitude, near-equal pairs included, where a one-step comparison fails most)."""
    import random
    import re

    from env.bargain.players.buyers import compare_digits

    rng = random.Random(0)
    for _ in range(5000):
        b = round(10 ** rng.uniform(-1, 5), 2)
        a = round(max(0.01, b * rng.choice([rng.uniform(0.5, 1.5), 1 + rng.uniform(-0.02, 0.02), 1.0])), 2)
        text = compare_digits(a, b)
        if text == "equal":
            assert round(a * 100) == round(b * 100)
            continue
        digits = re.fullmatch(r"(\d+) digits vs (\d+)", text)
        if digits:
            assert len(str(int(a))) == int(digits[1]) != int(digits[2]) == len(str(int(b)))
            assert (int(digits[1]) > int(digits[2])) == (a > b)
            continue
        steps = text.split(", ")
        assert all(re.fullmatch(r"\d=\d", s) and s[0] == s[2] for s in steps[:-1]), text
        last = re.fullmatch(r"(\d)([<>])(\d)", steps[-1])
        assert last and (last[2] == ">") == (a > b) and last[1] != last[3], (a, b, text)


def test_expert_thought_shows_the_comparison_before_it_accepts():
    """Every expert reply to an ask names the digit comparison and a verdict that matches the
    budget; the expert never accepts an ask its Thought calls over budget."""
    import re

    scenario = get_split("builtin", "test")[3]
    seen = 0
    for seller in SELLERS:
        env = play_episode(scenario, make_player("buyer", "expert"), make_player("seller", seller), seed=5)
        for turn in env.transcript()["turns"]:
            m = turn["role"] == "buyer" and re.match(
                r"Ask \$([\d,.]+) vs budget \$([\d,.]+): ([^:]+): (over|within) budget", turn["thought"] or "")
            if not m:
                continue
            seen += 1
            ask = float(m[1].replace(",", ""))
            assert (m[4] == "over") == (ask > scenario.budget), turn["thought"]
            assert m[3] and ("<" in m[3] or ">" in m[3] or "digits" in m[3] or m[3] == "equal")
            if m[4] == "over":
                assert not turn["action"].startswith("[DEAL]")
    assert seen >= len(SELLERS)


def test_steady_teacher_keeps_the_invariants_and_states_true_comparisons():
    """``steady`` (``sft.py --teacher steady``) is played by name but joins no default line-up; against every seller
    it never pays over its budget, every comparison its Thoughts state is true, and in the last round it offers 85%
    of its budget rather than take an ask above that."""
    import re

    from env.bargain.players import TEACHERS
    from env.bargain.players.base import nice_price
    from env.bargain.protocol import format_price

    assert "steady" in TEACHERS and "steady" not in BUYERS and TEACHERS["expert"] is BUYERS["expert"]
    last_offers = 0
    for i, scenario in enumerate(get_split("builtin", "train")[:30]):
        for seller in SELLERS:
            env = play_episode(scenario, make_player("buyer", "steady"), make_player("seller", seller), seed=i)
            m, turns = env.metrics(), env.transcript()["turns"]
            assert not m.overshoot and m.thought_claims_true == m.thought_claims
            assert all((t["thought"] or "").startswith("No ask yet") or "budget" in t["thought"]
                       for t in turns if t["role"] == "buyer")
            buyer = [t for t in turns if t["role"] == "buyer"]
            final = buyer[-1]
            if final["turn"] < env.transcript()["max_turns"] or final["turn"] == 1:
                continue
            ask = float(re.search(r"Ask \$([\d,.]+)", final["thought"])[1].replace(",", ""))
            cap = nice_price(0.85 * scenario.budget, scenario.list_price, up=False)
            if ask > cap:
                last_offers += 1
                assert final["action"] == f"[BUY] {format_price(cap)}", final
                assert "Last round: offer 85% of budget." in final["thought"]
            else:
                assert final["action"] == f"[DEAL] {format_price(ask)}", final
    assert last_offers > 20


def test_steady_teacher_outscores_the_expert_on_train_products():
    """What it was chosen for, on products the evaluation never uses: more reward than the expert against the mix."""
    scenarios = get_split("builtin", "train")[:60]
    means = {}
    for b in ("expert", "steady"):
        rewards = []
        for s in SELLERS:
            metrics, _ = play_cell(scenarios, lambda: make_player("buyer", b), lambda: make_player("seller", s), 2)
            rewards += [m.reward for m in metrics]
        means[b] = statistics.mean(rewards)
    assert means["steady"] > means["expert"], means
