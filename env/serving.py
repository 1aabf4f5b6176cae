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

    python -m env.serving --port 8000                      # loopback by default
    python -m env.serving --env market --port 8001
    python -m env.serving --host 0.0.0.0 --max-sessions 512 --idle-timeout 600
"""

from __future__ import annotations

import argparse
import json
import random
from typing import Any, Literal, Optional

from fastapi import FastAPI, HTTPException, Request, WebSocketDisconnect
from fastapi.responses import JSONResponse
from openenv.core.env_server import ConcurrencyConfig, Environment, HTTPEnvServer
from openenv.core.env_server.serialization import deserialize_action, serialize_observation
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from env.bargain import DEFAULT_MAX_TURNS, BargainEnv
from env.market.actions import MAX_ACTION_CHARS, Invalid, validate as validate_market
from env.market.env import MarketEnv
from env.market.play import seat_players
from env.market.world import ARCHETYPES, TASKS as MARKET_TASKS
from env.play import player_rngs
from env.players import BUYERS, SELLERS, make_player
from env.protocol import ACTION_KINDS, MAX_REPLY_CHARS, REASONING_MODES, Action as Move, compose_reply
from env.rules import BUYER, OTHER, SELLER
from env.scenarios import get_split, resolve_source

DEFAULT_MAX_SESSIONS = 256
DEFAULT_IDLE_TIMEOUT_S = 300.0
MAX_BODY_BYTES = 64 * 1024


class EpisodeNotStarted(RuntimeError):
    """``step`` before ``reset``, or after the episode ended (HTTP 409)."""


class BadReset(ValueError):
    """Reset options the environment cannot take (HTTP 400)."""


# ---------------------------------------------------------------------- types
class BargainAction(Action):
    """One reply of the served player: either the protocol text an LLM writes (``reply``), or
    a structured move (``kind`` and, for BUY/SELL/DEAL, ``price``) with optional talk."""

    reply: Optional[str] = Field(default=None, max_length=MAX_REPLY_CHARS,
                                 description="a whole reply in the protocol, e.g. 'Talk: hi\\nAction: [BUY] $40'")
    kind: Optional[Literal[ACTION_KINDS]] = Field(default=None, description="BUY, SELL, DEAL, REJECT or QUIT")
    price: Optional[float] = Field(default=None, gt=0, lt=1e9, description="dollars, for BUY, SELL and DEAL")
    talk: str = Field(default="", max_length=1500, description="what the player says (structured moves)")

    @model_validator(mode="after")
    def _one_form(self):
        if (self.reply is None) == (self.kind is None):
            raise PydanticCustomError("action_form", "give either 'reply' (protocol text) or 'kind' (a structured "
                                                     "move), not both or neither")
        if self.kind is not None and (self.kind in ("BUY", "SELL", "DEAL")) != (self.price is not None):
            # a custom error (not ValueError) keeps the 422 body JSON-serializable in openenv's handler
            raise PydanticCustomError("action_price", f"{self.kind} {'needs' if self.price is None else 'takes no'} "
                                                      "price")
        return self

    def text(self, mode: str) -> str:
        if self.reply is not None:
            return self.reply
        return compose_reply("", " ".join(self.talk.split()), Move(self.kind, self.price), mode)


class BargainObservation(Observation):
    """The served player's view when it is their turn (or the episode's end)."""

    role: str = Field(default=BUYER, description="buyer or seller: the served player's role")
    title: str = ""
    category: str = ""
    description: str = ""
    list_price: float = 0.0
    private_value: float = Field(default=0.0, description="your budget (buyer) or cost (seller); private")
    turn: int = 0
    max_turns: int = DEFAULT_MAX_TURNS
    my_offer: Optional[float] = None
    their_offer: Optional[float] = None
    messages: list[dict] = Field(default_factory=list, description=(
        "public messages since your previous observation (your reply as delivered, then the other side's), "
        "each with role, talk, action, note; a chat client appends them to its history"))
    history_len: int = Field(default=0, description="public messages in the whole episode so far")
    last_error: Optional[str] = Field(default=None, description="why your last reply was refused (reason code)")
    end_reason: Optional[str] = None
    metrics: Optional[dict] = Field(default=None, description="the episode's metrics, once it has ended")


class BargainState(State):
    """Operator view of a session: the episode's identity and progress, no private values."""

    scenario_id: Optional[str] = None
    seed: Optional[int] = None
    role: str = BUYER
    opponent: str = "neutral"
    turn: int = 0
    done: bool = False
    end_reason: Optional[str] = None
    reward: Optional[float] = None


