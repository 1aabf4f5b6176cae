""""Can you out-haggle it?": challenge games scored against the model and a reference on the same game,
recorded once in SQLite (surviving a restart, many visitors at once) and pushed to a Hub dataset repo."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from gradio_client import Client

from space.bargain import BargainSessions, GameError
from space.challenge import COLUMNS, Challenges, Leaderboard
from space.model import load_seat, model_roles
from tests.fake_hub import FakeHub
from tests.test_app_client import person

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "hf_fake_token_for_the_leaderboard"


def play(start, reply, role: str, seed: int | None, name: str = "", product: int = 0) -> dict:
    """A whole challenge game by a scripted visitor (``seed`` None: the server draws it, as for visitors)."""
    state = start(role=role, product=product, name=name, **({} if seed is None else {"seed": seed}))
    k = 0
    while not state["done"]:
        action, price, talk = person(state, k)
        state = reply(state["session_id"], action, price, talk)
        k += 1
    return state


def challenges(tmp_path) -> Challenges:
    return Challenges(BargainSessions(model_loader=load_seat, model_roles=model_roles),
                      Leaderboard(tmp_path / "board.sqlite"))


@pytest.mark.parametrize("role", ["buyer", "seller"])
def test_a_finished_challenge_is_scored_on_the_same_game_and_recorded_once(tmp_path, role):
    ch = challenges(tmp_path)
    state = play(ch.start, ch.reply, role, seed=11, name="  Ada \n Lovelace  ", product=4)
    c = state["challenge"]
    assert c["role"] == role and c["name"] == "Ada Lovelace" and c["place"] == 1 and c["games"] == 1
    out = state["outcome"]
    assert c["reward"] == (out["reward"] if role == "buyer" else out["seller_reward"])
    # the comparison is the very same game with the model (buyer) and the reference in the visitor's seat
    same = {"product": state["product"], "seed": state["seed"]}
    if role == "buyer":
        model = ch.sessions.view(ch.sessions.new_game(buyer="model", seller=state["seller"], **same))["outcome"]
        expert = ch.sessions.view(ch.sessions.new_game(buyer="expert", seller=state["seller"], **same))["outcome"]
        assert (c["model_reward"], c["reference"], c["reference_reward"]) == (model["reward"], "expert", expert["reward"])
    else:
        assert state["buyer"] == "model" and c["model_reward"] == out["reward"]
        ref = ch.sessions.view(ch.sessions.new_game(buyer="model", seller="neutral", **same))["outcome"]
        assert (c["reference"], c["reference_reward"]) == ("neutral", ref["seller_reward"])
    for value in (c["reward"], c["model_reward"], c["reference_reward"]):
        assert -1 <= value <= 1
    # asking again for the ended game's state records nothing more
    again = ch._finish(ch.sessions.state(state["session_id"]))
    assert again["challenge"]["id"] == c["id"] and len(ch.board.games()) == 1
    # a move sent after the end (a second tab, a retry) gets the result again, nothing is recorded twice
    late = ch.reply(state["session_id"], "accept")
    assert late["challenge"]["id"] == c["id"] and len(ch.board.games()) == 1
    stored = ch.board.games()[0]
    assert set(stored) == set(COLUMNS)  # the record's fields: no address, agent or identity beside the typed name


def test_the_seed_is_drawn_by_the_server_and_shown_only_at_the_end(tmp_path):
    """A visitor who could pick the seed could rehearse the same scripted seller in the Play tab first."""
    ch = challenges(tmp_path)
    seen = set()
    for _ in range(3):
        state = ch.start(role="buyer", product=2)
        assert "seed" not in state and "challenge" not in state
        ended = play(lambda **kw: state, ch.reply, "buyer", None)
        seen.add(ended["seed"])
        assert ended["challenge"]["seed"] == ended["seed"]
    assert len(seen) == 3  # drawn afresh (a 31-bit draw: three equal by chance is out of the question)


def test_a_result_that_failed_to_record_is_retried_not_lost(tmp_path, monkeypatch):
    ch = challenges(tmp_path)
    real = ch.board.record
    calls = []

    def flaky(record):
        calls.append(record)
        if len(calls) == 1:
            raise OSError("disk full")
        return real(record)

    monkeypatch.setattr(ch.board, "record", flaky)
    state = ch.start(role="buyer", product=1, seed=3)
    with pytest.raises(OSError):
        play(lambda **kw: state, ch.reply, "buyer", None)
    again = ch.reply(state["session_id"], "accept")  # asked again: recorded now, once
    assert again["challenge"]["place"] == 1 and len(ch.board.games()) == 1 and len(calls) == 2


def test_many_requests_for_one_ended_game_record_it_once(tmp_path, monkeypatch):
    ch = challenges(tmp_path)
    state = ch.start(role="buyer", product=1, seed=5)
    state = ch.sessions.reply(state["session_id"], "quit")  # ended, not yet scored (as if the request were lost)
    slow = ch._score

    def slow_score(*a):  # scoring takes a while: the other requests arrive meanwhile and wait for it
        __import__("time").sleep(0.5)
        return slow(*a)

    monkeypatch.setattr(ch, "_score", slow_score)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: ch._finish(ch.sessions.state(state["session_id"])), range(8)))
    assert len({r["challenge"]["id"] for r in results}) == 1 and len(ch.board.games()) == 1


def test_the_leaderboard_ranks_by_margin_over_the_model_then_reward(tmp_path):
    board = Leaderboard(tmp_path / "b.sqlite")
    base = {"role": "buyer", "source": "builtin", "product": 0, "title": "x", "seller": "neutral", "seed": 0,
            "reference": "expert", "reference_reward": 0.1, "deal": 1, "price": 10.0, "turns": 3, "ended_at": "t"}
    ids = [board.record({**base, "name": n, "reward": r, "model_reward": m})
           for n, r, m in (("a", 0.2, 0.3), ("b", 0.5, 0.1), ("c", 0.2, -0.2), ("d", -0.4, 0.2), ("e", 0.6, 0.2))]
    # margins: a -0.1, b +0.4, c +0.4 (b first: the higher reward), d -0.6, e +0.4 (first: the highest reward)
    assert [g["name"] for g in board.top("buyer")] == ["e", "b", "c", "a", "d"]
    assert [board.rank(i) for i in ids] == [(4, 5), (2, 5), (3, 5), (5, 5), (1, 5)]
    assert board.top("seller") == [] and board.count("buyer") == 5 and board.count("seller") == 0


def test_bad_challenge_input_is_refused_with_the_reason(tmp_path):
    ch = challenges(tmp_path)
    with pytest.raises(GameError, match="role must be"):
        ch.start(role="referee")
    with pytest.raises(GameError, match="seed"):
        ch.start(seed=-3)
    with pytest.raises(GameError, match="not a challenge game"):
        ch.reply("nope", "accept")
    normal = ch.sessions.start(buyer="human", seller="neutral", seed=1)
    with pytest.raises(GameError, match="not a challenge game"):
        ch.reply(normal["session_id"], "accept")


def test_challenge_records_survive_an_app_restart(tmp_path):
    """Two processes one after the other (the app restarted): the second reads the first one's game."""
    env = {"HAGGLE_LEADERBOARD_DB": str(tmp_path / "board.sqlite"), "PATH": "/usr/bin:/bin"}
    first = ("import app; from tests.test_challenge import play; "
             "s = play(app.challenge_start, app.challenge_reply, 'buyer', None, 'first run'); print(s['challenge']['id'])")
    second = "import app, json; print(json.dumps(app.leaderboard('buyer')))"
    out = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, **env}) for code in (first, second)]
    assert out[0].returncode == 0, out[0].stderr[-2000:]
    assert out[1].returncode == 0, out[1].stderr[-2000:]
    board = json.loads(out[1].stdout.strip().splitlines()[-1])
    assert board["games"] == 1 and board["top"][0]["name"] == "first run"
    assert board["top"][0]["id"] == int(out[0].stdout.strip().splitlines()[-1])


