"""Haggle's environments served the way the ecosystem expects: OpenEnv servers.

Built from ``openenv-core``'s own pieces: typed ``Action``/``Observation``/``State`` models,
an ``Environment`` subclass, and ``HTTPEnvServer`` (the server behind ``create_fastapi_app``)
for ``/reset``, ``/step``, ``/state``, ``/schema``, ``/health`` and WebSocket sessions at
``/ws`` (one environment instance per session, a cap on concurrent sessions, idle sessions
reaped after a timeout). Added here: stateful HTTP sessions (``/sessions``), so HTTP clients
get a session too and an unknown session id is a 404; a request-body size limit (413); and
clear 4xx answers for requests the environment cannot take.

The served player is the buyer (or ``role="seller"``); the other side is a scripted player
chosen at reset (the seller mix's personas by default, ``neutral``), who moves inside ``step``,
so every observation is the served player's turn. Observations are the player's own view:
never the other side's private value or reasoning. Each carries only the public messages that
are new since the previous one (built incrementally: the payload does not grow with the episode).

The GPU market (``--env market``) is served the same way: the client plays lab 0 with JSON
actions, the other labs are scripted counterparts acting inside ``step``, and each observation
is lab 0's own view with the dense reward earned since its previous action.

    python -m serving --port 8000                      # loopback by default
    python -m serving --env market --port 8001
    python -m serving --host 0.0.0.0 --max-sessions 512 --idle-timeout 600
"""

from __future__ import annotations

import argparse
import functools
from typing import Optional

from fastapi import FastAPI, HTTPException, Request, WebSocketDisconnect
from fastapi.responses import JSONResponse
from openenv.core.env_server.serialization import deserialize_action, serialize_observation
from pydantic import ValidationError

from serving.bargain import BargainAction, BargainEnvironment, BargainObservation
from serving.base import BadReset, EpisodeNotStarted
from serving.guard import BadJSON, ClientShareError, Guard, strict_loads
from serving.market import MarketAction, MarketEnvironment, MarketObservation
from serving.openenv_adapter import SessionCapacityError, SessionServer

DEFAULT_MAX_SESSIONS = 256
DEFAULT_IDLE_TIMEOUT_S = 300.0
MAX_BODY_BYTES = 64 * 1024

ENVIRONMENTS = {"bargain": (BargainEnvironment, BargainAction, BargainObservation),
                "market": (MarketEnvironment, MarketAction, MarketObservation)}


# ---------------------------------------------------------------------- app
def build_app(name: str | tuple = "bargain", max_sessions: int = DEFAULT_MAX_SESSIONS,
              idle_timeout_s: Optional[float] = DEFAULT_IDLE_TIMEOUT_S, max_body_bytes: int = MAX_BODY_BYTES,
              per_client: int | None = None) -> FastAPI:
    """The FastAPI app serving environment ``name`` (``bargain`` or ``market``), or any
    ``(environment factory, action class, observation class)`` served the same way. One client may
    hold ``per_client`` sessions (default: an eighth of ``max_sessions``, at least one)."""
    per_client = default_per_client(max_sessions) if per_client is None else per_client
    if isinstance(name, tuple):
        (factory, action_cls, obs_cls), name = name, name[0].__name__
    elif name in ENVIRONMENTS:
        factory, action_cls, obs_cls = ENVIRONMENTS[name]
    else:
        raise ValueError(f"unknown environment {name!r}; choose from {', '.join(ENVIRONMENTS)}")
    if not 1 <= per_client <= max_sessions:
        raise ValueError(f"per_client must be from 1 to max_sessions ({max_sessions}), got {per_client}")
    app = FastAPI(title=f"Haggle OpenEnv server: {name}", docs_url="/docs")
    server = SessionServer(factory, action_cls, obs_cls, max_sessions, idle_timeout_s, per_client)
    server.register_routes(app)
    app.add_middleware(QuietDisconnects)
    app.add_middleware(Guard, max_body_bytes=max_body_bytes)
    _add_limits(app)
    _add_http_sessions(app, server, action_cls)
    return app


