"""The trivial environment served exactly like Haggle's games: the serving benchmark's ceiling.

A benchmark fixture, not a game: it lives with the benchmarks and is served only by them.

    python benchmarks/echo.py --port 8002
"""

from __future__ import annotations

import argparse
from typing import Any, Optional

from openenv.core import EnvClient
from openenv.core.env_server import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from env.bargain.protocol import MAX_REPLY_CHARS
from serving.app import build_app, serve
from serving.base import InlineSteps
from serving.client import Typed


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


class EchoClient(Typed, EnvClient[EchoAction, EchoObservation, State]):
    """Client of the echo server."""

    obs_cls, state_cls = EchoObservation, State


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the echo environment (the serving benchmark's baseline).")
    ap.add_argument("--port", type=int, default=8002)
    ap.add_argument("--max-sessions", type=int, default=256)
    args = ap.parse_args(argv)
    serve(build_app((EchoEnvironment, EchoAction, EchoObservation), args.max_sessions, per_client=args.max_sessions),
          port=args.port)  # the benchmark's sessions all come from one machine


if __name__ == "__main__":
    main()