class InlineSteps:
    """Run ``reset``/``step`` on the server's event loop instead of a per-session thread: they are
    short, pure CPU (tens of microseconds), so a thread hand-off would cost more than the work."""

    async def reset_async(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any):
        return self.reset(seed=seed, episode_id=episode_id, **kwargs)

    async def step_async(self, action, timeout_s: Optional[float] = None, **kwargs: Any):
        return self.step(action, timeout_s=timeout_s, **kwargs)


# ---------------------------------------------------------------------- environment
class BargainEnvironment(InlineSteps, Environment[BargainAction, BargainObservation, BargainState]):
    """``BargainEnv`` behind OpenEnv's ``Environment`` interface, one scripted opponent per episode."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self.env = BargainEnv()
        self.opponent = None
        self._info = {}
        self.role, self.mode, self.last_error, self._steps, self._seen = BUYER, "option_a", None, 0, 0

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, source: str = "builtin",
              split: str = "test", product: Optional[int] = None, opponent: Optional[str] = None,
              role: str = BUYER, reasoning_mode: str = "option_a", max_turns: int = DEFAULT_MAX_TURNS,
              **_: Any) -> BargainObservation:
        """Start an episode: ``product`` indexes the split (drawn from the seed when None)."""
        if role not in (BUYER, SELLER):
            raise BadReset(f"role must be buyer or seller, got {role!r}")
        opponent = opponent or ("neutral" if role == BUYER else "expert")
        table = SELLERS if role == BUYER else BUYERS
        if opponent not in table:
            raise BadReset(f"unknown {OTHER[role]} {opponent!r}; choose from {', '.join(table)}")
        if reasoning_mode not in REASONING_MODES:
            raise BadReset(f"reasoning_mode must be one of {REASONING_MODES}")
        if source not in ("builtin", "amazon") or resolve_source(source) != source:
            raise BadReset(f"source must be builtin or amazon (when present), got {source!r}")
        if not isinstance(max_turns, int) or not 1 <= max_turns <= 20:
            raise BadReset("max_turns must be a whole number from 1 to 20")
        if split not in ("train", "test", "all"):
            raise BadReset(f"split must be train, test or all, got {split!r}")
        seed = 0 if seed is None else seed
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise BadReset(f"seed must be a non-negative whole number, got {seed!r}")
        scenarios = get_split(source, split)
        if product is None:
            product = random.Random(seed).randrange(len(scenarios))
        if not isinstance(product, int) or not 0 <= product < len(scenarios):
            raise BadReset(f"product must be 0..{len(scenarios) - 1} for the {split} split of {source}")
        scenario = scenarios[product]
        if self.env.max_turns != max_turns:
            self.env = BargainEnv(max_turns)
        self.env.reset(scenario, seed)
        self.role, self.mode, self.last_error, self._steps, self._seen = role, reasoning_mode, None, 0, 0
        self.opponent = make_player(OTHER[role], opponent, reasoning_mode)
        rng_buyer, rng_seller = player_rngs(seed)
        self.opponent.reset(self.env.observe(OTHER[role]), rng_seller if role == BUYER else rng_buyer)
        self._info = {"episode_id": episode_id, "scenario_id": scenario.id, "seed": seed, "role": role,
                      "opponent": opponent}
        self._opponent_moves()
        return self._observe()

    def step(self, action: BargainAction, timeout_s: Optional[float] = None, **_: Any) -> BargainObservation:
        if self.opponent is None:
            raise EpisodeNotStarted("no episode in this session: reset first")
        if self.env.done:
            raise EpisodeNotStarted("the episode is over: reset to start another")
        result = self.env.step(action.text(self.mode))
        self.last_error = result.info.get("error")
        self._steps += 1
        self._opponent_moves()
        return self._observe()

    def _opponent_moves(self) -> None:
        other = OTHER[self.role]
        while not self.env.done and self.env.to_move == other:
            self.env.step(self.opponent.act(self.env.observe(other)))

    def _observe(self) -> BargainObservation:
        env = self.env
        obs = env.observe(self.role)
        done = env.done
        reward = None
        if done:  # the buyer's reward; a served seller is scored by the buyer's loss
            reward = env.reward if self.role == BUYER else -env.reward
        turn = min(env.turn, env.max_turns)
        seen, self._seen = self._seen, len(obs.history)
        return BargainObservation(
            done=done, reward=reward, role=self.role, title=obs.title, category=obs.category,
            description=obs.description, list_price=obs.list_price, private_value=obs.private_value,
            turn=turn, max_turns=obs.max_turns, my_offer=obs.my_offer, their_offer=obs.their_offer,
            messages=[{"role": m.role, "talk": m.talk, "action": m.action.render(), "note": m.note}
                      for m in obs.history[seen:]], history_len=len(obs.history),
            last_error=self.last_error, end_reason=env.end_reason if done else None,
            metrics=env.metrics().to_dict() if done else None)

    @property
    def state(self) -> BargainState:
        """Built on request (not every step): the episode's identity and progress."""
        env, done = self.env, self.env.done
        reward = None if not done else env.reward if self.role == BUYER else -env.reward
        return BargainState(**self._info, step_count=self._steps, turn=min(env.turn, env.max_turns), done=done,
                            end_reason=env.end_reason, reward=reward)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="haggle-bargain", description=(
            "Bilateral price negotiation (RLVR negotiation paper): a buyer with a private budget against a "
            "regulated seller with a private cost; buyer reward clip((budget - price) / |budget - cost|, -1, 1)."),
            version="1")


