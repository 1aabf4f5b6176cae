"""Scripted players: registry, protocol text, variety, and the expert's edge."""

from __future__ import annotations

import statistics

import pytest

from env.bargain.evaluation import play_cell
from env.bargain.play import play_episode
from env.bargain.players import BASELINES, BUYERS, PERSONAS, SELLERS, make_player
from env.bargain.protocol import parse_reply
from env.bargain.scenarios import get_split


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
    obs = env.reset(scenario, 2)
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