def test_twenty_visitors_at_once_through_the_api_are_all_recorded(space_url):
    import app
    before = app.leaderboard("buyer", 100)["games"]
    client = Client(space_url, verbose=False)

    def visitor(k: int) -> dict:
        start = lambda **kw: client.predict(**kw, api_name="/challenge_start")  # noqa: E731
        reply = lambda sid, a, p, t: client.predict(session_id=sid, action=a, price=p or 0.0, talk=t,  # noqa: E731
                                                    api_name="/challenge_reply")
        return play(start, reply, "buyer", seed=None, name=f"visitor {k}", product=k % 7)

    with ThreadPoolExecutor(20) as pool:
        states = list(pool.map(visitor, range(20)))
    ids = {s["challenge"]["id"] for s in states}
    assert len(ids) == 20
    board = client.predict(role="buyer", n=100, api_name="/leaderboard")
    assert board["games"] == before + 20
    names = {g["name"] for g in app.CHALLENGES.board.games("buyer")}
    assert {f"visitor {k}" for k in range(20)} <= names
    ranked = [s["challenge"]["place"] for s in states]
    assert all(1 <= p <= before + 20 for p in ranked)


def test_an_unreachable_hub_leaves_the_sqlite_board_working(tmp_path, monkeypatch, caplog):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    board = Leaderboard(tmp_path / "board.sqlite", hub_repo="alice/haggle-games", token=TOKEN)
    assert board.scheduler is None and "could not be opened" in caplog.text
    ch = Challenges(BargainSessions(model_loader=load_seat, model_roles=model_roles), board)
    assert play(ch.start, ch.reply, "buyer", seed=2)["challenge"]["place"] == 1
    monkeypatch.setenv("HAGGLE_LEADERBOARD_DB", str(tmp_path / "env.sqlite"))
    monkeypatch.setenv("HAGGLE_LEADERBOARD_REPO", "alice/haggle-games")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert Leaderboard.from_env().scheduler is None and "HF_TOKEN is not" in caplog.text


