"""The Space's building blocks without a server: live games, what a person may see, figures."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from env.bargain.play import play_episode
from env.bargain.players import make_player
from env.bargain.protocol import MAX_TALK_CHARS, parse_reply
from env.bargain.rules import BUYER, SELLER
from space import figures as F
from space.bargain import HUMAN, GameError, BargainSessions, human_reply, pick_scenario


def offers_until_done(store: BargainSessions, state: dict, fractions=(0.6, 0.7, 0.8, 0.85, 0.9, 0.95)) -> dict:
    """A person who offers a rising share of their budget (buyer) or asks falling multiples of
    their cost (seller) until the game ends."""
    sid, k = state["session_id"], 0
    while not state["done"]:
        if state["you"] == BUYER:
            price = round(state["budget"] * fractions[min(k, len(fractions) - 1)], 2)
        else:
            price = round(state["cost"] * (1.6 - 0.1 * k), 2)
        state = store.reply(sid, "offer", price, f"offer number {k}")
        k += 1
    return state


def test_person_as_buyer_sees_only_their_side_until_the_end():
    store = BargainSessions()
    state = store.start(buyer=HUMAN, seller="begging", seed=11)
    game = store.get(state["session_id"])
    cost = f"{game.match.scenario.cost:,.2f}"
    while not state["done"]:
        dump = json.dumps(state)
        assert "cost" not in state and "interest" not in state
        assert cost not in dump, "the seller's cost reached the buyer's screen"
        for turn in game.env.log:
            if turn["role"] == SELLER and turn["thought"]:
                assert turn["thought"] not in dump, "the seller's private reasoning reached the buyer"
        assert not any(m.get("metadata") for m in state["messages"])
        state = store.reply(state["session_id"], "offer", round(state["budget"] * 0.75, 2), "hello")
    assert state["cost"] == game.match.scenario.cost and "explanation" in state["outcome"]
    assert any(m.get("metadata") for m in state["messages"]), "the whole game, reasoning included, is shown at the end"


def test_person_as_seller_never_sees_the_budget_while_playing():
    store = BargainSessions()
    state = store.start(buyer="expert", seller=HUMAN, seed=3, product=5)
    budget = f"{store.get(state['session_id']).match.scenario.budget:,.2f}"
    assert state["to_move"] == SELLER and state["messages"], "the agent buyer opens before the person answers"
    while not state["done"]:
        assert "budget" not in state and budget not in json.dumps(state)
        state = store.reply(state["session_id"], "offer", round(state["cost"] * 1.3, 2), "")
    assert state["outcome"]["reward"] == state["transcript"]["metrics"]["reward"]


def test_person_game_equals_a_scripted_game_with_the_same_moves():
    """The person's moves go through the same environment as any agent's: replaying them gives
    the same transcript, and the reward is in [-1, 1] with no deal below cost."""
    store = BargainSessions()
    state = offers_until_done(store, store.start(buyer=HUMAN, seller="neutral", seed=5, product=2))
    t = state["transcript"]
    seller_cost = t["scenario"]["cost"]
    assert -1.0 <= state["outcome"]["reward"] <= 1.0
    if state["outcome"]["deal"]:
        assert state["outcome"]["price"] >= seller_cost
    again = offers_until_done(store, store.start(buyer=HUMAN, seller="neutral", seed=5, product=2))
    assert again["transcript"] == t


def test_sessions_are_isolated_when_interleaved():
    store = BargainSessions()
    a = store.start(buyer=HUMAN, seller="conceder", seed=1, product=0)
    b = store.start(buyer=HUMAN, seller="boulware", seed=2, product=1)
    assert a["session_id"] != b["session_id"]
    for k in range(3):  # interleave moves of the two games
        a = store.reply(a["session_id"], "offer", round(a["budget"] * (0.5 + 0.05 * k), 2), "a") if not a["done"] else a
        b = store.reply(b["session_id"], "offer", round(b["budget"] * (0.55 + 0.05 * k), 2), "b") if not b["done"] else b
    alone = BargainSessions()
    a2 = alone.start(buyer=HUMAN, seller="conceder", seed=1, product=0)
    for k in range(3):
        a2 = alone.reply(a2["session_id"], "offer", round(a2["budget"] * (0.5 + 0.05 * k), 2), "a") if not a2["done"] \
            else a2
    assert a2["messages"] == a["messages"]


def test_agents_only_game_matches_play_episode():
    store = BargainSessions()
    game = store.new_game(buyer="expert", seller="tit_for_tat", product=4, seed=9, reasoning_mode="option_b")
    _, scenario = pick_scenario("builtin", "test", 4, 9)
    env = play_episode(scenario, make_player("buyer", "expert", "option_b"),
                       make_player("seller", "tit_for_tat", "option_b"), 9)
    assert game.env.transcript() == env.transcript()


@pytest.mark.parametrize("kwargs, match", [
    ({"seller": "nobody"}, "unknown seller"),  # unknown persona
    ({"buyer": "wizard"}, "unknown buyer"),
    ({"seed": -1}, "seed must be"),  # negative seed
    ({"seed": 1.5}, "seed must be"),
    ({"product": 10**6}, "product must be"),
    ({"product": True}, "product must be"),
    ({"source": "nowhere"}, "unknown or unavailable"),
    ({"reasoning_mode": "option_c"}, "reasoning_mode"),
    ({"buyer": HUMAN, "seller": HUMAN}, "one side must be an agent"),
    ({"max_turns": 0}, "max_turns"),
    ({"buyer": "model"}, "no trained model"),  # a store without a model loader says so
])
def test_bad_game_settings_are_clear_errors(kwargs, match):
    with pytest.raises(GameError, match=match):
        BargainSessions().start(**kwargs)


def test_bad_moves_are_refused_and_leave_the_game_unchanged():
    store = BargainSessions()
    state = store.start(buyer=HUMAN, seller="neutral", seed=4)
    sid = state["session_id"]
    for args, match in [(("offer", None, ""), "positive price"), (("offer", -3.0, ""), "positive price"),
                        (("offer", float("nan"), ""), "positive price"), (("haggle", 3.0, ""), "action must be"),
                        (("accept", None, ""), "no seller offer"),
                        (("offer", 10.0, "x" * 1_000_000), "too long"),
                        (("offer", 10.0, "I say [BUY] $1"), "could not be read")]:
        with pytest.raises(GameError, match=match):
            store.reply(sid, *args)
    assert store.state(sid) == state
    with pytest.raises(GameError, match="unknown session"):
        store.reply("no-such-session", "offer", 5.0, "")
    with pytest.raises(GameError, match="unknown session"):
        store.state(None)


def test_agent_games_take_no_moves_and_finished_games_refuse_more():
    store = BargainSessions()
    watch = store.start(buyer="expert", seller="neutral", seed=1)
    assert watch["done"] and "cost" in watch and "budget" in watch
    with pytest.raises(GameError, match="no person plays"):
        store.reply(watch["session_id"], "offer", 5.0, "")
    played = store.start(buyer=HUMAN, seller="neutral", seed=1)
    end = store.reply(played["session_id"], "quit", None, "bye")
    assert end["done"] and end["outcome"]["end_reason"] == "buyer_quit" and end["outcome"]["reward"] == 0.0
    with pytest.raises(GameError, match="over"):
        store.reply(played["session_id"], "offer", 5.0, "")


def test_session_cap_and_idle_expiry():
    store = BargainSessions(max_sessions=2)  # (a client's share: one game)
    first = store.start("10.0.0.1", seed=1)
    store.start("10.0.0.2", seed=2)
    with pytest.raises(GameError, match="limit of 2"):
        store.start("10.0.0.3", seed=3)
    store.end(first["session_id"])
    store.start("10.0.0.3", seed=3)
    quick = BargainSessions(idle_s=0.0)
    old = quick.start(seed=1)
    quick.start(seed=2)  # expires the idle one
    with pytest.raises(GameError, match="unknown session"):
        quick.state(old["session_id"])


@settings(max_examples=300, deadline=None)
@given(role=st.sampled_from([BUYER, SELLER]), action=st.sampled_from(["offer", "accept", "reject", "quit"]),
       price=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**10)),
       their=st.one_of(st.none(), st.floats(0.01, 1e6)), talk=st.text(max_size=300),
       mode=st.sampled_from(["option_a", "option_b"]))
def test_fuzz_person_replies_are_refused_or_read_as_meant(role, action, price, their, talk, mode):
    """Whatever a person types: a clear refusal, or a protocol reply the environment reads as the
    chosen action (the talk can never smuggle in a second action)."""
    try:
        text = human_reply(role, their, action, price, talk, mode)
    except GameError:
        return
    parsed = parse_reply(text)
    assert parsed.ok
    kind = {"offer": "BUY" if role == BUYER else "SELL", "accept": "DEAL", "reject": "REJECT", "quit": "QUIT"}
    assert parsed.action.kind == kind[action]
    if action == "accept":
        assert abs(parsed.action.price - their) <= 0.01  # the environment accepts a DEAL within a cent
    assert len(parsed.talk) <= MAX_TALK_CHARS


# ---------------------------------------------------------------------- figures
def test_figures_show_the_artifact_numbers():
    rows = F.eval_rows("eval_results.json", "mix")
    assert rows, "the shipped evaluation has seller-mix rows"
    fig = F.reward_bars("eval_results.json", "mix")
    bars = fig.data[0]
    shown = dict(zip(bars.y, bars.x))  # every row a bar but the ceiling, which is a line
    assert shown == {F._label(r): r["reward_mean"] for r in rows if not r.get("upper_bound")}
    assert any(r["episodes_subset"] and F._label(r) in shown and "first products" in F._label(r)
               for r in rows if r.get("episodes_subset")) or not any(r.get("episodes_subset") for r in rows)
    ceiling = next((r for r in rows if r.get("upper_bound")), None)
    if ceiling:
        assert any(f"{ceiling['reward_mean']:+.3f}" in a.text for a in fig.layout.annotations)
    heat = F.heatmap("eval_results.json")
    cells = {(b, s): v for b, row in zip(heat.data[0].y, heat.data[0].z) for s, v in zip(heat.data[0].x, row)}
    any_row = F.eval_rows("eval_results.json")[0]
    assert cells[(any_row["buyer"], any_row["seller"])] == any_row["reward_mean"]
    grpo = F.read_artifact("grpo_training_curve.json")["points"]
    curve = next(t for t in F.rl_rewards().data if t.name == f"{F.rl_label('grpo')} per step (raw)")
    assert list(curve.y) == [p["reward_mean"] for p in grpo]
    for make in (F.sft_loss, F.rl_phases, F.dashboard, lambda: F.interest_bars("eval_results.json")):
        assert isinstance(make(), go.Figure) and make().data
    assert "grpo" in F.headline() and "expert" in F.headline()


def test_missing_artifacts_say_which_command_writes_them():
    fig = F.reward_bars("eval_nothing.json")
    assert not fig.data and "no rows" in fig.layout.annotations[0].text
    assert "not produced" in F.provenance_line(None, "x.json")


@pytest.mark.parametrize("name", ["../README.md", "/etc/passwd", "", "checkpoints/../../app.py", "a\x00b"])
def test_artifact_paths_stay_inside_artifacts(name):
    with pytest.raises(ValueError):
        F.artifact_path(name)


def test_before_after_games_are_the_same_game_for_every_buyer():
    games = F.before_after_games()
    buyers = F.read_artifact(F.BEFORE_AFTER)["buyers"]
    assert buyers[0] == "base" and len(buyers) >= 2
    kinds = [g["interest"] for g in games]
    assert kinds.count("conflicting") == 1 and kinds.count("mutual") >= 3, "several mutual games, one conflicting"
    assert len({(g["title"], g["seed"]) for g in games}) == len(games) and len({g["seller"] for g in games}) > 1
    for g in games:
        played = [g["games"][b] for b in buyers]
        assert all(t["scenario"] == played[0]["scenario"] and t["seed"] == g["seed"] for t in played)
        assert all(g["rewards"][b] <= g["oracle_reward"] + 1e-9 for b in buyers), "the oracle is the ceiling"
        assert g["interest"] == ("mutual" if g["budget"] > g["cost"] else "conflicting")
        if g["interest"] == "conflicting":
            assert g["oracle_reward"] == 0.0


def test_every_artifact_is_listed_with_provenance():
    listed = {r["file"]: r for r in F.list_artifacts()}
    on_disk = {p.relative_to(F.ARTIFACTS).as_posix() for p in F.ARTIFACTS.rglob("*") if p.is_file()}
    assert set(listed) == on_disk
    for name, row in listed.items():
        if name.endswith(".json") and not name.startswith("checkpoints/"):
            assert row["command"] and row["commit"], f"{name} lacks provenance"


def test_a_card_names_the_scripted_teacher_its_sft_cloned_and_each_stage_by_its_kind(tmp_path):
    """A start cloned from another scripted buyer than the expert (``sft.py --teacher steady``) says whose games; a
    numbered run's curve (``grpo9_...``) and one in a sub-folder of artifacts/ read as their stage."""
    from space.card import card_facts, model_card
    from space.story import _stage
    (tmp_path / "card.json").write_text(json.dumps({"curves": ["probes/sft_steady1600_smollm2_training_curve.json",
                                                                "grpo_smollm2_training_curve.json"]}))
    sft, grpo = card_facts(tmp_path)["training"]
    assert sft["games"] == 1600 and sft["cloned"] == "scripted steady buyer's" and sft["command"]
    assert grpo["games"] is None and grpo["episodes"]
    assert "1,600 scripted steady buyer's games" in model_card(tmp_path)
    assert "- sft_steady1600_smollm2: " in model_card(tmp_path)
    assert [_stage(sft), _stage(grpo)] == ["sft", "grpo"]
    assert [_stage({"curve": c}) for c in ("grpo9_smollm2_training_curve.json", "probes/sdpo2_training_curve.json")] == [
        "grpo", "sdpo"]


