"""Rules of the bilateral negotiation as pure functions and small tables.

``BargainEnv`` only sequences turns; what is legal and what it pays is decided here.
"""

from __future__ import annotations

from env.bargain.protocol import BUY, QUIT, REJECT, SELL, Action

BUYER, SELLER = "buyer", "seller"
ROLES = (BUYER, SELLER)
OTHER = {BUYER: SELLER, SELLER: BUYER}
OWN_OFFER_KIND = {BUYER: BUY, SELLER: SELL}
DEAL_TOLERANCE = 0.01  # a [DEAL] must name the standing offer to within one cent
GAP_FLOOR = 1.0  # |B - C| is floored at $1 so tiny gaps do not explode the reward

# Protocol (move) error codes, after the reply was read successfully.
E_WRONG_ROLE = "wrong_role_action"  # buyer used [SELL] or seller used [BUY]
E_NO_OFFER = "no_offer_to_accept"  # [DEAL] with no standing offer from the opponent
E_DEAL_MISMATCH = "deal_price_mismatch"  # [DEAL] $X where X is not the standing offer
E_OVER_BUDGET = "over_budget"  # buyer offered or accepted more than its budget
E_BELOW_COST = "below_cost"  # seller offered or accepted less than its cost (blocked)

# How an episode ended.
END_DEAL = "deal"
END_BUYER_QUIT = "buyer_quit"
END_SELLER_QUIT = "seller_quit"
END_TURN_LIMIT = "turn_limit"
END_BUYER_FORMAT = "buyer_format_error"
END_BUYER_INVALID = "buyer_invalid_move"
END_OVER_BUDGET = "buyer_over_budget"
END_REASONS = (END_DEAL, END_BUYER_QUIT, END_SELLER_QUIT, END_TURN_LIMIT, END_BUYER_FORMAT,
               END_BUYER_INVALID, END_OVER_BUDGET)


def clip(x: float, low: float = -1.0, high: float = 1.0) -> float:
    return low if x < low else high if x > high else x


def bargained_ratio(budget: float, cost: float, price: float) -> float:
    """``(B - P) / max(|B - C|, $1)``: 1 means the buyer paid the seller's cost, 0 its budget."""
    return (budget - price) / max(abs(budget - cost), GAP_FLOOR)


def deal_reward(budget: float, cost: float, price: float) -> float:
    """Buyer reward for a deal at ``price``: ``clip((B - P) / |B - C|, -1, 1)``; -1 above budget."""
    if price > budget:
        return -1.0
    return clip(bargained_ratio(budget, cost, price))


def end_reward(end_reason: str, budget: float, cost: float, price: float | None) -> float:
    """Buyer reward from the outcome alone (the paper's verifiable reward)."""
    if end_reason == END_DEAL:
        assert price is not None
        return deal_reward(budget, cost, price)
    if end_reason in (END_BUYER_FORMAT, END_BUYER_INVALID, END_OVER_BUDGET):
        return -1.0
    return 0.0  # no deal: quit by either side or the turn limit


def seller_end_reward(end_reason: str, budget: float, cost: float, price: float | None) -> float:
    """The seller's reward, the buyer's mirrored: ``clip((P - C) / |B - C|, -1, 1)`` for a deal (never
    negative: the regulated seller cannot sell below cost), 0 without one. The buyer's errors end
    the game with no sale, so they pay the seller nothing either."""
    if end_reason == END_DEAL:
        assert price is not None
        return clip((price - cost) / max(abs(budget - cost), GAP_FLOOR))
    return 0.0


def role_reward(role: str, end_reason: str, budget: float, cost: float, price: float | None) -> float:
    """The reward of ``role`` (buyer or seller) for a finished game."""
    if role not in (BUYER, SELLER):
        raise ValueError(f"role must be {BUYER!r} or {SELLER!r}, got {role!r}")
    return (end_reward if role == BUYER else seller_end_reward)(end_reason, budget, cost, price)


def check_move(role: str, action: Action, private_value: float, their_offer: float | None) -> str | None:
    """Why ``action`` is illegal for ``role``, or None when it is legal.

    ``private_value`` is the buyer's budget or the seller's cost; ``their_offer`` is the
    opponent's standing offer. The seller is regulated: nothing below cost.
    """
    kind = action.kind
    if kind in (REJECT, QUIT):
        return None
    if kind in (BUY, SELL):
        if kind != OWN_OFFER_KIND[role]:
            return E_WRONG_ROLE
        price = action.price
    else:  # DEAL
        if their_offer is None:
            return E_NO_OFFER
        if abs(action.price - their_offer) > DEAL_TOLERANCE:
            return E_DEAL_MISMATCH
        price = their_offer
    if role == BUYER and price > private_value:
        return E_OVER_BUDGET
    if role == SELLER and price < private_value:
        return E_BELOW_COST
    return None
