"""The oracle: a scripted buyer told the seller's private floor. An upper bound, never a baseline.

The scripted sellers (``sellers.py``) never sell below their private floor, and in the last
round they accept any offer at or above it; only offers can insult them (below
``insult_ratio`` of their ask), and the one that walks away does so at the second insult. A
buyer that knows the floor therefore rejects until the last round (or takes an ask that has
come down to the floor) and then bids the floor, rounded up to the cent: no buyer can buy
cheaper from these sellers, so its reward is the ceiling of each game. When the floor is above
the budget no good deal exists, and the oracle walks away at once (reward 0).

It needs the seller it faces: ``watch(seller)`` hands it the seller object, which the
evaluation harness does for it (``play_cell``). It is not in ``BUYERS``, so nothing offers it
as an opponent or a baseline; evaluation rows for it carry ``upper_bound: true``.
"""

from __future__ import annotations

import math

from env.bargain.env import Observation
from env.bargain.players.buyers import BUYER_TALK, ScriptedBuyer
from env.bargain.protocol import BUY, QUIT, REJECT, Action, format_price

ORACLE = "oracle"


def _cents_up(x: float) -> float:
    return math.ceil(round(x * 100, 6)) / 100


class OracleBuyer(ScriptedBuyer):
    """Knows the private floor of the scripted concession seller it watches."""

    name = ORACLE
    talk_lines = {**BUYER_TALK, "wait": ("That's still too much for me.", "Not at that price. Let me think.")}

    def __init__(self, reasoning_mode: str = "option_a"):
        super().__init__(reasoning_mode)
        self.seller = None

    def watch(self, seller) -> None:
        if not hasattr(seller, "persona"):  # a ConcessionSeller: its floor and ask are set when it resets
            raise ValueError(f"the oracle reads a scripted concession seller's floor; "
                             f"{getattr(seller, 'name', type(seller).__name__)!r} has none")
        self.seller = seller

    def decide(self, obs: Observation) -> tuple[str, str, Action]:
        if self.seller is None:
            raise RuntimeError("the oracle must watch its seller first (OracleBuyer.watch)")
        budget, ask = obs.private_value, obs.their_offer
        floor = _cents_up(self.seller.floor)
        known = f"Seller floor {format_price(floor)} (told), budget {format_price(budget)}."
        if floor > budget:
            return f"{known} Floor over budget: no good deal exists, walk away.", self.say("quit", obs), Action(QUIT)
        if ask is not None and ask <= floor:
            return self.accept(obs, f"{known} Ask {format_price(ask)} <= floor: accept.")
        if obs.turn < obs.max_turns:
            return f"{known} Wait for the last round.", self.say("wait", obs), Action(REJECT)
        return (f"{known} Last round: bid the floor. Offer {format_price(floor)}.",
                self.say("open" if obs.my_offer is None else "counter", obs, floor), Action(BUY, floor))
