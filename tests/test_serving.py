"""The OpenEnv server started for real on loopback and driven by the real typed client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
import logging
import threading
import time

import httpx
import pytest
import uvicorn

from serving.client import BargainClient, MarketClient
from env.market import TASKS, make_policy, play_market
from env.market.play import seat_rng
from serving.app import build_app
from serving.bargain import BargainAction, BargainEnvironment
from serving.market import MarketAction, MarketEnvironment
from training.games.bargain.tools import HaggleToolEnv
from tests.conftest import free_port


class Served:
    """A uvicorn server in a background thread, stopped at teardown."""

    def __init__(self, app):
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            if time.time() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def url():
    served = Served(build_app("bargain", max_sessions=300, idle_timeout_s=300, per_client=300))  # load tests: one client
    yield served.url
    served.stop()


@pytest.fixture(scope="module")
def small():
    """Two sessions at most, idle ones reaped after one second."""
    served = Served(build_app("bargain", max_sessions=2, idle_timeout_s=1.0, per_client=2))
    yield served.url
    served.stop()


def policy(obs, k: int) -> BargainAction:
    """A deterministic buyer: rising offers, accepting an ask within 85% of the budget."""
    if obs.their_offer is not None and obs.their_offer <= 0.85 * obs.private_value:
        return BargainAction(kind="DEAL", price=obs.their_offer, talk="deal")
    return BargainAction(kind="BUY", price=round(obs.private_value * (0.5 + 0.07 * k), 2), talk=f"offer {k}")


def play_inprocess(seed: int, opponent: str) -> list[dict]:
    env = BargainEnvironment()
    obs, k, seen = env.reset(seed=seed, opponent=opponent), 0, []
    seen.append(obs.model_dump())
    while not obs.done:
        obs = env.step(policy(obs, k))
        seen.append(obs.model_dump())
        k += 1
    return seen


async def play_served(url: str, seed: int, opponent: str) -> list[dict]:
    async with BargainClient(base_url=url) as client:
        result = await client.reset(seed=seed, opponent=opponent)
        seen, k = [result.observation.model_dump()], 0
        while not result.done:
            result = await client.step(policy(result.observation, k))
            seen.append(result.observation.model_dump())
            k += 1
        return seen


def test_health_schema_and_metadata(url):
    assert httpx.get(f"{url}/health").json()["status"] == "healthy"
    schema = httpx.get(f"{url}/schema").json()
    assert "kind" in schema["action"]["properties"] and "private_value" in schema["observation"]["properties"]
    assert httpx.get(f"{url}/metadata").json()["name"] == "haggle-bargain"


def test_a_served_episode_equals_the_same_episode_in_process(url):
    for seed, opponent in ((3, "neutral"), (8, "insulting"), (21, "unyielding")):
        served = asyncio.run(play_served(url, seed, opponent))
        assert served == play_inprocess(seed, opponent)
        assert served[-1]["done"] and -1 <= served[-1]["reward"] <= 1 and served[-1]["metrics"]["end_reason"]


def test_observations_never_carry_the_sellers_secrets(url):
    env = BargainEnvironment()
    obs = env.reset(seed=5, opponent="begging")
    cost = f"{env.match.scenario.cost:.2f}"
    k = 0
    while not obs.done:
        text = obs.model_dump_json()
        assert cost not in text and "floor" not in text, "the seller's cost or reasoning reached the buyer"
        obs = env.step(policy(obs, k))
        k += 1
    assert "cost" not in env.state.model_dump_json()


def test_a_client_closing_its_session_is_not_logged_as_a_server_error(url):
    """openenv closes the socket after the client has gone; that must not log a traceback."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    try:
        for seed in range(3):
            asyncio.run(play_served(url, seed, "neutral"))
        time.sleep(0.3)  # the server finishes closing after the client returns
    finally:
        logger.removeHandler(handler)
    assert not records, [r.getMessage() for r in records]


def test_structured_and_text_replies_are_the_same_move(url):
    a, b = BargainEnvironment(), BargainEnvironment()
    a.reset(seed=2)
    b.reset(seed=2)
    oa = a.step(BargainAction(kind="BUY", price=12.5, talk="hi"))
    ob = b.step(BargainAction(reply="Thought: \nTalk: hi\nAction: [BUY] $12.50"))
    assert oa == ob


