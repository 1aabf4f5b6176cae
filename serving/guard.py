"""What every request passes before it reaches a game: the body's size, strict JSON, and a
per-client share of the sessions.

Strict JSON: Python's reader takes ``NaN`` and ``Infinity`` (not JSON), lone surrogates such as
``"\\ud800"`` (valid JSON, not encodable text), a 5,000-digit integer (which raises on reading) and
nesting deep enough to exhaust the stack; each of these used to reach the games, or the error
message echoing them, and end in an HTTP 500. Here each is refused first, with a reason: HTTP 400
(413 for size), or an error message on a WebSocket, whose session goes on.

Out-of-range numbers: ``1e999`` is valid JSON that Python reads as infinity; it is refused here too
(pydantic would take it, then fail to write its own 422 answer: an HTTP 500).

A WebSocket message must be a JSON object (``{"type": ..., "data": ...}``); an array, number, string or
``null`` is answered ``INVALID_JSON`` like any bad frame, and the session goes on.

Per-client sessions: one client (by remote address) may hold at most ``per_client`` sessions,
whichever door opened them: ``POST /sessions``, a WebSocket at ``/ws`` or ``/mcp``, or the MCP method
``openenv/session/create``. The guard names the client of every request (``CLIENT``) and the session
server checks the share where every session is made (``serving.openenv_adapter``), so no route can
forget it. The client is the TCP peer: ``X-Forwarded-For`` counts only from proxies named with
``--forwarded-allow-ips`` (by default none), so a client cannot make up addresses to get more.
"""

from __future__ import annotations

import contextvars
import json
import math
from typing import Callable

from openenv.core.env_server.exceptions import SessionCapacityError

MAX_DEPTH = 32  # no action or reset body nests deeper than a few levels
MAX_INT_DIGITS = 20  # a seed (the largest number any body needs) has at most 19


class BadJSON(ValueError):
    """A body or message the server does not take; the message says why."""


def _no_constant(name: str):
    raise BadJSON(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadJSON(f"the number {text[:40]} is out of range")
    return value


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise BadJSON(f"an integer of {len(digits.lstrip('-')):,} digits is too large")
    return int(digits)


def _unique_keys(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise BadJSON("an object repeats a key")
    return obj


def strict_loads(raw: bytes | str):
    """The JSON value of ``raw``, or ``BadJSON``: not UTF-8, malformed, NaN/Infinity, a number out of
    float range (``1e999``), an integer over 20 digits, a repeated key, a lone surrogate, or nesting
    deeper than ``MAX_DEPTH``."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
        value = json.loads(text, parse_constant=_no_constant, parse_int=_bounded_int, parse_float=_finite_float,
                           object_pairs_hook=_unique_keys)
    except BadJSON:
        raise
    except UnicodeDecodeError:
        raise BadJSON("the body is not UTF-8 text") from None
    except RecursionError:
        raise BadJSON(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError included
        raise BadJSON(f"malformed JSON: {str(exc)[:200]}") from None
    _check_value(value)
    return value


def _check_value(value) -> None:
    """Depth and text of a parsed value, without recursion."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BadJSON(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, dict):
            for key, v in item.items():
                _check_text(key)
                stack.append((v, depth + 1))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadJSON("a string holds a lone surrogate (not a character)") from None


# The client of the request being served (set by ``Guard`` for every request and WebSocket).
CLIENT: contextvars.ContextVar[str] = contextvars.ContextVar("haggle_client", default="unknown")


class ClientShareError(SessionCapacityError):
    """A client asked for a session beyond its share (HTTP 429; ``CAPACITY_REACHED`` on a socket)."""


class ClientSessions:
    """Who holds which sessions: at most ``per_client`` each. ``alive(session_id)`` tells whether a
    session still exists (sessions end by many paths: closed, reaped when idle, a socket gone)."""

    def __init__(self, per_client: int, alive: Callable[[str], bool]):
        self.per_client, self.alive = per_client, alive
        self.sessions: dict[str, set[str]] = {}
        self.pending: dict[str, int] = {}  # sessions being made (a factory may await)

    def held(self, client: str) -> int:
        sessions = self.sessions.get(client, set())
        sessions -= {s for s in sessions if not self.alive(s)}
        return len(sessions) + self.pending.get(client, 0)

    def full(self, client: str) -> bool:
        return self.held(client) >= self.per_client

    def message(self, client: str) -> str:
        return (f"per-client limit: this client holds {self.held(client)} of its {self.per_client} sessions; "
                "close one (DELETE /sessions/{id}, close a WebSocket, or openenv/session/close) or let one go idle")

    def reserve(self, client: str, enforce: bool = True) -> None:
        """Count a session being made for ``client``, or raise ``ClientShareError`` at its share (when
        ``enforce``). No await between the check and the count: two concurrent requests cannot both pass."""
        if enforce and self.full(client):
            raise ClientShareError(self.held(client), self.per_client, self.message(client))
        self.pending[client] = self.pending.get(client, 0) + 1
        if len(self.sessions) > 4 * self.per_client:  # forget clients whose sessions have all ended
            for other in [c for c in self.sessions if c != client and not self.held(c)]:
                del self.sessions[other]

    def settle(self, client: str, session_id: str | None) -> None:
        """The session reserved for ``client`` was made (``session_id``) or failed (None)."""
        left = self.pending[client] - 1
        if left:
            self.pending[client] = left
        else:
            del self.pending[client]
        if session_id is not None:
            self.sessions.setdefault(client, set()).add(session_id)


def client_of(scope) -> str:
    client = scope.get("client")
    return client[0] if client else "unknown"


class Guard:
    """ASGI middleware: names the client of every request (``CLIENT``, for the per-client share);
    checks request bodies (size, strict JSON) and WebSocket messages (strict JSON, an object each)
    before the app sees them."""

    def __init__(self, app, max_body_bytes: int):
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        token = CLIENT.set(client_of(scope))
        try:
            if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
                return await self._http(scope, receive, send)
            if scope["type"] == "websocket":
                return await self._websocket(scope, receive, send)
            return await self.app(scope, receive, send)
        finally:
            CLIENT.reset(token)

    async def _http(self, scope, receive, send):
        length = dict(scope.get("headers", [])).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_body_bytes:
            return await _answer(send, 413, f"request body of {int(length):,} bytes is over the limit of "
                                            f"{self.max_body_bytes:,}")
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return await _answer(send, 413, f"request body over the limit of {self.max_body_bytes:,} bytes")
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body.strip():
            try:
                strict_loads(body)
            except BadJSON as exc:
                return await _answer(send, 400, str(exc))
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _websocket(self, scope, receive, send):
        async def checked():
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                raw = message.get("text")
                if raw is None:
                    raw = message.get("bytes") or b""
                try:
                    if not isinstance(strict_loads(raw), dict):
                        raise BadJSON('a message must be a JSON object, e.g. {"type": "reset", "data": {}}')
                    text = raw if isinstance(raw, str) else raw.decode("utf-8")
                    return {"type": "websocket.receive", "text": text}
                except BadJSON as exc:
                    await send({"type": "websocket.send", "text": json.dumps(
                        {"type": "error", "data": {"message": str(exc), "code": "INVALID_JSON"}})})

        return await self.app(scope, checked, send)


async def _answer(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
