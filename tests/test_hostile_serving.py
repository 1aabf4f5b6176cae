"""Hostile input, round four, at the servers' doors: each test failed on the code before its fix.

Out-of-range numbers and reset options that used to end in an HTTP 500, the per-client share through
``X-Forwarded-For`` and through MCP session creation, and WebSocket messages that are JSON but not an
object."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from serving.app import build_app, uvicorn_config
from tests.conftest import free_port

BARGAIN_RESETS = [{"seed": 3}, {"self": 1}, {"opponent": ["boulware"]}, {"episode_id": 7}, {"seed": "7"},
                  {"role": {"a": 1}}, {"product": [1]}, {"max_turns": "x"}, {"source": 5}, {"oponent": "neutral"}]
MARKET_RESETS = [{"seed": 5, "task": "market_round"}, {"self": 1}, {"task": ["single_trade"]}, {"episode_id": 7},
                 {"counterparts": {"x": 1}}]
OUT_OF_RANGE = {  # pydantic reads 1e999 as infinity; its 422 answer then could not be written (a 500)
    "bargain": ['{"action": {"kind": "BUY", "price": -1e999}}', '{"action": {"kind": "BUY", "price": 1e999}}',
                '{"seed": 1e999}', "1e999", "-1e999", '{"action": {"kind": "BUY", "price": 1E400}}'],
    "market": ['{"action": {"move": {"action": "buy_spot", "hours": 1e999}}}',
               '{"action": {"move": {"action": "pitch", "to": "lab1", "text": "hi", '
               '"ask": {"job": "j0.0", "block": "b2", "hours": -1e999, "price": 40}}}}', '{"seed": 1e999}', "1e999"],
}


@pytest.mark.parametrize("game, resets", [("bargain", BARGAIN_RESETS), ("market", MARKET_RESETS)])
def test_no_body_answers_500_on_any_route(game, resets):
    client = TestClient(build_app(game, max_sessions=8, per_client=8), raise_server_exceptions=False)
    sid = client.post("/sessions").json()["session_id"]
    for reset in resets:
        for path in (f"/sessions/{sid}/reset", "/reset"):
            r = client.post(path, json=reset)
            assert r.status_code in (200, 400, 422), (path, reset, r.status_code, r.text[:200])
            if r.status_code == 400:  # (422: openenv's own model of /reset refused a type first)
                assert "reset options refused" in r.json()["detail"], r.text
        state = client.get(f"/sessions/{sid}/state")
        assert state.status_code == 200, (reset, state.text[:200])
    for body in OUT_OF_RANGE[game]:
        for path in (f"/sessions/{sid}/step", f"/sessions/{sid}/reset", "/step", "/reset"):
            r = client.post(path, content=body, headers={"content-type": "application/json"})
            assert r.status_code == 400 and "out of range" in r.json()["detail"], (path, body, r.text[:200])
    assert client.post(f"/sessions/{sid}/reset", json=resets[0]).status_code == 200


def test_a_bad_reset_on_a_websocket_is_an_error_and_the_session_plays_on():
    client = TestClient(build_app("bargain", max_sessions=4))
    with client.websocket_connect("/ws") as ws:
        for data in [r for r in BARGAIN_RESETS[1:] if r != {"seed": "7"}]:  # (a seed in a string is read)
            ws.send_text(json.dumps({"type": "reset", "data": data}))
            answer = json.loads(ws.receive_text())
            assert answer["type"] == "error" and "reset options refused" in answer["data"]["message"], answer
        ws.send_text(json.dumps({"type": "reset", "data": {"seed": 1}}))
        assert json.loads(ws.receive_text())["type"] == "observation"


@pytest.mark.parametrize("frame", ["[]", "1", '"reset"', "null", "true", "[{\"type\": \"reset\"}]", "1e999"])
def test_a_websocket_message_that_is_not_an_object_keeps_the_session(frame):
    client = TestClient(build_app("bargain", max_sessions=4))
    with client.websocket_connect("/ws") as ws:
        ws.send_text(json.dumps({"type": "reset", "data": {"seed": 2}}))
        assert json.loads(ws.receive_text())["type"] == "observation"
        ws.send_text(frame)
        answer = json.loads(ws.receive_text())
        assert answer["type"] == "error" and answer["data"]["code"] == "INVALID_JSON", answer
        ws.send_text(json.dumps({"type": "step", "data": {"kind": "BUY", "price": 5.0}}))
        assert json.loads(ws.receive_text())["type"] == "observation"


def _mcp_create(client) -> dict:
    return client.post("/mcp", json={"jsonrpc": "2.0", "method": "openenv/session/create", "params": {},
                                     "id": 1}).json()


def test_mcp_session_creation_counts_in_the_clients_share():
    app = build_app("bargain", max_sessions=16, per_client=3)
    greedy, other = TestClient(app, client=("10.0.0.1", 1)), TestClient(app, client=("10.0.0.2", 1))
    made = [_mcp_create(greedy) for _ in range(3)]
    assert all("session_id" in m.get("result", {}) for m in made), made
    refused = _mcp_create(greedy)
    assert "error" in refused and "per-client limit" in refused["error"]["message"], refused
    assert greedy.post("/sessions").status_code == 429
    with greedy.websocket_connect("/ws") as ws:  # every door: the socket is told why
        assert json.loads(ws.receive_text())["data"]["code"] == "CAPACITY_REACHED"
    assert "session_id" in _mcp_create(other)["result"], "another client still gets its share"
    closed = greedy.post("/mcp", json={"jsonrpc": "2.0", "method": "openenv/session/close",
                                       "params": {"session_id": made[0]["result"]["session_id"]}, "id": 2}).json()
    assert closed["result"]["closed"]
    assert "session_id" in _mcp_create(greedy)["result"], "closing an MCP session gave the client its share back"


class _Served:
    """``python -m serving``'s own uvicorn settings, in a thread."""

    def __init__(self, app, forwarded_allow_ips=None):
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", self.port,
                                                    forwarded_allow_ips=forwarded_allow_ips))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            assert time.time() < deadline, "server did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