def test_records_are_committed_to_a_hub_dataset_with_the_commit_scheduler(tmp_path, monkeypatch):
    from huggingface_hub import constants
    with FakeHub(TOKEN) as fake:
        monkeypatch.setattr(constants, "ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        board = Leaderboard(tmp_path / "board.sqlite", hub_repo="alice/haggle-games", token=TOKEN, every_minutes=60)
        try:
            ch = Challenges(BargainSessions(model_loader=load_seat, model_roles=model_roles), board)
            for seed in (1, 2):
                play(ch.start, ch.reply, "buyer", seed=seed, name=f"v{seed}")
        finally:
            board.close()  # the last games go up with the closing commit
        repo = fake.repos["alice/haggle-games"]
        files = {p: b for p, b in repo["files"].items() if p.startswith("games/")}
        assert len(files) == 1 and repo["commits"]
        lines = [json.loads(x) for x in next(iter(files.values())).decode().splitlines()]
        assert [r["name"] for r in lines] == ["v1", "v2"] and set(lines[0]) == set(COLUMNS)
        assert lines == board.games()
        assert not fake.unknown, fake.unknown


def test_the_replays_are_played_from_the_start_so_the_last_move_waits_for_none(tmp_path, monkeypatch):
    """The comparison games do not depend on the visitor's moves: they are played in the background from the
    challenge's start, and the last move takes their result instead of playing them then."""
    ch = challenges(tmp_path)
    state = ch.start(role="buyer", product=3, seed=21)
    replays = ch._meta[state["session_id"]]["replays"]
    replays.result(timeout=120)  # played while the visitor has not moved yet
    monkeypatch.setattr(ch, "_replay", lambda **game: pytest.fail(f"replayed at the end: {game}"))
    ended = play(lambda **kw: state, ch.reply, "buyer", None)
    same = {"product": ended["product"], "seed": ended["seed"]}
    model = ch.sessions.view(ch.sessions.new_game(buyer="model", seller=ended["seller"], **same))["outcome"]
    assert ended["challenge"]["model_reward"] == model["reward"]


def test_a_queued_or_failed_replay_is_played_when_the_game_ends(tmp_path, monkeypatch):
    ch = challenges(tmp_path)
    monkeypatch.setattr(ch, "_start_replays", lambda *a: ch._replays.submit(lambda: 1 / 0))  # fails in background
    state = play(ch.start, ch.reply, "seller", seed=8, product=2)
    ref = ch.sessions.view(ch.sessions.new_game(buyer="model", seller="neutral", product=state["product"],
                                                seed=state["seed"]))["outcome"]
    assert state["challenge"]["reference_reward"] == ref["seller_reward"]
    gate = __import__("threading").Event()
    monkeypatch.setattr(ch, "_start_replays", lambda *a: ch._replays.submit(gate.wait))  # the worker is held up
    held = ch.start(role="buyer", product=1, seed=4)  # its own replay waits in the queue behind the held one
    ended = play(lambda **kw: held, ch.reply, "buyer", None)
    gate.set()
    assert ended["challenge"]["model_reward"] is not None and ch._meta[held["session_id"]]["replays"].cancelled()
