"""Typed clients for the served environments (OpenEnv ``EnvClient``: one WebSocket session each).

    from env.client import BargainClient
    from env.serving import BargainAction

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
from openenv.core.env_server.types import State

from env.serving import BargainAction, BargainObservation, BargainState, EchoAction, EchoObservation, MarketAction, \
    MarketObservation, MarketState


def _result(obs_cls, payload: dict[str, Any]) -> StepResult:
    """The server's ``{observation, reward, done}`` as a typed ``StepResult`` (validated)."""
    done, reward = payload.get("done", False), payload.get("reward")
    return StepResult(observation=obs_cls(**{**payload.get("observation", {}), "done": done, "reward": reward}),
                      reward=reward, done=done)


class BargainClient(EnvClient[BargainAction, BargainObservation, BargainState]):
    """Client of ``python -m env.serving`` (the bilateral negotiation)."""

    def _step_payload(self, action: BargainAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True, exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[BargainObservation]:
        return _result(BargainObservation, payload)

    def _parse_state(self, payload: dict[str, Any]) -> BargainState:
        return BargainState(**payload)


class MarketClient(EnvClient[MarketAction, MarketObservation, MarketState]):
    """Client of ``python -m env.serving --env market`` (the GPU market, you play lab 0)."""

    def _step_payload(self, action: MarketAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True, exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[MarketObservation]:
        return _result(MarketObservation, payload)

    def _parse_state(self, payload: dict[str, Any]) -> MarketState:
        return MarketState(**payload)


class EchoClient(EnvClient[EchoAction, EchoObservation, State]):
    """Client of ``python -m env.serving --env echo`` (the throughput baseline)."""

    def _step_payload(self, action: EchoAction) -> dict[str, Any]:
        return {"message": action.message}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[EchoObservation]:
        return _result(EchoObservation, payload)

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(**payload)