def test_http_sessions(url):
    sid = httpx.post(f"{url}/sessions").json()["session_id"]
    obs = httpx.post(f"{url}/sessions/{sid}/reset", json={"seed": 4, "opponent": "conceder"}).json()
    assert obs["done"] is False and obs["observation"]["role"] == "buyer"
    step = httpx.post(f"{url}/sessions/{sid}/step", json={"action": {"kind": "BUY", "price": 5.0}}).json()
    assert len(step["observation"]["messages"]) == 2 and step["observation"]["history_len"] == 2
    state = httpx.get(f"{url}/sessions/{sid}/state").json()
    assert state["step_count"] == 1 and state["opponent"] == "conceder"
    assert httpx.delete(f"{url}/sessions/{sid}").status_code == 200
    assert httpx.get(f"{url}/sessions/{sid}/state").status_code == 404


@pytest.mark.parametrize("method, path, kwargs, code, reason", [
    ("post", "/step", {"content": b"{not json", "headers": {"content-type": "application/json"}}, 400, "malformed json"),
    ("post", "/step", {"json": {"action": {"kind": "FLY"}}}, 422, "FLY"),  # unknown action
    ("post", "/step", {"json": {"action": {"kind": "BUY", "price": "cheap"}}}, 422, "price"),  # wrong type
    ("post", "/step", {"json": {"action": {"kind": "BUY"}}}, 422, "needs price"),
    ("post", "/step", {"json": {"action": {"reply": "x", "kind": "QUIT"}}}, 422, "not both"),
    ("post", "/step", {"json": {"action": {"kind": "BUY", "price": 5, "wings": 2}}}, 422, "wings"),
    ("post", "/step", {"json": {"action": {"reply": "x" * 100_000}}}, 413, "over the limit"),  # oversized body
    ("post", "/step", {"json": {"action": {"kind": "BUY", "price": 5}}}, 409, "reset first"),
    ("post", "/reset", {"json": {"opponent": "wizard"}}, 400, "unknown seller"),
    ("post", "/reset", {"json": {"seed": -1}}, 422, "seed"),
    ("get", "/sessions/nope/state", {}, 404, "unknown session"),
    ("post", "/sessions/nope/step", {"json": {"action": {"kind": "QUIT"}}}, 404, "unknown session"),
])
def test_bad_requests_get_a_4xx_with_a_reason(url, method, path, kwargs, code, reason):
    sid = httpx.post(f"{url}/sessions").json()["session_id"]
    before = httpx.post(f"{url}/sessions/{sid}/reset", json={"seed": 9}).json()
    r = getattr(httpx, method)(f"{url}{path}", **kwargs)
    assert r.status_code == code, r.text
    assert reason.lower() in r.text.lower()
    assert httpx.get(f"{url}/health").status_code == 200, "the server keeps serving"
    assert httpx.get(f"{url}/sessions/{sid}/state").json()["step_count"] == 0, "no session was touched"
    assert before["observation"]["messages"] == []


