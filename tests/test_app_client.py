"""The Space served on a local port and driven through ``gradio_client``, the way API users call it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from gradio_client import Client

from env.market import make_policy, play_market
from space.bargain import BargainSessions
from space.market import from_one
from tests.test_space_market import expert_person

ENDPOINTS = {"/list_scenarios", "/start_game", "/send_reply", "/game_state", "/play_episode", "/evaluate_policy",
             "/read_artifact", "/list_artifacts", "/market_start", "/market_act", "/market_state", "/market_play",
             "/market_evaluate", "/market_schema"}


@pytest.fixture(scope="module")
def url(space_url):
    return space_url


@pytest.fixture(scope="module")
def client(url):
    return Client(url, verbose=False)


def person(state: dict, k: int) -> tuple[str, float | None, str]:
    """A deterministic person: rising offers as buyer, falling asks as seller, accepting a good one."""
    if state["you"] == "buyer":
        if state.get("their_offer") and state["their_offer"] <= state["budget"] * 0.8:
            return "accept", None, "deal"
        return "offer", round(state["budget"] * (0.5 + 0.07 * k), 2), f"my offer #{k}"
    return "offer", round(state["cost"] * (1.8 - 0.12 * k), 2), f"my ask #{k}"


def play_remote(client: Client, buyer: str, seller: str, product: int, seed: int) -> dict:
    state = client.predict(buyer=buyer, seller=seller, product=product, seed=seed, api_name="/start_game")
    k = 0
    while not state["done"]:
        action, price, talk = person(state, k)
        state = client.predict(session_id=state["session_id"], action=action, price=price or 0.0, talk=talk,
                               api_name="/send_reply")
        k += 1
    return state


def play_local(buyer: str, seller: str, product: int, seed: int) -> dict:
    store = BargainSessions()
    state = store.start(buyer=buyer, seller=seller, product=product, seed=seed)
    k = 0
    while not state["done"]:
        action, price, talk = person(state, k)
        state = store.reply(state["session_id"], action, price, talk)
        k += 1
    return state


def test_every_endpoint_is_named_and_documented(client):
    info = client.view_api(print_info=False, return_format="dict")
    assert ENDPOINTS <= set(info["named_endpoints"])


def test_a_full_game_as_buyer_and_as_seller(client):
    for buyer, seller in (("human", "boulware"), ("expert", "human")):
        state = play_remote(client, buyer, seller, 3, 21)
        assert state["done"] and -1 <= state["outcome"]["reward"] <= 1
        assert state["transcript"] == play_local(buyer, seller, 3, 21)["transcript"]
        assert client.predict(session_id=state["session_id"], api_name="/game_state")["done"]


def test_agent_endpoints(client):
    scenarios = client.predict(source="builtin", split="test", api_name="/list_scenarios")
    assert scenarios and {"index", "title", "list_price"} <= set(scenarios[0]) and "cost" not in scenarios[0]
    game = client.predict(buyer="expert", seller="insulting", product=1, seed=2, api_name="/play_episode")
    assert game["done"] and game["transcript"]["turns"] and "explanation" in game["outcome"]
    row = client.predict(buyer="expert", seller="mix", episodes=70, seed=1_000_000, api_name="/evaluate_policy")
    assert row["episodes"] == 72 * 7 and row["reward_ci95"][0] <= row["reward_mean"] <= row["reward_ci95"][1]
    assert client.predict(name="eval_results.json", api_name="/read_artifact")["provenance"]["command"]
    names = [r["file"] for r in client.predict(api_name="/list_artifacts")]
    assert "eval_results.json" in names and any(n.startswith("checkpoints/") for n in names)


def test_the_trained_model_plays_through_the_api(client):
    game = client.predict(buyer="model", seller="neutral", product=0, seed=3, api_name="/play_episode")
    assert game["done"] and game["buyer"] == "model"
    assert all(t["role"] in ("buyer", "seller") for t in game["transcript"]["turns"])


@pytest.mark.parametrize("endpoint, kwargs, match", [
    ("/start_game", {"buyer": "human", "seller": "nobody"}, "unknown seller"),
    ("/start_game", {"seed": -5}, "seed must be"),
    ("/send_reply", {"session_id": "not-a-session", "action": "offer", "price": 5.0}, "unknown session"),
    ("/game_state", {"session_id": "x" * 5000}, "unknown session"),
    ("/evaluate_policy", {"buyer": "expert", "episodes": 10**9}, "episodes must be"),
    ("/read_artifact", {"name": "../README.md"}, "not inside artifacts"),
    ("/list_scenarios", {"source": "nowhere"}, "unknown or unavailable"),
])
def test_bad_input_is_a_clear_error_and_the_app_keeps_serving(client, endpoint, kwargs, match):
    with pytest.raises(Exception, match=match):
        client.predict(**kwargs, api_name=endpoint)
    assert client.predict(api_name="/list_artifacts")


def test_a_megabyte_reply_is_refused_and_the_game_goes_on(client):
    state = client.predict(buyer="human", seller="neutral", product=0, seed=1, api_name="/start_game")
    with pytest.raises(Exception, match="too long"):
        client.predict(session_id=state["session_id"], action="offer", price=10.0, talk="x" * 1_000_000,
                       api_name="/send_reply")
    after = client.predict(session_id=state["session_id"], api_name="/game_state")
    assert after == state


def test_two_interleaved_sessions_do_not_interfere(url):
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    sa = a.predict(buyer="human", seller="conceder", product=4, seed=8, api_name="/start_game")
    sb = b.predict(buyer="human", seller="conceder", product=4, seed=8, api_name="/start_game")
    assert sa["session_id"] != sb["session_id"] and sa["messages"] == sb["messages"]
    sa = a.predict(session_id=sa["session_id"], action="offer", price=1.0, talk="a", api_name="/send_reply")
    sb_now = b.predict(session_id=sb["session_id"], api_name="/game_state")
    assert sb_now == sb, "a move in one session changed the other"
    sb = b.predict(session_id=sb["session_id"], action="quit", talk="b", api_name="/send_reply")
    assert sb["done"] and not a.predict(session_id=sa["session_id"], api_name="/game_state")["done"]


@pytest.mark.slow
def test_load_50_concurrent_sessions(url):
    """50 API clients play whole games at once on loopback: no errors, and every transcript equals
    the same game played alone in-process."""
    sellers = ["neutral", "boulware", "conceder", "tit_for_tat", "begging", "insulting", "unyielding"]
    jobs = [("human", sellers[i % 7], i % 40, 100 + i) for i in range(50)]

    # Connecting (each client fetches the API schema, with gradio_client's 5 s read timeout) is set-up, not the
    # load under test: the clients connect one by one, then the 50 games are played at once.
    clients = [Client(url, verbose=False) for _ in jobs]
    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(lambda c, job: play_remote(c, *job), clients, jobs))
    assert len({r["session_id"] for r in results}) == 50
    for job, state in zip(jobs, results):
        assert state["transcript"] == play_local(*job)["transcript"], f"session {job} was disturbed"


def test_the_same_functions_are_mcp_tools(url):
    import httpx
    tools = {t["name"] for t in httpx.get(f"{url}gradio_api/mcp/schema", timeout=30).json()}
    assert {e.lstrip("/") for e in ENDPOINTS} <= tools


def test_the_pages_client_example_works_when_copied(url, capsys):
    import app
    code = app.api_example(url).strip().removeprefix("```python").removesuffix("```")
    exec(compile(code, "api_example", "exec"), {})
    out = capsys.readouterr().out
    assert "Buyer budget" in out and "reward" in out and "bought 20 GPU-hours" in out


class RemoteMarket:
    """The market API through ``gradio_client``, shaped like ``MarketSessions`` (start/act)."""

    def __init__(self, client: Client):
        self.client = client

    def start(self, **kwargs) -> dict:
        return self.client.predict(**kwargs, api_name="/market_start")

    def act(self, session_id: str, action: str) -> dict:
        return self.client.predict(session_id=session_id, action=action, api_name="/market_act")


def test_market_games_through_the_api_equal_the_same_games_in_process(client):
    for task, seed in (("single_trade", 2), ("coalition_market", 7)):
        state, seen = expert_person(RemoteMarket(client), task, seed)
        assert state["steps"] == from_one(play_market(task, seed, make_policy("expert")).transcript)
        assert "labs_info" not in seen[0] and "observation" in seen[0]
        assert client.predict(session_id=state["session_id"], api_name="/market_state")["done"]
    game = client.predict(task="market_round", policy="greedy_bidder", seed=9, api_name="/market_play")
    assert game["steps"] == from_one(play_market("market_round", 9, make_policy("greedy_bidder")).transcript)
    row = client.predict(policy="expert", task="coalition_market", episodes=20, api_name="/market_evaluate")
    assert row["episodes"] == 20 and row["seeds"] == "1000000..1000019"
    assert client.predict(api_name="/market_schema")["schema"]["oneOf"]


@pytest.mark.slow
def test_concurrent_market_sessions_do_not_interfere(url):
    jobs = [("market_round", 300 + i) for i in range(12)]

    clients = [Client(url, verbose=False) for _ in jobs]  # connected one by one: set-up, not the load under test
    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(lambda c, job: expert_person(RemoteMarket(c), *job)[0], clients, jobs))
    assert len({r["session_id"] for r in results}) == 12
    for (task, seed), state in zip(jobs, results):
        assert state["steps"] == from_one(play_market(task, seed, make_policy("expert")).transcript)


@pytest.mark.parametrize("endpoint, kwargs, match", [
    ("/market_start", {"task": "auction"}, "unknown task"),
    ("/market_act", {"session_id": "nope", "action": '{"action": "wait"}'}, "unknown session"),
    ("/market_evaluate", {"policy": "human"}, "unknown policy"),
    ("/market_play", {"policy": "human"}, "agents only"),
])
def test_bad_market_input_is_a_clear_error(client, endpoint, kwargs, match):
    with pytest.raises(Exception, match=match):
        client.predict(**kwargs, api_name=endpoint)


def test_an_unreadable_market_action_is_refused_and_the_game_goes_on(client):
    state = client.predict(task="single_trade", policy="human", seed=4, api_name="/market_start")
    with pytest.raises(Exception, match="not an action of the schema"):
        client.predict(session_id=state["session_id"], action="buy everything!", api_name="/market_act")
    after = client.predict(session_id=state["session_id"], action='{"action": "wait"}', api_name="/market_act")
    assert after["your_steps"] == [{**after["your_steps"][0], "code": "ok"}] and len(after["your_steps"]) == 1


def test_every_endpoint_and_parameter_is_described_in_whole_sentences():
    import gradio as gr

    import app
    import inspect
    for fn in app.API:
        description, params, _ = gr.utils.get_function_description(fn)
        assert description.endswith(".") and len(description) > 40, fn.__name__
        injected = {n for n, p in inspect.signature(fn).parameters.items() if p.annotation is gr.Request}
        assert not injected & {name for name, *_ in gr.utils.get_function_params(fn)}, fn.__name__
        for name, text in params.items():
            if name in injected:  # Gradio's request (the client's address for its share of games): not an API input
                assert f"`{name}`" not in app.api_entry(fn), fn.__name__
                continue
            assert text and text.rstrip().endswith((".", ")")), f"{fn.__name__}({name}): {text!r}"
        assert description in app.api_entry(fn)


def test_an_mcp_tool_answers_in_json(url):
    import asyncio
    import json

    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def call():
        async with streamablehttp_client(f"{url}gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {t.name: t for t in (await session.list_tools()).tools}
                assert tools["send_reply"].inputSchema["properties"]["action"]["description"]
                result = await session.call_tool("play_episode", {"buyer": "expert", "seller": "neutral",
                                                                  "product": 2, "seed": 7})
                return [c.text for c in result.content if c.type == "text"]
    texts = asyncio.run(call())
    game = json.loads(texts[0])
    assert game["done"] is True and game["seed"] == 7 and "reward" in game["outcome"]