# ---------------------------------------------------------------------- the GPU market
class MarketAction(Action):
    """One action of the served lab (lab 0): the JSON text a model writes (``reply``: anything that
    is not an action is refused by the environment with a reason code and the invalid-action
    penalty, like any agent's), or the action object itself (``move``: checked against the action
    schema here, so a malformed one is a 422 and never reaches the game)."""

    reply: Optional[str] = Field(default=None, max_length=MAX_ACTION_CHARS,
                                 description='JSON text, e.g. \'{"action": "buy_spot", "hours": 20}\'')
    move: Optional[dict] = Field(default=None, description="an action object of the schema (GET /schema, "
                                                           "env.market.ACTION_SCHEMA)")

    @model_validator(mode="after")
    def _one_form(self):
        if (self.reply is None) == (self.move is None):
            raise PydanticCustomError("action_form", "give either 'reply' (JSON text) or 'move' (an action "
                                                     "object), not both or neither")
        if self.move is not None:
            checked = validate_market(self.move)
            if isinstance(checked, Invalid):
                raise PydanticCustomError("market_action", "{code}: {detail}",
                                          {"code": checked.code, "detail": checked.detail})
        return self


class MarketObservation(Observation):
    """The served lab's view when it is to act (or at the episode's end). ``reward`` is the dense
    reward lab 0 earned since its previous action (its own action and what the other labs did in
    between); the rewards of an episode add up to its total."""

    view: dict = Field(default_factory=dict, description=(
        "the lab's own view (MarketEnv.observe): money, jobs, blocks, the public market, offers and coalitions "
        "involving it, and the events delivered since its previous view"))
    last: Optional[dict] = Field(default=None, description="the result of your previous action: ok, code, detail")
    total_reward: float = Field(default=0.0, description="lab 0's reward so far in this episode")
    outcome: Optional[dict] = Field(default=None, description="lab 0's reward terms and outcome, once it has ended")


class MarketState(State):
    """Operator view of a market session: identity and progress, nothing private of any lab."""

    task: Optional[str] = None
    seed: Optional[int] = None
    counterparts: Optional[str] = None
    round: int = 0
    done: bool = False
    total_reward: float = 0.0