def _ws_codes(url: str, headers: dict, n: int) -> list[str]:
    async def run():
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed
        codes, sockets = [], []
        for k in range(n):
            ws = await connect(url.replace("http", "ws") + "/ws", additional_headers=headers(k))
            sockets.append(ws)
            try:
                await ws.send(json.dumps({"type": "reset", "data": {}}))
            except ConnectionClosed:  # refused: the socket was told why, then closed
                pass
            answer = json.loads(await ws.recv())
            codes.append(answer["type"] if answer["type"] == "observation" else answer["data"]["code"])
        for ws in sockets:
            await ws.close()
        return codes
    return asyncio.run(run())


def test_made_up_forwarded_addresses_get_no_extra_sessions():
    """uvicorn trusts X-Forwarded-For from 127.0.0.1 unless told otherwise: a local client named itself
    60 different clients and got 60 extra sessions."""
    spoof = lambda k: {"X-Forwarded-For": f"203.0.113.{k + 1}"}  # noqa: E731
    with _Served(build_app("bargain", max_sessions=32, per_client=2)) as served:
        codes = [httpx.post(f"{served.url}/sessions", headers=spoof(k)).status_code for k in range(6)]
        assert codes == [201, 201, 429, 429, 429, 429], codes
    with _Served(build_app("bargain", max_sessions=32, per_client=2)) as served:
        assert _ws_codes(served.url, spoof, 5) == ["observation"] * 2 + ["CAPACITY_REACHED"] * 3
    # behind a trusted proxy the forwarded address is the client: each gets its own share
    with _Served(build_app("bargain", max_sessions=32, per_client=2), forwarded_allow_ips="127.0.0.1") as served:
        codes = [httpx.post(f"{served.url}/sessions", headers=spoof(k // 2)).status_code for k in range(6)]
        assert codes == [201] * 6, codes
