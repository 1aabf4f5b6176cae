"""The one place that uses openenv-core beyond its public API.

``HTTPEnvServer`` manages WebSocket sessions (one environment each, a cap, an idle reaper) but
offers no public calls to drive those sessions from plain HTTP requests. ``SessionServer`` wraps
it and reaches into its private methods for exactly that; it was written against
``OPENENV_VERSION``, and a test pins the installed version to it, so an upgrade that could break
these calls fails that test first instead of a request in production.
"""

from __future__ import annotations

from typing import Any, Callable

from openenv.core.env_server import ConcurrencyConfig, HTTPEnvServer
from openenv.core.env_server.exceptions import SessionCapacityError

OPENENV_VERSION = "0.3.0"

__all__ = ["OPENENV_VERSION", "SessionServer", "SessionCapacityError"]


class SessionServer:
    """OpenEnv's server for ``factory`` (its routes, its WebSocket sessions), plus session calls for
    stateful HTTP: ``get``, ``create``, ``run``, ``close``."""

    def __init__(self, factory: Callable, action_cls: type, obs_cls: type, max_sessions: int,
                 idle_timeout_s: float | None):
        self.http = HTTPEnvServer(factory, action_cls, obs_cls,
                                  concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                                       session_timeout=idle_timeout_s))

    def register_routes(self, app) -> None:
        self.http.register_routes(app)

    def get(self, session_id: str):
        """The session's environment, or None for an unknown (or reaped) session."""
        return self.http._sessions.get(session_id)

    def full(self) -> bool:
        """Whether every session is taken (the next ``create`` would raise)."""
        return len(self.http._sessions) >= self.http._max_concurrent_envs

    async def create(self) -> str:
        """A new session's id; raises ``SessionCapacityError`` at the cap."""
        session_id, _ = await self.http._create_session()
        return session_id

    async def run(self, session_id: str, fn: Callable, *args: Any, step: bool = False, **kwargs: Any):
        """``fn(*args, **kwargs)`` the way the server runs a session's calls, then the session's
        activity (and step count, for a step) is recorded, which keeps the idle reaper away."""
        result = await self.http._run_in_session_executor(session_id, fn, *args, **kwargs)
        self.http._update_session_activity(session_id, increment_step=step)
        return result

    async def close(self, session_id: str) -> None:
        await self.http._destroy_session(session_id)