def test_model_cards_say_what_plays_from_the_files_alone():
    from space import figures as F
    from space.card import card_facts, model_card
    import app
    tiny = card_facts(F.ARTIFACTS / "checkpoints" / "grpo-tiny")
    assert tiny["base_model"] == "haggle-tiny" and 3e6 < tiny["parameters"] < 4e6 and not tiny["adapter"]
    assert tiny["stages"][-1] == "grpo" and tiny["roles"] == ["buyer"]
    assert all(t["command"] and t["wall_time_s"] and t["machine"] for t in tiny["training"])
    smol = card_facts(F.ARTIFACTS / "checkpoints" / "sft-smollm2")
    assert smol["adapter"] and smol["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert 4e6 < smol["adapter_parameters"] < 6e6 and 130e6 < smol["parameters"] < 140e6
    assert smol["training"][0]["games"] == 400 and smol["training"][0]["steps"] == 100
    text = model_card(F.ARTIFACTS / "checkpoints" / "sft-smollm2")
    assert "SmolLM2-135M-Instruct" in text and "LoRA adapter" in text and "400 expert games" in text
    seller = card_facts(F.ARTIFACTS / "checkpoints" / "sft-smollm2-seller")
    assert seller["roles"] == ["seller"] and seller["adapter"] and seller["eval_seller"] == "llm_seller"
    seller_text = model_card(F.ARTIFACTS / "checkpoints" / "sft-smollm2-seller")
    assert "Trained as the seller" in seller_text and "scripted sellers' games" in seller_text
    assert ("against seller `llm_seller`" in seller_text) == (seller["evaluation"] is not None)
    overview = app.models_overview()
    assert "In the model seat: `grpo-tiny`" in overview and "sft-smollm2" in overview
    for row_buyer in (tiny["eval_buyer"], smol["eval_buyer"]):
        rows = [r for r in F.eval_rows("eval_results.json", "mix") if r["buyer"] == row_buyer]
        if rows:
            assert f"{rows[0]['reward_mean']:+.3f}" in overview


def test_training_dashboard_has_six_titled_panels_and_readable_log_ticks():
    fig = F.dashboard()
    titles = [a.text for a in fig.layout.annotations if a.text in {t for t, _ in F.DASHBOARD_PANELS}]
    assert len(titles) == 6 == len(set(titles)) and titles[0].startswith("1. SFT") and titles[2].startswith("3. RL")
    refs = [a.text for a in fig.layout.annotations if a.text not in titles]  # the reference lines on the reward panel
    assert any(t.startswith("expert") for t in refs) and any(t.startswith("ceiling") for t in refs), refs
    for k in range(1, 7):
        suffix = "" if k == 1 else str(k)
        assert fig.layout[f"xaxis{suffix}"].title.text and fig.layout[f"yaxis{suffix}"].title.text
    ticks = fig.layout.yaxis.ticktext
    assert ticks and all(float(t) > 0 for t in ticks) and len(set(ticks)) == len(ticks), ticks
    assert F.log_ticks([0.066, 1.12]) == ([0.05, 0.1, 0.2, 0.5, 1.0, 2.0], ["0.05", "0.1", "0.2", "0.5", "1", "2"])
    assert "four phases" not in fig.layout.title.text and "phase" not in fig.layout.title.text


def test_building_the_page_leaves_torch_unimported_until_a_model_plays():
    """Model cards read parameter counts from safetensors headers; torch (a second or more of start-up
    on this CPU) loads only when a model seat or the SFT sample needs it."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    code = ("import sys, app; assert 'In the model seat' in app.models_overview(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_generalisation_table_has_each_studys_pooled_rows_and_says_when_one_did_not_run(monkeypatch):
    row = {"buyer": "grpo", "seller": "mix", "episodes": 10, "reward_mean": 0.1, "reward_ci95": [0.0, 0.2],
           "deal_rate": 0.5, "overshoot_rate": 0.0, "format_error_rate": 0.0}
    art = {"studies": {
        "c_adversarial": {"question": "adversarial", "ran": True,
                          "rows": [row, {**row, "seller": "begging", "reward_mean": 0.9}]},
        "b_held_out_seller": {"question": "held out", "ran": True, "rows": [{**row, "seller": "tit_for_tat"}]},
        "d_llm_seller": {"question": "llm", "ran": False, "why_not": "no --seller_model given", "rows": []}}}
    monkeypatch.setattr(F, "read_artifact", lambda name: art)
    table = F.generalisation_table()
    assert [(r[0].split(":")[0], r[2]) for r in table] == [("c_adversarial", "mix"), ("b_held_out_seller", "tit_for_tat"),
                                                           ("d_llm_seller", "no --seller_model given")]
    assert table[0][4] == "+0.100" and table[2][1] == "not run"
    assert all(len(r) == len(F.GENERALISATION_COLUMNS) for r in table)


def test_a_live_move_takes_the_model_before_waiting_background_work():
    """The seat's lock: background work (a challenge's replays) waiting for the model lets a live move go first."""
    import threading
    import time

    from space.model import SeatLock

    lock, order = SeatLock(), []
    lock.__enter__()  # the model is busy

    def work(name, background):
        with lock.background() if background else __import__("contextlib").nullcontext():
            with lock:
                order.append(name)

    bg = threading.Thread(target=work, args=("background", True))
    bg.start()
    time.sleep(0.2)  # the background work waits first
    live = threading.Thread(target=work, args=("live", False))
    live.start()
    time.sleep(0.2)
    lock.__exit__(None, None, None)
    bg.join(5), live.join(5)
    assert order == ["live", "background"]


@pytest.mark.parametrize("viewer", ["human", None])
def test_a_model_reply_is_shown_while_written_and_a_person_never_sees_its_reasoning(monkeypatch, viewer):
    """Previews of a model's reply: a person playing against it sees only the public part written so far (never
    the private Thought), a spectator sees all of it; the reply played is the one written."""
    from space import bargain as B
    from space.model import load_seat, model_roles

    monkeypatch.setattr(B, "PREVIEW_EVERY_S", 0.005)
    games = B.BargainSessions(model_loader=load_seat, model_roles=model_roles)
    game = games.new_game(buyer="model", seller=viewer or "neutral", product=3, seed=7, advance=False)
    with game.lock:
        states = list(B.agent_replies(game, previews=True))
    previews = [s["writing"] for s in states if "writing" in s]
    assert previews and all(p["role"] == "buyer" for p in previews)
    first = game.env.transcript()["turns"][0]
    texts = [p["text"] for p in previews if p["text"]]
    if viewer:
        assert first["thought"] and not any(first["thought"][:12] in t or "Thought" in t for t in texts)
    else:
        assert any(first["thought"][:12] in t for t in texts)  # a spectator watches the reasoning being written
    plain = games.new_game(buyer="model", seller=viewer or "neutral", product=3, seed=7)
    assert plain.env.transcript()["turns"] == game.env.transcript()["turns"]
