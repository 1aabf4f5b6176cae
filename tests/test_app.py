"""The Space's own functions, called directly (the served app is tested in test_app_client.py)."""

from __future__ import annotations

import json

import gradio as gr
import pytest

import app
from training.games.bargain.config import BargainEvalArgs


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


@pytest.mark.parametrize("seller, episodes", [("boulware", 30), ("mix", 8)])
def test_evaluate_policy_is_the_evaluation_scripts_row(seller, episodes):
    """A live evaluation is the row training/evaluate.py writes for the same products and seeds
    (the artifacts' seed rule), for one seller and for the seller mix."""
    from training import evaluate

    row = app.evaluate_policy("split_difference", seller, episodes, "builtin", 5, "option_a")
    products = -(-episodes // 4)
    art = evaluate.run(BargainEvalArgs(scenarios="builtin", buyers="split_difference",
                                           sellers="boulware" if seller == "boulware" else "all", limit=products,
                                           seed_base=5, out="", transcripts="", progress=False))
    expected = next(r for r in art["rows"] if r["seller"] == seller)
    assert {k: row[k] for k in expected} == json.loads(json.dumps(expected))
    assert row["episodes"] == products * 4 * (7 if seller == "mix" else 1)


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
    *chats, summary = app.ui_before_after(0)
    assert len(chats) == len(app.before_after_buyers()) >= 2 and all(chats)
    assert "| tiny untrained |" in summary and "ceiling: the oracle" in summary
    assert "change from tiny untrained" in summary and "the effect of RL (from tiny SFT)" in summary
    g = app.F.before_after_games()[0]
    row = next(line for line in summary.splitlines() if line.startswith("| tiny GRPO |"))
    assert f"{g['rewards']['grpo'] - g['rewards']['sft']:+.3f}" in row  # SFT -> RL, like with like
    games = app.F.before_after_games()
    k = next(i for i, g in enumerate(games) if g["interest"] == "conflicting")
    *chats, conflicting = app.ui_before_after(k)
    assert "conflicting interest: best possible reward 0" in conflicting
    *chats, last = app.ui_before_after(99)  # past the end: the last game
    assert games[-1]["title"] in last
    path, meta = app.ui_artifact("eval_results.json")
    assert path.endswith("eval_results.json") and meta["command"]
    assert app.read_artifact("transcripts/eval_results.jsonl")["records"]
    with pytest.raises(gr.Error):
        app.read_artifact("no/such/file.json")


def test_the_model_is_offered_only_in_the_roles_it_was_trained_for(tmp_path, monkeypatch):
    from space import model as seat
    from space.bargain import choices
    from training.common.provenance import trained_roles
    assert seat.model_roles() == ["buyer"], "the shipped checkpoint is a buyer"
    assert "model" in choices("buyer", seat.model_roles()) and "model" not in choices("seller", seat.model_roles())
    with pytest.raises(gr.Error, match="trained as the buyer only"):
        app.start_game(buyer="expert", seller="model")
    with pytest.raises(gr.Error, match="trained as the buyer only"):
        app.play_episode(buyer="expert", seller="model")
    assert trained_roles({"stages": [{"stage": "build"}, {"stage": "sft", "role": "seller"}]}) == ["seller"]
    assert trained_roles({"stages": [{"stage": "sft"}, {"stage": "grpo", "role": "buyer"}]}) == ["buyer"]
    folder = tmp_path / "seller-model"
    folder.mkdir()
    (folder / "lineage.json").write_text('{"base_model": "x", "stages": [{"stage": "sft", "role": "seller"}]}')
    monkeypatch.setenv(seat.ENV_VAR, str(folder))
    assert seat.model_roles() == ["seller"]
    assert "model" in choices("seller", seat.model_roles()) and "model" not in choices("buyer", seat.model_roles())


def test_a_model_game_replays_from_its_seed():
    first = app.play_episode(buyer="model", seller="conceder", product=3, seed=5)
    again = app.play_episode(buyer="model", seller="conceder", product=3, seed=5)
    assert first["transcript"] == again["transcript"] and first["outcome"] == again["outcome"]
    other = app.play_episode(buyer="model", seller="conceder", product=3, seed=6)
    assert other["transcript"]["seed"] == 6


def test_a_person_selling_is_told_at_once_why_a_move_was_refused_and_sees_their_surplus():
    state = app.start_game(buyer="expert", seller="human", product=2, seed=1)
    cost = state["cost"]
    state = app.send_reply(state["session_id"], "offer", price=round(cost / 2, 2), talk="cheap!")
    assert not state["done"]
    refused = [m["content"] for m in state["messages"] if "was refused" in m["content"]]
    assert len(refused) == 1 and "below your cost" in refused[0] and "[REJECT]" in refused[0]
    while not state["done"]:
        state = app.send_reply(state["session_id"], "accept" if state.get("their_offer") else "offer",
                               price=round(cost * 1.5, 2))
    out = state["outcome"]
    if out["deal"]:
        assert out["seller_surplus"] == round(out["price"] - state["cost"], 2) >= 0
        assert 0 <= out["seller_reward"] <= 1 and "Seller surplus over cost" in out["explanation"]
    else:
        assert out["seller_surplus"] is None and out["seller_reward"] == 0.0


def test_the_app_benchmark_waits_for_a_busy_start_to_settle():
    """``settle`` returns once the process stops using the CPU (a warm-up thread done), not before."""
    import subprocess
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        import app_speed
    finally:
        sys.path.pop(0)
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt=time.process_time()\n"
                             "while time.process_time()-t<2: pass\ntime.sleep(60)"])
    try:
        waited = app_speed.settle(busy, limit_s=30)
        assert 1.0 <= waited < 30, waited
        assert busy.poll() is None, "it waits for idleness, not for the process to end"
    finally:
        busy.kill()
        busy.wait()


