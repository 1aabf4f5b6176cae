"""The oracle buyer (told the scripted seller's private floor) is a true ceiling: no scripted buyer
beats it in any single game, it never overshoots, and evaluations label it an upper bound."""

from __future__ import annotations

import json

import pytest

from env.bargain.env import BargainEnv
from env.bargain.evaluation import episode_seed
from env.bargain.play import play_episode
from env.bargain.players import BUYERS, SELLERS, make_player
from env.bargain.players.oracle import ORACLE, OracleBuyer
from env.bargain.sources import get_split, make_scenario
from training import evaluate


def _game(scenario, buyer, seller_name, seed):
    seller = make_player("seller", seller_name)
    if isinstance(buyer, OracleBuyer):
        buyer.watch(seller)
    env = BargainEnv(6)
    play_episode(scenario, buyer, seller, seed, 6, env)
    return env.metrics()


@pytest.mark.parametrize("seller", list(SELLERS))
def test_no_scripted_buyer_beats_the_oracle_in_any_game(seller):
    products = get_split("builtin", "test")[:12]
    for i, sc in enumerate(products):
        for k in range(2):
            seed = episode_seed(i, k, 2)
            top = _game(sc, OracleBuyer(), seller, seed)
            assert not top.overshoot and top.format_errors == 0 and top.invalid_moves == 0
            if top.deal:
                assert sc.cost <= top.price <= sc.budget
            for name in BUYERS:
                other = _game(sc, make_player("buyer", name), seller, seed)
                assert other.reward <= top.reward + 1e-9, (sc.title, seller, seed, name, other.reward, top.reward)


def test_the_oracle_walks_away_when_the_floor_is_above_the_budget_and_needs_a_scripted_seller():
    sc = make_scenario(title="Lamp", category="home", description="A lamp.", list_price=100.0, cost=95.0,
                       budget=80.0, source="t")
    m = _game(sc, OracleBuyer(), "neutral", 0)
    assert m.end_reason == "buyer_quit" and m.reward == 0.0
    with pytest.raises(ValueError, match="floor"):
        OracleBuyer().watch(make_player("buyer", "expert"))
    assert ORACLE not in BUYERS, "an upper bound, never offered as a baseline or an opponent"


def test_evaluation_rows_label_the_oracle_as_an_upper_bound(tmp_path, capsys):
    out = tmp_path / "e.json"
    evaluate.main(["--scenarios", "builtin", "--buyers", "expert,random_valid", "--limit", "4", "--out", str(out),
                   "--transcripts", "", "--progress", "false"])
    rows = json.loads(out.read_text())["rows"]
    oracle = [r for r in rows if r["buyer"] == ORACLE]
    assert len(oracle) == len(SELLERS) + 1 and all(r["upper_bound"] is True for r in oracle)
    assert not any(r.get("upper_bound") for r in rows if r["buyer"] != ORACLE)
    mix = {r["buyer"]: r["reward_mean"] for r in rows if r["seller"] == "mix"}
    assert mix[ORACLE] >= max(mix["expert"], mix["random_valid"])
    shown = capsys.readouterr().out
    assert "best buyer against the seller mix: expert" in shown and "ceiling (the oracle" in shown
    evaluate.main(["--scenarios", "builtin", "--buyers", "expert", "--limit", "2", "--out", str(out),
                   "--transcripts", "", "--progress", "false", "--oracle", "false"])
    assert not any(r["buyer"] == ORACLE for r in json.loads(out.read_text())["rows"])