class MarketEnvironment(InlineSteps, Environment[MarketAction, MarketObservation, MarketState]):
    """``MarketEnv`` behind OpenEnv: the client plays lab 0; the other labs are the scripted
    counterparts (the world's archetypes, or one chosen at reset), who act inside ``step``."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self.env = MarketEnv()
        self.players: list = []
        self._info: dict = {}
        self._steps, self._total = 0, 0.0

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, task: str = "single_trade",
              counterparts: Optional[str] = None, **_: Any) -> MarketObservation:
        if task not in MARKET_TASKS:
            raise BadReset(f"unknown task {task!r}; choose from {', '.join(MARKET_TASKS)}")
        if counterparts is not None and counterparts not in ARCHETYPES:
            raise BadReset(f"counterparts must be one of {', '.join(ARCHETYPES)} (or absent: the world's)")
        seed = 0 if seed is None else seed
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise BadReset(f"seed must be a non-negative whole number, got {seed!r}")
        self.env.reset(task, seed)
        self.players = seat_players(self.env, None, counterparts)
        self._info = {"episode_id": episode_id, "task": task, "seed": seed, "counterparts": counterparts}
        self._steps, self._total = 0, 0.0
        return self._observe(None, self._others())

    def step(self, action: MarketAction, timeout_s: Optional[float] = None, **_: Any) -> MarketObservation:
        if not self.players:
            raise EpisodeNotStarted("no episode in this session: reset first")
        if self.env.done:
            raise EpisodeNotStarted("the episode is over: reset to start another")
        result = self.env.step(action.reply if action.reply is not None else action.move)
        self._steps += 1
        reward = result.rewards.get(0, 0.0) + self._others()
        return self._observe(result, reward)

    def _others(self) -> float:
        """The scripted labs act until lab 0 is to move; returns what that earned or cost lab 0."""
        env, reward = self.env, 0.0
        while not env.done and env.to_move != 0:
            lab = env.to_move
            reward += env.step(self.players[lab].act(env.observe(lab))).rewards.get(0, 0.0)
        return reward

    def _observe(self, result, reward: float) -> MarketObservation:
        env = self.env
        self._total += reward
        done = env.done
        return MarketObservation(
            done=done, reward=reward, view=env.observe(0), total_reward=self._total,
            last=None if result is None else {"ok": result.ok, "code": result.code, "detail": result.detail},
            outcome=env.outcome(0) if done else None)

    @property
    def state(self) -> MarketState:
        env = self.env
        return MarketState(**self._info, step_count=self._steps, round=env.round if env.world else 0,
                           done=bool(env.world) and env.done, total_reward=self._total)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="haggle-market", description=(
            "The scarce-GPU market: AI labs with private budgets and jobs trade GPU capacity, pitch to a judge, "
            "form coalitions and weather shocks; the client plays lab 0 with JSON actions; dense reward whose "
            "terms sum to lab 0's economic outcome over its total job value."), version="1")


class EchoAction(Action):
    message: str = Field(default="", max_length=MAX_REPLY_CHARS)


class EchoObservation(Observation):
    message: str = ""


class EchoEnvironment(InlineSteps, Environment[EchoAction, EchoObservation, State]):
    """The trivial environment served the same way (inline steps too): the framework's ceiling."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = State()

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **_: Any) -> EchoObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        return EchoObservation(message="")

    def step(self, action: EchoAction, timeout_s: Optional[float] = None, **_: Any) -> EchoObservation:
        self._state.step_count += 1
        return EchoObservation(message=action.message)

    @property
    def state(self) -> State:
        return self._state


ENVIRONMENTS = {"bargain": (BargainEnvironment, BargainAction, BargainObservation),
                "market": (MarketEnvironment, MarketAction, MarketObservation),
                "echo": (EchoEnvironment, EchoAction, EchoObservation)}


