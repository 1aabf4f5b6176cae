"""The Space's own functions, called directly (the served app is tested in test_app_client.py)."""

from __future__ import annotations

import gradio as gr
import pytest

import app


def test_builds_and_lists_scenarios_and_players():
    assert isinstance(app.build(), gr.Blocks)
    rows = app.scenario_stats()
    builtin = next(r for r in rows if r[0] == "builtin")
    assert builtin[1] >= 300 and builtin[2] + builtin[3] == builtin[1]
    names = {r[1] for r in app.players_table()}
    assert {"expert", "neutral", "insulting", "model", "human"} <= names
    choices = app.product_choices("builtin")
    assert choices[0][1] == -1 and len(choices) == builtin[5] + 1


def test_ui_game_round_trip():
    *_, (sid, chat, card, outcome, controls) = app.ui_start("builtin", "human", "neutral", "option_a", -1, 4, "")
    assert sid and "Your budget (private)" in card and controls["visible"] is True and outcome == ""
    for _ in range(12):
        *_, (chat, card, outcome, controls, talk) = app.ui_send(sid, "offer", 1.0, "a dollar?")
        if outcome:
            break
    assert "reward" in outcome and controls["visible"] is False and talk == ""
    with pytest.raises(gr.Error, match="start a game first"):
        list(app.ui_send("", "offer", 1.0, ""))
    steps = list(app.ui_start("builtin", "expert", "neutral", "option_a", 0, 1, sid))
    assert len(steps) > 2 and len(steps[-1][1]) > len(steps[1][1]), "an agents' game is shown reply by reply"
    with pytest.raises(gr.Error, match="unknown session"):  # starting again ends the old game
        list(app.ui_send(sid, "offer", 1.0, ""))
    assert steps[-1][0] != sid


def test_evaluate_policy_matches_the_harness():
    """A live evaluation is the harness's summary of the same episodes."""
    from env.bargain.evaluation import summarize
    from env.bargain.play import play_metrics
    from env.bargain.players import make_player
    from env.bargain.scenarios import get_split

    row = app.evaluate_policy("split_difference", "boulware", 30, "builtin", 5, "option_a")
    test = get_split("builtin", "test")
    metrics = [play_metrics(test[i % len(test)], make_player("buyer", "split_difference"),
                            make_player("seller", "boulware"), 5 + i) for i in range(30)]
    assert {k: row[k] for k in ("reward_mean", "deal_rate", "episodes")} == \
        {k: summarize(metrics)[k] for k in ("reward_mean", "deal_rate", "episodes")}


@pytest.mark.parametrize("kwargs", [{"buyer": "nobody"}, {"seller": "nobody"}, {"episodes": 0},
                                    {"episodes": 10**6}, {"seed": -1}, {"source": "nowhere"},
                                    {"reasoning_mode": "x"}, {"buyer": "model", "episodes": 500}])
def test_evaluate_policy_bad_input(kwargs):
    with pytest.raises(gr.Error):
        app.evaluate_policy(**kwargs)


def test_sft_sample_marks_only_the_buyers_replies():
    spans = app.sft_sample("option_a")
    trained = [text for text, label in spans if label == "trained"]
    context = "".join(text for text, label in spans if label is None)
    assert trained and "<|im_start|>system" in context and "Your budget" in context
    for text in trained:
        assert text.startswith("Thought:") and "Action: [" in text, text
        assert "<|im_start|>" not in text and "Seller:" not in text


def test_before_after_and_artifact_views():
    before, after, summary = app.ui_before_after("grpo", 0)
    assert before and after and "Untrained (base)" in summary
    path, meta = app.ui_artifact("eval_results.json")
    assert path.endswith("eval_results.json") and meta["command"]
    assert app.read_artifact("transcripts/eval_results.jsonl")["records"]
    with pytest.raises(gr.Error):
        app.read_artifact("no/such/file.json")