def test_bad_session_requests(url):
    sid = httpx.post(f"{url}/sessions").json()["session_id"]
    assert httpx.post(f"{url}/sessions/{sid}/step", json={"action": {"kind": "QUIT"}}).status_code == 409
    r = httpx.post(f"{url}/sessions/{sid}/reset", content=b"]]", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "malformed JSON" in r.text
    assert httpx.post(f"{url}/sessions/{sid}/step", json=[1, 2]).status_code == 422


def test_websocket_errors_keep_the_session(url):
    async def run():
        async with BargainClient(base_url=url) as client:
            await client.reset(seed=1)
            await client._send({"type": "step", "data": {"kind": "BUY", "price": "cheap"}})
            bad = await client._receive()
            assert bad["type"] == "error" and bad["data"]["code"] == "VALIDATION_ERROR"
            await client._ws.send("{broken")
            bad = await client._receive()
            assert bad["data"]["code"] == "INVALID_JSON"
            result = await client.step(BargainAction(kind="BUY", price=3.0))
            assert result.observation.history_len == 2, "the session survived the bad messages"
    asyncio.run(run())


@pytest.mark.slow
def test_session_cap_and_idle_timeout(small):
    async def run():
        from websockets.asyncio.client import connect
        a, b = BargainClient(base_url=small), BargainClient(base_url=small)
        await a.reset(seed=1)
        await b.reset(seed=2)
        async with connect(small.replace("http", "ws") + "/ws") as ws:  # the third is told why, then closed
            refusal = json.loads(await ws.recv())
        assert refusal["type"] == "error" and refusal["data"]["code"] == "CAPACITY_REACHED"
        for client in (a, b):
            await client.close()
    asyncio.run(run())
    time.sleep(0.3)
    sid = httpx.post(f"{small}/sessions").json()["session_id"]
    httpx.post(f"{small}/sessions/{sid}/reset", json={"seed": 1})
    other = httpx.post(f"{small}/sessions").json()["session_id"]
    full = httpx.post(f"{small}/sessions")
    assert full.status_code == 503 and "capacity" in full.text
    deadline = time.time() + 15  # the reaper looks every max(timeout / 4, 5 s)
    while time.time() < deadline and httpx.get(f"{small}/sessions/{sid}/state").status_code != 404:
        time.sleep(0.5)
    assert httpx.get(f"{small}/sessions/{sid}/state").status_code == 404, "an idle session was not reaped"
    assert httpx.get(f"{small}/sessions/{other}/state").status_code == 404


def test_load_200_concurrent_websocket_sessions(url):
    """200 sessions at once, each a whole episode: no errors, and every episode equals the same
    seed played in-process."""
    opponents = ["neutral", "boulware", "conceder", "tit_for_tat", "begging", "insulting", "unyielding"]
    jobs = [(1000 + i, opponents[i % 7]) for i in range(200)]

    async def run():
        return await asyncio.gather(*(play_served(url, seed, opp) for seed, opp in jobs))

    results = asyncio.run(run())
    for (seed, opp), served in zip(jobs, results):
        assert served == play_inprocess(seed, opp), f"episode {seed} vs {opp} differs from in-process"


def test_tool_adapter_in_process_and_served_agree(url):
    row = {"seed": 17, "opponent": "tit_for_tat", "prompt": [{"role": "user", "content": "negotiate"}]}
    texts = []
    for env in (HaggleToolEnv(), HaggleToolEnv(base_url=url)):
        out = [env.reset(**row), env.offer(price=20.0), env.reject(), env.offer(35), env.accept(), env.offer(1.0)]
        texts.append((out, env.get_reward()))
        env._close()
    assert texts[0] == texts[1]
    out, reward = texts[0]
    assert "Your budget is $" in out[0] and out[-1] == "The negotiation is over." and -1 <= reward <= 1
    fresh = HaggleToolEnv()
    assert fresh.offer(5.0) == "The negotiation is over."  # before reset: nothing to play
    assert "must be a number" in fresh.offer("abc") and "positive" in fresh.offer(-3)


def test_tool_methods_have_google_docstrings():
    from transformers.utils import get_json_schema
    for name in ("offer", "accept", "reject", "quit"):
        schema = get_json_schema(getattr(HaggleToolEnv, name))
        assert schema["function"]["description"]
    assert get_json_schema(HaggleToolEnv.offer)["function"]["parameters"]["properties"]["price"]["type"] == "number"


@pytest.mark.slow
def test_grpo_runs_through_environment_factory_against_the_server(url, tiny_dir, tmp_path):
    """A few GRPO steps of TRL's tool-calling trainer on the tiny model, every rollout's environment
    a session on the served environment, every episode a train-split product."""
    from env.bargain.sources import get_split
    from training.grpo_tools import main

    trainer = main(["--smoke", "--model_name_or_path", str(tiny_dir), "--output_dir", str(tmp_path),
                    "--env_url", url])
    assert trainer.state.global_step == 2
    pool = trainer._environment_pool[None]
    train_titles = {s.title for s in get_split("builtin", "train")}
    assert pool and all(e.base_url == url and e.obs is not None for e in pool)
    assert all(e.obs.title in train_titles for e in pool), "training episodes come from the train split only"
    for e in pool:
        e._close()


# ---------------------------------------------------------------------- the GPU market
@pytest.fixture(scope="module")
def market_url():
    served = Served(build_app("market", max_sessions=100, idle_timeout_s=300, per_client=100))
    yield served.url
    served.stop()


class MarketDriver:
    """Lab 0 played by the rule expert from the served view alone; every few moves a model-style
    JSON text (one of them unreadable), so both action forms and refusals go over the wire."""

    def __init__(self, task: str, seed: int):
        self.expert, self.k = make_policy("expert"), 0
        self.task, self.seed = task, seed

    def __call__(self, obs) -> MarketAction:
        if self.k == 0:
            self.expert.reset(obs.view, seat_rng(self.task, self.seed, 0))
        self.k += 1
        if self.k == 3:
            return MarketAction(reply="I think I will just wait and see.")  # refused: no_json, penalised
        move = self.expert.act(obs.view)
        return MarketAction(reply=json.dumps(move)) if self.k % 2 else MarketAction(move=move)


def market_inprocess(task: str, seed: int) -> list[dict]:
    env, drive = MarketEnvironment(), MarketDriver(task, seed)
    obs = env.reset(seed=seed, task=task)
    seen = [obs.model_dump()]
    while not obs.done:
        obs = env.step(drive(obs))
        seen.append(obs.model_dump())
    return seen


async def market_served(url: str, task: str, seed: int) -> list[dict]:
    drive = MarketDriver(task, seed)
    async with MarketClient(base_url=url) as client:
        result = await client.reset(seed=seed, task=task)
        seen = [result.observation.model_dump()]
        while not result.done:
            result = await client.step(drive(result.observation))
            seen.append(result.observation.model_dump())
        return seen


def test_the_market_is_served_and_equals_the_same_episode_in_process(market_url):
    assert httpx.get(f"{market_url}/metadata").json()["name"] == "haggle-market"
    assert "move" in httpx.get(f"{market_url}/schema").json()["action"]["properties"]
    for task in TASKS:
        for seed in (2, 5):
            served = asyncio.run(market_served(market_url, task, seed))
            assert served == market_inprocess(task, seed)
            last = served[-1]
            assert last["done"] and last["outcome"]["invalid"] == 1 and served[3]["last"]["code"] == "no_json"
            assert sum(o["reward"] or 0.0 for o in served) == pytest.approx(last["total_reward"])
            assert last["total_reward"] == pytest.approx(last["outcome"]["reward"])


def test_the_served_expert_scores_what_it_scores_in_process():
    for task in TASKS:
        env, expert = MarketEnvironment(), make_policy("expert")
        obs = env.reset(seed=8, task=task)
        expert.reset(obs.view, seat_rng(task, 8, 0))
        while not obs.done:
            obs = env.step(MarketAction(move=expert.act(obs.view)))
        assert obs.total_reward == pytest.approx(play_market(task, 8, make_policy("expert")).outcome(0)["reward"])


def test_market_observations_never_carry_other_labs_private_facts():
    for task in TASKS:
        served = market_inprocess(task, 4)
        env = MarketEnvironment()
        env.reset(seed=4, task=task)
        private = [j.id for lab in env.match.env.world.labs[1:] for j in lab.jobs]
        text = json.dumps(served) + env.state.model_dump_json()
        for job in private:
            assert f'"{job}"' not in text, job
        assert "archetype" not in text and "money" not in json.dumps([o["view"]["labs"] for o in served])


@pytest.mark.parametrize("path, body, code, reason", [
    ("/step", {"action": {"move": {"action": "fly"}}}, 422, "unknown_action"),
    ("/step", {"action": {"move": {"action": "buy_spot", "hours": "lots"}}}, 422, "bad_value"),
    ("/step", {"action": {"move": {"action": "wait"}, "reply": "{}"}}, 422, "not both"),
    ("/step", {"action": {"reply": "x" * 100_000}}, 413, "over the limit"),
    ("/step", {"action": {"move": {"action": "wait"}}}, 409, "reset first"),
    ("/reset", {"task": "poker"}, 400, "unknown task"),
    ("/reset", {"counterparts": "saint"}, 400, "counterparts"),
])
def test_bad_market_requests_get_a_4xx_with_a_reason(market_url, path, body, code, reason):
    sid = httpx.post(f"{market_url}/sessions").json()["session_id"]
    httpx.post(f"{market_url}/sessions/{sid}/reset", json={"seed": 1, "task": "market_round"})
    r = httpx.post(f"{market_url}{path}", json=body)
    assert r.status_code == code, r.text
    assert reason.lower() in r.text.lower()
    assert httpx.get(f"{market_url}/sessions/{sid}/state").json()["step_count"] == 0, "no session was touched"
    ok = httpx.post(f"{market_url}/sessions/{sid}/step", json={"action": {"reply": "no idea"}}).json()
    assert ok["observation"]["last"]["code"] == "no_json" and ok["reward"] < 0  # read, refused, penalised


def test_60_concurrent_market_sessions_do_not_interfere(market_url):
    jobs = [(list(TASKS)[i % 3], 500 + i) for i in range(60)]

    async def run():
        return await asyncio.gather(*(market_served(market_url, task, seed) for task, seed in jobs))

    for (task, seed), served in zip(jobs, asyncio.run(run())):
        assert served == market_inprocess(task, seed), f"{task}/{seed} differs from in-process"


@pytest.mark.slow
def test_serving_benchmark_runs_and_its_servers_play_the_in_process_games(tmp_path):
    """The benchmark script end to end on a small load: its bargain, replay and market servers
    each end every episode as the same seed ends in-process, and it writes the contract keys."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "serving.json"
    subprocess.run([sys.executable, "benchmarks/serving_speed.py", "--sessions", "6", "--episodes", "2",
                    "--market-sessions", "3", "--market-episodes", "1", "--repeats", "2", "--out", str(out)],
                   cwd=root, check=True, timeout=300, capture_output=True)
    for art in (json.loads(out.read_text()), json.loads((root / "artifacts/benchmarks/serving.json").read_text())):
        assert {"command", "config", "seeds", "commit", "date", "machine", "wall_time_s"} <= set(art["provenance"])
        res = art["results"]
        assert {"inprocess_steps_per_s", "served_steps_per_s", "step_p50_ms", "step_p99_ms"} <= set(res)
        assert res["served_equals_inprocess"] and res["replay_equals_inprocess"]
        assert res["market"]["served_equals_inprocess"]
        assert res["meets_target"] == (res["served_over_echo"] >= res["target_served_over_echo"])
        assert all(len(v) == art["provenance"]["config"]["repeats"] for v in res["runs"].values())
    res = json.loads(out.read_text())["results"]
    assert res["served_steps"] > 6 * 2 and res["market"]["served_steps"] > 3


def test_the_replay_environment_replays_the_in_process_episode(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "benchmarks"))  # as the script runs
    from serving_speed import ReplayEnvironment, play_bargain, policy as bench_policy  # noqa: PLC0415
    seen = play_bargain(BargainEnvironment(), 10_003)
    ReplayEnvironment.TAPES = {10_003: [o.model_dump() for o in seen]}
    env = ReplayEnvironment()
    obs, k = env.reset(seed=10_003), 0
    replayed = [obs]
    while not obs.done:
        obs = env.step(bench_policy(obs, k))
        replayed.append(obs)
        k += 1
    assert [o.model_dump() for o in replayed] == [o.model_dump() for o in seen] and seen[-1].done


# ---------------------------------------------------------------------- hostile bodies (round three, items 2-3)
HUGE = "1" + "0" * 5000  # more digits than Python will read
BARGAIN_BODIES = [  # each answered with a 4xx, never a 500; the session plays on
    '{"action": {"kind": "BUY", "price": NaN}}',
    '{"action": {"kind": "BUY", "price": Infinity}}',
    '{"action": {"kind": "BUY", "price": 1e99}}',
    '{"action": {"kind": "BUY", "price": ' + HUGE + '}}',
    '{"action": {"reply": "Talk: \\ud800\\nAction: [BUY] $5"}}',  # a lone surrogate (valid JSON)
    '{"action": {"kind": "BUY", "price": 5, "talk": "\\udfff"}}',
    '{"action": {"kind": "BUY", "price": 5, "price": 6}}',  # a repeated key
    '{"action": {"\\ud800": 1}}',
    "[" * 100_000 + "]" * 100_000,  # (too large for the default body limit, which is also a 4xx)
    "[" * 5_000 + "]" * 5_000,
]
MARKET_BODIES = [
    '{"action": {"move": {"action": "buy_spot", "hours": ' + HUGE + '}}}',
    '{"action": {"move": {"action": "buy_spot", "hours": NaN}}}',
    '{"action": {"move": {"action": "pitch", "to": "lab1", "text": "\\ud800", '
    '"ask": {"job": "j0.0", "block": "b2", "hours": 20, "price": 40}}}}',
    '{"action": {"reply": "{\\"action\\": \\"pitch\\", \\"to\\": \\"lab1\\", \\"text\\": \\"\\\\ud800 hi\\", '
    '\\"ask\\": {\\"job\\": \\"j0.0\\", \\"block\\": \\"b2\\", \\"hours\\": 20, \\"price\\": 40}}"}}',
    '{"action": {"reply": "\\ud800"}}',
]


def _hostile_http(base: str, bodies: list[str], reset: dict, good: dict) -> None:
    """Every body on the session route and on openenv's own /step; each a 4xx or a played action
    (an in-game refusal), the server's answers always JSON, and the session goes on to a good step."""
    sid = httpx.post(f"{base}/sessions").json()["session_id"]
    assert httpx.post(f"{base}/sessions/{sid}/reset", json=reset).status_code == 200
    for body in bodies:
        for path in (f"/sessions/{sid}/step", "/step"):
            r = httpx.post(f"{base}{path}", content=body.encode(),
                           headers={"content-type": "application/json"}, timeout=30)
            assert r.status_code < 500, (path, body[:80], r.text[:300])
            json.loads(r.text)  # a well-formed answer
        ok = httpx.post(f"{base}/sessions/{sid}/step", json=good)
        if ok.status_code == 409:  # the episode ended (a refusal can end it): a new one plays
            httpx.post(f"{base}/sessions/{sid}/reset", json=reset)
            ok = httpx.post(f"{base}/sessions/{sid}/step", json=good)
        assert ok.status_code == 200, (body[:80], ok.text[:300])
        httpx.post(f"{base}/sessions/{sid}/reset", json=reset)
    httpx.delete(f"{base}/sessions/{sid}")


def _hostile_ws(base: str, bodies: list[str], reset: dict, good: dict) -> None:
    async def run():
        from websockets.asyncio.client import connect
        async with connect(base.replace("http", "ws") + "/ws", max_size=None) as ws:
            await ws.send(json.dumps({"type": "reset", "data": reset}))
            assert json.loads(await ws.recv())["type"] == "observation"
            for body in bodies:
                if len(body) > 60_000:
                    continue  # over the WebSocket frame limit: the connection would close, by design
                action = body[len('{"action": '):-1]
                await ws.send('{"type": "step", "data": ' + action + "}")
                answer = json.loads(await ws.recv())
                assert answer["type"] in ("error", "observation"), answer
                await ws.send(json.dumps({"type": "step", "data": good}))
                answer = json.loads(await ws.recv())
                if answer["type"] == "error":  # the episode ended: a new one plays
                    await ws.send(json.dumps({"type": "reset", "data": reset}))
                    await ws.recv()
                    await ws.send(json.dumps({"type": "step", "data": good}))
                    answer = json.loads(await ws.recv())
                assert answer["type"] == "observation", (body[:80], answer)
    asyncio.run(run())


def test_hostile_bodies_get_a_4xx_never_a_500_and_the_session_plays_on(url):
    _hostile_http(url, BARGAIN_BODIES, {"seed": 3}, {"action": {"kind": "BUY", "price": 5.0}})
    _hostile_ws(url, BARGAIN_BODIES, {"seed": 3}, {"kind": "BUY", "price": 5.0})


def test_hostile_market_bodies_get_a_4xx_or_a_refusal_never_a_500(market_url):
    reset = {"seed": 5, "task": "market_round"}
    _hostile_http(market_url, MARKET_BODIES, reset, {"action": {"move": {"action": "wait"}}})
    _hostile_ws(market_url, MARKET_BODIES, reset, {"move": {"action": "wait"}})


def test_one_client_cannot_take_every_session():
    """A client at its share is refused (HTTP 429; a WebSocket is told why and closed) while the
    server has room, and another client still gets a session."""
    from fastapi.testclient import TestClient
    app = build_app("bargain", max_sessions=8, idle_timeout_s=300, per_client=3)
    greedy, other = TestClient(app, client=("10.0.0.1", 1)), TestClient(app, client=("10.0.0.2", 1))
    held = [greedy.post("/sessions") for _ in range(2)]
    with greedy.websocket_connect("/ws") as ws:  # the third: a WebSocket counts with the HTTP sessions
        ws.send_text(json.dumps({"type": "reset", "data": {}}))
        assert json.loads(ws.receive_text())["type"] == "observation"
        refused = greedy.post("/sessions")
        assert refused.status_code == 429 and "per-client limit" in refused.text
        with greedy.websocket_connect("/ws") as extra:
            assert json.loads(extra.receive_text())["data"]["code"] == "CAPACITY_REACHED"
        assert all(r.status_code == 201 for r in held)
        mine = other.post("/sessions")
        assert mine.status_code == 201
        assert other.post(f"/sessions/{mine.json()['session_id']}/reset", json={"seed": 1}).status_code == 200
    assert greedy.post("/sessions").status_code == 201, "closing the WebSocket gave the client its share back"
    greedy.delete(f"/sessions/{held[0].json()['session_id']}")
    assert greedy.post("/sessions").status_code == 201


def test_the_per_client_limit_defaults_below_the_cap_and_is_an_option():
    from serving.app import default_per_client, main
    assert default_per_client(256) == 32 and default_per_client(4) == 1
    with pytest.raises(SystemExit):
        main(["--max-sessions", "4", "--per-client-sessions", "5"])
