"""``BargainEnv``: the bilateral price negotiation of the RLVR negotiation paper.

One environment, two roles. The buyer opens; ``step(reply)`` takes the protocol text of
whoever is to move and returns a ``StepResult`` whose observation is the view of the next
role to move (or the buyer's final view).

A *turn* is one exchange: a buyer reply and the seller's answer. ``max_turns`` (default 6,
the benchmark's) therefore allows at most 6 buyer and 6 seller replies; when the seller's
sixth answer does not close a deal the episode is truncated with reward 0.

The buyer's reward is paid when the episode ends. A buyer reply that
cannot be read, an illegal buyer move, or any buyer offer or acceptance above budget ends
the episode at once with reward -1. The seller is regulated by the environment: an offer
or acceptance below cost is blocked, as is an unreadable seller reply; either counts as
``[REJECT]`` and is recorded in ``info`` and the metrics. The buyer is told only that the
seller's move was invalid, never why (the reason would reveal the cost).
"""

from __future__ import annotations

from typing import NamedTuple

import env.bargain.rules as rules
from env.bargain.consistency import check as check_thought
from env.bargain.protocol import BUY, DEAL, QUIT, REJECT, SELL, Action, one_line, parse_reply
from env.bargain.rules import BUYER, OTHER, SELLER
from env.bargain.sources import Scenario
from env.text import valid_text

DEFAULT_MAX_TURNS = 6
BLOCKED_NOTE = "The seller's move was invalid and counts as [REJECT]."


class Message(NamedTuple):
    """What the opponent sees of one reply: the Talk and the action, never the private part.

    Rendered, the Talk is exactly one line that starts with ``Talk:``; every other line (the
    action, the environment's note) is written by the environment, so no Talk can pass for it."""

    role: str
    talk: str
    action: Action
    note: str = ""

    def render(self) -> str:
        text = f"Talk: {one_line(self.talk)}\nAction: {self.action.render()}"
        return f"{text}\n({self.note})" if self.note else text


class Observation(NamedTuple):
    """One role's view. ``private_value`` is the budget (buyer) or the cost (seller), in cents."""

    role: str
    title: str
    description: str
    category: str
    list_price: float
    private_value: float
    history: tuple[Message, ...]
    my_offer: float | None
    their_offer: float | None
    turn: int
    max_turns: int
    done: bool = False

    @property
    def last_message(self) -> Message | None:
        return self.history[-1] if self.history else None

    @property
    def turns_left(self) -> int:
        """Replies this role may still make, this one included."""
        return self.max_turns - self.turn + 1


class EpisodeMetrics(NamedTuple):
    """Per-episode metrics of the paper's evaluation (buyer's point of view)."""

    deal: bool
    price: float | None
    reward: float
    bargained_ratio: float | None
    first_offer_ratio: float | None
    turns: int
    replies: int
    overshoot: bool
    format_errors: int
    invalid_moves: int
    seller_blocked: int
    end_reason: str
    mutual_interest: bool
    # the ask/offer-vs-budget comparisons the buyer's Thoughts state, and how many are true (env.bargain.consistency)
    thought_claims: int = 0
    thought_claims_true: int = 0

    def to_dict(self) -> dict:
        return self._asdict()


class StepResult(NamedTuple):
    """Gymnasium's step contract: terminated (deal or quit) is not truncated (turn limit).

    ``observation`` is the next mover's view. ``info`` is for the operator (the runner or
    trainer), not for players: it names errors such as ``below_cost`` that the buyer must
    not learn from. ``reward`` is the buyer's, non-zero only when the episode ends."""

    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    info: dict

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


