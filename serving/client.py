"""Typed clients for the served environments (OpenEnv ``EnvClient``: one WebSocket session each).

    from serving.bargain import BargainAction
    from serving.client import BargainClient

    with BargainClient(base_url="http://127.0.0.1:8000").sync() as client:
        result = client.reset(seed=7, opponent="boulware")
        while not result.done:
            budget = result.observation.private_value
            result = client.step(BargainAction(kind="BUY", price=round(0.7 * budget, 2), talk="How about this?"))
        print(result.reward, result.observation.end_reason)
"""

from __future__ import annotations

from typing import Any

from openenv.core import EnvClient
from openenv.core.client_types import StepResult

from serving.bargain import BargainAction, BargainObservation, BargainState
from serving.market import MarketAction, MarketObservation, MarketState


class Typed:
    """What the typed clients share: actions sent as their fields, answers validated into the
    environment's own observation and state types (``obs_cls``, ``state_cls``)."""

    obs_cls: type
    state_cls: type

    def _step_payload(self, action) -> dict[str, Any]:
        return action.model_dump(exclude_none=True, exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult:
        """The server's ``{observation, reward, done}`` as a typed ``StepResult`` (validated)."""
        done, reward = payload.get("done", False), payload.get("reward")
        return StepResult(observation=self.obs_cls(**{**payload.get("observation", {}), "done": done,
                                                      "reward": reward}), reward=reward, done=done)

    def _parse_state(self, payload: dict[str, Any]):
        return self.state_cls(**payload)


class BargainClient(Typed, EnvClient[BargainAction, BargainObservation, BargainState]):
    """Client of ``python -m serving`` (the bilateral negotiation)."""

    obs_cls, state_cls = BargainObservation, BargainState


class MarketClient(Typed, EnvClient[MarketAction, MarketObservation, MarketState]):
    """Client of ``python -m serving --env market`` (the GPU market, you play lab 0)."""

    obs_cls, state_cls = MarketObservation, MarketState
