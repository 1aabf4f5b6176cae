"""The bilateral negotiation as tools, for TRL's ``GRPOTrainer(environment_factory=...)``.

``HaggleToolEnv`` plays the buyer: ``reset(**row)`` opens an episode and returns the opening
prompt; the model then calls ``offer(price)``, ``accept()``, ``reject()`` or ``quit()`` (one
tool per action, each answered by the seller's reply); ``get_reward()`` is the verifiable
reward of the episode. It runs the environment in-process, or against a served one
(``python -m serving``) when ``base_url`` or ``$HAGGLE_ENV_URL`` is set, over the same
typed client any OpenEnv user has. A dataset row may carry ``seed``, ``product``, ``opponent``
and ``split`` (train by default: training never sees the test products).

    from trl import GRPOTrainer
    from training.games.bargain.tools import HaggleToolEnv
    trainer = GRPOTrainer(model=..., train_dataset=rows, environment_factory=HaggleToolEnv, args=...)
"""

from __future__ import annotations

import os

from env.bargain.protocol import format_price
from serving.bargain import BargainAction, BargainEnvironment, BargainObservation

ENV_URL = "HAGGLE_ENV_URL"
OVER = "The negotiation is over."


class HaggleToolEnv:
    """A buyer's negotiation as tool calls; one instance per rollout (TRL pools and resets them)."""

    def __init__(self, base_url: str | None = None):
        self.base_url = base_url if base_url is not None else os.environ.get(ENV_URL, "")
        self._client = None
        self._env = None
        if self.base_url:
            from serving.client import BargainClient  # noqa: PLC0415
            self._client = BargainClient(base_url=self.base_url).sync()
            self._client.connect()
        else:
            self._env = BargainEnvironment()
        self.obs: BargainObservation | None = None
        self.reward = 0.0

    # --------------------------------------------------------------- plumbing
    def _reset(self, **kwargs) -> BargainObservation:
        if self._client is not None:
            return self._client.reset(**kwargs).observation
        return self._env.reset(**kwargs)

    def _step(self, action: BargainAction) -> BargainObservation:
        if self._client is not None:
            return self._client.step(action).observation
        return self._env.step(action)

    def _act(self, **move) -> str:
        if self.obs is None or self.obs.done:
            return OVER
        self.obs = self._step(BargainAction(**move))
        if self.obs.done:
            self.reward = float(self.obs.reward or 0.0)
        return describe(self.obs)

    def _close(self) -> None:  # private: TRL turns every public method into a tool
        if self._client is not None:
            self._client.close()
            self._client = None

    def __del__(self):
        try:
            self._close()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass

    # --------------------------------------------------------------- TRL interface
    def reset(self, **row) -> str:
        """Open an episode from a dataset row (``seed``, ``product``, ``opponent``, ``split``)."""
        options = {k: row[k] for k in ("seed", "product", "opponent", "split", "source") if row.get(k) is not None}
        options.setdefault("split", "train")
        self.obs, self.reward = self._reset(**options), 0.0
        return opening(self.obs)

    def offer(self, price: float) -> str:
        """Offer to buy the product at a price.

        Args:
            price: The price in dollars that you offer to pay. Never offer more than your budget.

        Returns:
            The seller's answer, or how the negotiation ended.
        """
        try:
            price = round(float(price), 2)
        except (TypeError, ValueError):
            return "The price must be a number of dollars."
        if not 0 < price < 1e9:
            return "The price must be a positive number of dollars."
        return self._act(kind="BUY", price=price)

    def accept(self) -> str:
        """Accept the seller's current asking price.

        Returns:
            How the negotiation ended.
        """
        if self.obs is not None and not self.obs.done and self.obs.their_offer is None:
            return "The seller has not named a price yet; make an offer first."
        return self._act(kind="DEAL", price=self.obs.their_offer if self.obs else None)

    def reject(self) -> str:
        """Reject the seller's price without making a new offer.

        Returns:
            The seller's answer, or how the negotiation ended.
        """
        return self._act(kind="REJECT")

    def quit(self) -> str:
        """Walk away from the negotiation without a deal.

        Returns:
            How the negotiation ended.
        """
        return self._act(kind="QUIT")

    def get_reward(self) -> float:
        """The episode's verifiable reward: clip((budget - price) / |budget - cost|, -1, 1) for a deal, 0 without."""
        return self.reward


def opening(obs: BargainObservation) -> str:
    return (f"You are buying: {obs.title} ({obs.category}), list price {format_price(obs.list_price)}. "
            f"Your budget is {format_price(obs.private_value)} (private); never pay more. The seller has a private "
            f"cost. You have {obs.max_turns} rounds. Use the tools offer, accept, reject or quit.")


def describe(obs: BargainObservation) -> str:
    """The seller's latest message, or the ending, as the tool's answer."""
    if obs.done:
        price = obs.metrics.get("price") if obs.metrics else None
        deal = f" at {format_price(price)}" if price is not None else ""
        return f"The negotiation ended: {obs.end_reason}{deal}. {OVER}"
    last = obs.messages[-1] if obs.messages else None
    if last is None or last["role"] != "seller":
        return "Waiting for the seller."
    note = f" ({last['note']})" if last["note"] else ""
    return f"Seller (round {obs.turn} of {obs.max_turns}): {last['talk']} {last['action']}{note}".strip()
