"""The one place that uses openenv-core beyond its public API.

``HTTPEnvServer`` manages WebSocket sessions (one environment each, a cap, an idle reaper) but
offers no public calls to drive those sessions from plain HTTP requests, and no hook where a session
is made. ``SessionServer`` wraps it and reaches into its private methods for exactly that (the
per-client share is checked in the one method every door calls: ``/ws``, ``/mcp``'s socket and its
``openenv/session/create``, and ``POST /sessions``); it was written against
``OPENENV_VERSION``, and a test pins the installed version to it, so an upgrade that could break
these calls fails that test first instead of a request in production.
"""

from __future__ import annotations

from typing import Any, Callable

from openenv.core.env_server import ConcurrencyConfig, HTTPEnvServer
from openenv.core.env_server.exceptions import SessionCapacityError

from serving.guard import CLIENT, ClientSessions

OPENENV_VERSION = "0.3.0"

__all__ = ["OPENENV_VERSION", "SessionServer", "SessionCapacityError"]


class SessionServer:
    """OpenEnv's server for ``factory`` (its routes, its WebSocket sessions), plus session calls for
    stateful HTTP: ``get``, ``create``, ``run``, ``close``."""

    def __init__(self, factory: Callable, action_cls: type, obs_cls: type, max_sessions: int,
                 idle_timeout_s: float | None, per_client: int | None = None):
        self.http = HTTPEnvServer(factory, action_cls, obs_cls,
                                  concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                                       session_timeout=idle_timeout_s))
        self.clients = ClientSessions(per_client or max_sessions, lambda session_id: self.get(session_id) is not None)
        make_session = self.http._create_session

        async def create_for_client():
            """openenv's own session maker, within the share of the client being served."""
            client = CLIENT.get()
            # raises ClientShareError, which every door answers as at capacity; a full server refuses
            # everyone alike (openenv's own error)
            self.clients.reserve(client, enforce=not self.full())
            session_id = None
            try:
                session_id, env = await make_session()
                return session_id, env
            finally:
                self.clients.settle(client, session_id)

        self.http._create_session = create_for_client

    def register_routes(self, app) -> None:
        self.http.register_routes(app)

    def get(self, session_id: str):
        """The session's environment, or None for an unknown (or reaped) session."""
        return self.http._sessions.get(session_id)

    def full(self) -> bool:
        """Whether every session is taken (the next ``create`` would raise)."""
        return len(self.http._sessions) >= self.http._max_concurrent_envs

    async def create(self) -> str:
        """A new session's id; raises ``ClientShareError`` at the client's share, ``SessionCapacityError``
        at the cap."""
        session_id, _ = await self.http._create_session()
        return session_id

    async def run(self, session_id: str, call: Callable[[], Any], step: bool = False):
        """``call()`` (a session's ``reset`` or ``step`` with its arguments bound, so a client's keys never
        meet this method's own parameters) the way the server runs a session's calls, then the session's
        activity (and step count, for a step) is recorded, which keeps the idle reaper away."""
        result = await self.http._run_in_session_executor(session_id, call)
        self.http._update_session_activity(session_id, increment_step=step)
        return result

    async def close(self, session_id: str) -> None:
        await self.http._destroy_session(session_id)