def test_a_refused_move_in_the_page_is_a_warning_and_the_game_goes_on():
    """A move the game cannot play (no price for an offer, nothing to accept) changes nothing in the page (every output
    skipped, the typed words kept) and the person may move again; the API still answers with an error."""
    *_, (sid, chat, card, outcome, controls) = app.ui_start("builtin", "human", "neutral", "option_a", -1, 4, "")
    for action, price in (("offer", None), ("offer", -5.0)):
        frames = list(app.ui_send(sid, action, price, "keep these words"))
        assert len(frames) == 1 and all(isinstance(x, dict) and x.get("__type__") == "update" and len(x) == 1
                                        for x in frames[0]), frames
    *_, (chat, _card, _outcome, _controls, talk) = app.ui_send(sid, "offer", 1.0, "a dollar?")
    assert talk == "" and chat  # a readable move is played
    with pytest.raises(Exception, match="an offer needs a positive price"):
        app.send_reply(sid, "offer", None, "")


@pytest.mark.parametrize("typed, seed", [("", None), ("  ", None), ("12", 12), (" 7 ", 7), (3, 3), ("4.0", 4)])
def test_the_play_tabs_seed_is_random_when_empty_and_a_whole_number_otherwise(typed, seed):
    from space.ui import seed_arg
    got = seed_arg(typed)
    assert got == seed if seed is not None else isinstance(got, int) and 0 <= got < 10**6


@pytest.mark.parametrize("typed", ["seven", "1_000", "2.5", "-3", "\u0663"])
def test_a_seed_that_is_not_a_number_is_refused_with_the_reason(typed):
    with pytest.raises(gr.Error, match="the seed must be a whole number"):
        list(app.ui_start("builtin", "expert", "neutral", "option_a", -1, typed, ""))


def test_a_persons_words_stay_as_typed_in_the_api_and_are_text_in_the_page():
    """The JSON API returns the words as typed; the page's chat shows them escaped (text, never markup)."""
    words = "<b>R&D</b> budget <$50"
    api = app.start_game(buyer="human", seller="neutral", product=-1, seed=3)
    state = app.send_reply(api["session_id"], "offer", 1.0, words)
    assert any(words in m["content"] for m in state["messages"])
    *_, (sid, *_rest) = app.ui_start("builtin", "human", "neutral", "option_a", -1, 3, "")
    *_, (chat, *_more) = app.ui_send(sid, "offer", 1.0, words)
    shown = [m["content"] for m in chat]
    assert any("&lt;b&gt;R&amp;D&lt;/b&gt; budget &lt;$50" in c for c in shown) and not any(words in c for c in shown)
