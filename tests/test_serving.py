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
from training.tools import HaggleToolEnv
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
    served = Served(build_app("bargain", max_sessions=300, idle_timeout_s=300))
    yield served.url
    served.stop()


@pytest.fixture(scope="module")
def small():
    """Two sessions at most, idle ones reaped after one second."""
    served = Served(build_app("bargain", max_sessions=2, idle_timeout_s=1.0))
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
    ("post", "/step", {"content": b"{not json", "headers": {"content-type": "application/json"}}, 422, "json"),
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
    from env.bargain.scenarios import get_split
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
    served = Served(build_app("market", max_sessions=100, idle_timeout_s=300))
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