class QuietDisconnects:
    """A client that closes its WebSocket is not a server error. openenv's endpoint calls
    ``websocket.close()`` after the client has gone, which raises ``WebSocketDisconnect``; without
    this, uvicorn logs a 60-line "Exception in ASGI application" traceback per closed session."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            pass


def _add_limits(app: FastAPI) -> None:
    @app.exception_handler(EpisodeNotStarted)
    async def not_started(_request: Request, exc: EpisodeNotStarted):
        return JSONResponse({"detail": str(exc)}, status_code=409)

    @app.exception_handler(BadReset)
    async def bad_reset(_request: Request, exc: BadReset):
        return JSONResponse({"detail": str(exc)}, status_code=400)


def default_per_client(max_sessions: int) -> int:
    return max(1, max_sessions // 8)


def _add_http_sessions(app: FastAPI, server: SessionServer, action_cls) -> None:
    """Stateful HTTP: the WebSocket sessions' machinery (cap, idle reaper) behind plain requests."""

    def session(session_id: str):
        env = server.get(session_id)
        if env is None:
            raise HTTPException(404, f"unknown session {session_id[:64]!r}: never created, closed, or reaped after "
                                     f"being idle; POST /sessions for a new one")
        return env

    @app.post("/sessions", status_code=201, tags=["Sessions"], summary="Open a session (its own environment)")
    async def open_session():
        try:
            session_id = await server.create()
        except ClientShareError as exc:
            raise HTTPException(429, str(exc)) from None
        except SessionCapacityError as exc:
            raise HTTPException(503, f"at capacity: {exc.active_sessions} of {exc.max_sessions} sessions in use; "
                                     "close one or retry later") from None
        return {"session_id": session_id}

    @app.post("/sessions/{session_id}/reset", tags=["Sessions"], summary="Reset the session's environment")
    async def session_reset(session_id: str, request: Request):
        env = session(session_id)
        body = await _json(request)
        obs = await server.run(session_id, functools.partial(env.reset, **body))
        return serialize_observation(obs)

    @app.post("/sessions/{session_id}/step", tags=["Sessions"], summary="Step the session's environment")
    async def session_step(session_id: str, request: Request):
        env = session(session_id)
        body = await _json(request)
        if not isinstance(body.get("action"), dict):
            raise HTTPException(422, "body must be {\"action\": {...}} (see /schema)")
        try:
            action = deserialize_action(body["action"], action_cls)
        except ValidationError as exc:
            raise HTTPException(422, exc.errors(include_url=False, include_context=False)) from None
        obs = await server.run(session_id, functools.partial(env.step, action), step=True)
        return serialize_observation(obs)

    @app.get("/sessions/{session_id}/state", tags=["Sessions"], summary="The session's state")
    async def session_state(session_id: str):
        return session(session_id).state.model_dump()

    @app.delete("/sessions/{session_id}", tags=["Sessions"], summary="Close a session")
    async def close_session(session_id: str):
        session(session_id)
        await server.close(session_id)
        return {"closed": session_id}


async def _json(request: Request) -> dict:
    raw = await request.body()
    try:
        body = strict_loads(raw or b"{}")
    except BadJSON as exc:
        raise HTTPException(400, str(exc)) from None
    if not isinstance(body, dict):
        raise HTTPException(422, "the body must be a JSON object")
    return body


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve a Haggle environment with OpenEnv (HTTP + WebSocket sessions).")
    ap.add_argument("--env", default="bargain", choices=list(ENVIRONMENTS))
    ap.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS, help="concurrent sessions cap")
    ap.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT_S, help="seconds before an idle "
                                                                                         "session is closed")
    ap.add_argument("--per-client-sessions", type=int, default=None, help="sessions one client (remote address) "
                    "may hold, WebSocket and HTTP together (default: an eighth of --max-sessions)")
    ap.add_argument("--forwarded-allow-ips", default=None, help="comma list of proxy addresses trusted to name "
                    "the client in X-Forwarded-For (uvicorn's option). Default: none, the TCP peer is the client, so "
                    "a client cannot claim other addresses to get more sessions. Behind a proxy, give the proxy's "
                    "address, or every visitor counts as the proxy")
    ap.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES)
    args = ap.parse_args(argv)
    if args.max_sessions < 1 or args.idle_timeout <= 0 or args.max_body_bytes < 1024:
        ap.error("--max-sessions must be >= 1, --idle-timeout > 0, --max-body-bytes >= 1024")
    per_client = default_per_client(args.max_sessions) if args.per_client_sessions is None else args.per_client_sessions
    if not 1 <= per_client <= args.max_sessions:
        ap.error(f"--per-client-sessions must be from 1 to --max-sessions ({args.max_sessions})")
    serve(build_app(args.env, args.max_sessions, args.idle_timeout, args.max_body_bytes, per_client), args.host,
          args.port, args.max_body_bytes, args.forwarded_allow_ips)


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, max_body_bytes: int = MAX_BODY_BYTES,
          forwarded_allow_ips: str | None = None) -> None:
    """Run ``app`` with uvicorn the way ``python -m serving`` does (blocks)."""
    import uvicorn  # noqa: PLC0415

    uvicorn.Server(uvicorn_config(app, host, port, max_body_bytes, forwarded_allow_ips)).run()


def uvicorn_config(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, max_body_bytes: int = MAX_BODY_BYTES,
                   forwarded_allow_ips: str | None = None):
    """How ``serve`` runs uvicorn. ``X-Forwarded-For`` is read only from the proxies in
    ``forwarded_allow_ips`` (uvicorn alone trusts 127.0.0.1, so any local client could name itself
    anything and take another client's share)."""
    import uvicorn  # noqa: PLC0415

    # No per-message deflate: observations are a few hundred bytes, compressing them costs more than it saves.
    return uvicorn.Config(app, host=host, port=port, log_level="warning", ws_max_size=max_body_bytes,
                          ws_per_message_deflate=False, proxy_headers=bool(forwarded_allow_ips),
                          forwarded_allow_ips=forwarded_allow_ips or None)