class BargainEnv:
    """Turn sequencing for one negotiation at a time; rules live in ``env.bargain.rules``."""

    def __init__(self, max_turns: int = DEFAULT_MAX_TURNS):
        if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        self.max_turns = max_turns
        self.scenario: Scenario | None = None

    # ------------------------------------------------------------------ lifecycle
    def reset(self, seed: int | None = None, options: dict | None = None) -> Observation:
        """Start a negotiation over ``options["scenario"]`` (a ``Scenario``); the buyer's view."""
        scenario = (options or {}).get("scenario")
        if not isinstance(scenario, Scenario):
            raise TypeError(f"reset() needs options={{'scenario': Scenario}}, got {type(scenario).__name__}")
        self.scenario = scenario
        self.seed = seed
        self.to_move = BUYER
        self.turn = 1
        self.replies = 0
        self.offers: dict[str, float | None] = {BUYER: None, SELLER: None}
        self.history: tuple[Message, ...] = ()
        self.log: list[dict] = []  # full transcript, private parts included
        self.first_offer: float | None = None
        self.overshoot = False
        self.format_errors = 0
        self.invalid_moves = 0
        self.seller_blocked = 0
        self.thought_claims = self.thought_claims_true = 0
        self.done = False
        self.end_reason: str | None = None
        self.price: float | None = None
        self.reward = 0.0
        # budget and cost are whole cents in the scenario: shown, checked and rewarded the same
        self._private = {BUYER: scenario.budget, SELLER: scenario.cost}
        return self.observe(BUYER)

    def observe(self, role: str) -> Observation:
        """The view of ``role``: a projection of the state without the other side's secrets."""
        s = self.scenario
        return Observation(role, s.title, s.description, s.category, s.list_price, self._private[role],
                           self.history, self.offers[role], self.offers[OTHER[role]], self.turn, self.max_turns,
                           self.done)

    # ------------------------------------------------------------------ one reply
    def step(self, reply: object) -> StepResult:
        if self.scenario is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError("episode is over; call reset()")
        role = self.to_move
        parsed = parse_reply(reply)
        error = parsed.error
        kind = "format" if error else None
        if error is None:
            error = rules.check_move(role, parsed.action, self._private[role], self.offers[OTHER[role]])
            kind = "move" if error else None
        self.replies += 1
        entry = {"role": role, "turn": self.turn, "thought": parsed.thought, "talk": parsed.talk,
                 "action": parsed.action, "error": error}
        if error is not None and parsed.action is None and isinstance(reply, str):
            entry["raw"] = valid_text(reply[:500])
        self.log.append(entry)
        info = {"role": role, "error": error, "error_kind": kind, "action": entry["action"]}
        if role == BUYER and parsed.thought:  # checked against this turn's truth, before the move changes it
            own = parsed.action.price if parsed.action is not None and parsed.action.kind == BUY \
                else self.offers[BUYER]  # the offer it makes now, or its standing one
            stated = check_thought(parsed.thought, self.offers[SELLER], self._private[BUYER], own)
            self.thought_claims += stated["claims"]
            self.thought_claims_true += stated["true"]
        if role == BUYER:
            self._buyer_move(parsed.talk, parsed.action, error, kind)
        else:
            self._seller_move(parsed.talk, parsed.action, error)
        truncated = False
        if not self.done and role == SELLER:
            self.turn += 1
            if self.turn > self.max_turns:
                truncated = True
                self._end(rules.END_TURN_LIMIT)
        self.to_move = OTHER[role] if not self.done else BUYER
        if self.done:
            info["metrics"] = self.metrics().to_dict()
        return StepResult(self.observe(self.to_move), self.reward if self.done else 0.0,
                          self.done and not truncated, truncated, info)

    def _buyer_move(self, talk: str, action: Action | None, error: str | None, kind: str | None) -> None:
        if action is not None and action.kind in (BUY, DEAL) and error in (None, rules.E_OVER_BUDGET):
            price = action.price
            if self.first_offer is None and action.kind == BUY:
                self.first_offer = price
            if error == rules.E_OVER_BUDGET:
                self.overshoot = True
        if error is not None:
            if kind == "format":
                self.format_errors += 1
                return self._end(rules.END_BUYER_FORMAT)
            self.invalid_moves += 1
            return self._end(rules.END_OVER_BUDGET if error == rules.E_OVER_BUDGET else rules.END_BUYER_INVALID)
        self._apply(BUYER, talk, action)

    def _seller_move(self, talk: str, action: Action | None, error: str | None) -> None:
        if error is not None:  # regulated: the move is blocked and counts as [REJECT]
            self.seller_blocked += 1
            self.history += (Message(SELLER, "", Action(REJECT), BLOCKED_NOTE),)
            return
        self._apply(SELLER, talk, action)

    def _apply(self, role: str, talk: str, action: Action) -> None:
        """A legal move: publish it, then update the standing offer or end the episode."""
        self.history += (Message(role, talk, action),)
        if action.kind in (BUY, SELL):
            self.offers[role] = action.price
        elif action.kind == DEAL:
            self._end(rules.END_DEAL, self.offers[OTHER[role]])
        elif action.kind == QUIT:
            self._end(rules.END_BUYER_QUIT if role == BUYER else rules.END_SELLER_QUIT)

    def _end(self, reason: str, price: float | None = None) -> None:
        s = self.scenario
        self.done = True
        self.end_reason = reason
        self.price = price
        self.reward = rules.end_reward(reason, s.budget, s.cost, price)

    # ------------------------------------------------------------------ results
    def reward_of(self, role: str) -> float:
        """The reward of ``role`` once the game is over (``reward`` is the buyer's); 0 while it runs."""
        if not self.done:
            return 0.0
        s = self.scenario
        return rules.role_reward(role, self.end_reason, s.budget, s.cost, self.price)

    def metrics(self) -> EpisodeMetrics:
        s = self.scenario
        deal = self.end_reason == rules.END_DEAL
        return EpisodeMetrics(
            deal=deal,
            price=self.price,
            reward=self.reward,
            bargained_ratio=rules.bargained_ratio(s.budget, s.cost, self.price) if deal else None,
            first_offer_ratio=self.first_offer / s.budget if self.first_offer is not None else None,
            turns=sum(1 for e in self.log if e["role"] == BUYER),
            replies=self.replies,
            overshoot=self.overshoot,
            format_errors=self.format_errors,
            invalid_moves=self.invalid_moves,
            seller_blocked=self.seller_blocked,
            end_reason=self.end_reason or "running",
            mutual_interest=s.mutual_interest,
            thought_claims=self.thought_claims,
            thought_claims_true=self.thought_claims_true,
        )

    def transcript(self) -> dict:
        """The whole episode: scenario, both sides' private and public parts, and the metrics."""
        turns = [{**e, "action": e["action"].render() if e["action"] else None} for e in self.log]
        return {"scenario": self.scenario.to_dict(), "seed": self.seed, "max_turns": self.max_turns,
                "turns": turns, "metrics": self.metrics().to_dict()}