# ---------------------------------------------------------------------- app
def build_app(name: str | tuple = "bargain", max_sessions: int = DEFAULT_MAX_SESSIONS,
              idle_timeout_s: Optional[float] = DEFAULT_IDLE_TIMEOUT_S, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The FastAPI app serving environment ``name`` (``bargain``, ``market`` or ``echo``), or any
    ``(environment factory, action class, observation class)`` served the same way."""
    if isinstance(name, tuple):
        (factory, action_cls, obs_cls), name = name, name[0].__name__
    elif name in ENVIRONMENTS:
        factory, action_cls, obs_cls = ENVIRONMENTS[name]
    else:
        raise ValueError(f"unknown environment {name!r}; choose from {', '.join(ENVIRONMENTS)}")
    app = FastAPI(title=f"Haggle OpenEnv server: {name}", docs_url="/docs")
    server = HTTPEnvServer(factory, action_cls, obs_cls,
                           concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                                session_timeout=idle_timeout_s))
    server.register_routes(app)
    app.add_middleware(QuietDisconnects)
    _add_limits(app, max_body_bytes)
    _add_http_sessions(app, server, action_cls)
    app.state.openenv_server = server
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


def _add_limits(app: FastAPI, max_body_bytes: int) -> None:
    @app.middleware("http")
    async def body_limit(request: Request, call_next):
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_body_bytes:
            return JSONResponse({"detail": f"request body of {int(length):,} bytes is over the limit of "
                                           f"{max_body_bytes:,}"}, status_code=413)
        if length is None and request.method in ("POST", "PUT", "PATCH"):
            body = await request.body()  # chunked upload: measure what came
            if len(body) > max_body_bytes:
                return JSONResponse({"detail": f"request body over the limit of {max_body_bytes:,} bytes"},
                                    status_code=413)
        return await call_next(request)

    @app.exception_handler(EpisodeNotStarted)
    async def not_started(_request: Request, exc: EpisodeNotStarted):
        return JSONResponse({"detail": str(exc)}, status_code=409)

    @app.exception_handler(BadReset)
    async def bad_reset(_request: Request, exc: BadReset):
        return JSONResponse({"detail": str(exc)}, status_code=400)


def _add_http_sessions(app: FastAPI, server: HTTPEnvServer, action_cls) -> None:
    """Stateful HTTP: the WebSocket sessions' machinery (cap, idle reaper) behind plain requests."""

    def session(session_id: str):
        env = server._sessions.get(session_id)
        if env is None:
            raise HTTPException(404, f"unknown session {session_id[:64]!r}: never created, closed, or reaped after "
                                     f"being idle; POST /sessions for a new one")
        return env

    @app.post("/sessions", status_code=201, tags=["Sessions"], summary="Open a session (its own environment)")
    async def open_session():
        from openenv.core.env_server.exceptions import SessionCapacityError  # noqa: PLC0415
        try:
            session_id, _ = await server._create_session()
        except SessionCapacityError as exc:
            raise HTTPException(503, f"at capacity: {exc.active_sessions} of {exc.max_sessions} sessions in use; "
                                     "close one or retry later") from None
        return {"session_id": session_id}

    @app.post("/sessions/{session_id}/reset", tags=["Sessions"], summary="Reset the session's environment")
    async def session_reset(session_id: str, request: Request):
        env = session(session_id)
        body = await _json(request)
        obs = await server._run_in_session_executor(session_id, env.reset, **body)
        server._update_session_activity(session_id)
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
        obs = await server._run_in_session_executor(session_id, env.step, action)
        server._update_session_activity(session_id, increment_step=True)
        return serialize_observation(obs)

    @app.get("/sessions/{session_id}/state", tags=["Sessions"], summary="The session's state")
    async def session_state(session_id: str):
        return session(session_id).state.model_dump()

    @app.delete("/sessions/{session_id}", tags=["Sessions"], summary="Close a session")
    async def close_session(session_id: str):
        session(session_id)
        await server._destroy_session(session_id)
        return {"closed": session_id}


async def _json(request: Request) -> dict:
    raw = await request.body()
    try:
        body = json.loads(raw or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HTTPException(400, f"malformed JSON: {exc}") from None
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
    ap.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES)
    args = ap.parse_args(argv)
    if args.max_sessions < 1 or args.idle_timeout <= 0 or args.max_body_bytes < 1024:
        ap.error("--max-sessions must be >= 1, --idle-timeout > 0, --max-body-bytes >= 1024")
    serve(build_app(args.env, args.max_sessions, args.idle_timeout, args.max_body_bytes), args.host, args.port,
          args.max_body_bytes)


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, max_body_bytes: int = MAX_BODY_BYTES) -> None:
    """Run ``app`` with uvicorn the way ``python -m env.serving`` does (blocks)."""
    import uvicorn  # noqa: PLC0415

    # No per-message deflate: observations are a few hundred bytes, compressing them costs more than it saves.
    uvicorn.run(app, host=host, port=port, log_level="warning", ws_max_size=max_body_bytes,
                ws_per_message_deflate=False)


if __name__ == "__main__":
    main()
