"""What a language-model player reads: its system prompt and the opponent's public messages.

One function per role builds the system prompt from the scenario and that role's private
value only; ``assert_no_leak`` refuses any prompt that contains the other role's private
value or private reasoning (a bug guard: the environment's projections already keep them
apart, this catches a prompt builder that reaches around them).
"""

from __future__ import annotations

import re

from env.bargain.env import Message, Observation
from env.bargain.protocol import format_price
from env.bargain.rules import BUYER, SELLER
from env.bargain.sources import Scenario
from env.core import LeakError

FORMATS = {
    "option_a": "Reply in three lines:\nThought: <private reasoning>\nTalk: <what you say>\nAction: <one action>",
    "option_b": "Think inside <think>...</think> (private), then reply:\nTalk: <what you say>\nAction: <one action>",
}
ACTIONS = {
    BUYER: "[BUY] $X to offer, [DEAL] $X to accept the seller's price $X, [REJECT], [QUIT]",
    SELLER: "[SELL] $X to ask, [DEAL] $X to accept the buyer's offer $X, [REJECT], [QUIT]",
}
GOALS = {
    BUYER: ("You are the buyer: pay as little as possible and never more than your budget (going over it is the "
            "worst outcome; paying exactly the budget gains nothing)."),
    SELLER: "You are the seller: sell as high as possible, never below your cost.",
}


def _product(obs: Observation) -> str:
    desc = f" {obs.description}" if obs.description else ""
    return f"Product: {obs.title} ({obs.category}), list price {format_price(obs.list_price)}.{desc}"


def system_prompt(obs: Observation, reasoning_mode: str = "option_a") -> str:
    """The system prompt for ``obs.role``, built from that role's own view only.

    Shared instructions come first and the episode's own facts last, so that prompts of many
    episodes share a long common prefix (computed once by prefix-caching backends)."""
    secret = "budget" if obs.role == BUYER else "cost"
    return (f"Negotiate the price of a product, buyer against seller, for at most {obs.max_turns} rounds; the "
            f"buyer speaks first in each round.\n{FORMATS[reasoning_mode]}\n{GOALS[obs.role]}\n"
            f"Actions: {ACTIONS[obs.role]}.\n{_product(obs)}\n"
            f"Your {secret}: {format_price(obs.private_value)} (private).")


def opening_message(obs: Observation) -> str:
    """The first user message of a conversation: the buyer is asked to open."""
    return f"Round 1 of {obs.max_turns}. The seller is waiting for your opening offer."


def opponent_message(msg: Message, obs: Observation) -> str:
    """An opponent's public message as the next user turn, with the round for the deadline."""
    who = "Seller" if msg.role == SELLER else "Buyer"
    return f"Round {obs.turn} of {obs.max_turns}. {who}:\n{msg.render()}"


def new_user_messages(obs: Observation, seen: int) -> list[tuple[str, str]]:
    """``(user turn, the opponent's own Talk in it)`` for everything in ``obs.history`` after index
    ``seen``; the buyer's very first turn is the opening request."""
    out = [(opponent_message(m, obs), m.talk) for m in obs.history[seen:] if m.role != obs.role]
    if not out and not obs.history and obs.role == BUYER:
        out = [(opening_message(obs), "")]
    return out


def _number_forms(value: float) -> tuple[str, ...]:
    return (format_price(value), f"{value:.2f}", f"{value:,.2f}")


def _names_number(text: str, form: str) -> bool:
    """``form`` appears in ``text`` as a whole number, not inside a longer one ($5.99 is not in
    $55.99 or $5.995)."""
    return re.search(rf"(?<![\d.,]){re.escape(form)}(?!\d)", text) is not None


def assert_no_leak(text: str, scenario: Scenario, role: str, opponent_thoughts: tuple[str, ...] = (),
                   check_values: bool = True) -> str:
    """Raise ``LeakError`` if ``text`` (a prompt for ``role``) holds the other side's secrets.

    ``check_values`` looks for the other side's private value; use it on text the prompt
    builder writes (system prompt, opening). Opponent messages are public by construction
    and may name any price (a seller may ask exactly its cost), so they are checked for the
    opponent's private reasoning only, with the opponent's own Talk taken out first (what a
    player chose to say aloud is public, even if it repeats its thoughts). A secret equal to a
    number the role sees anyway (its own value or the list price) is not looked for.
    """
    secret = scenario.cost if role == BUYER else scenario.budget
    # a number the role may see anyway (its own value, the public list price) cannot tell the secret
    # apart when the secret happens to equal it (a budget equal to the cost): it is not checked
    seen = set(_number_forms(scenario.budget if role == BUYER else scenario.cost) + _number_forms(scenario.list_price))
    for form in _number_forms(secret) if check_values else ():
        if form not in seen and _names_number(text, form):
            other = "cost" if role == BUYER else "budget"
            raise LeakError(f"prompt for the {role} contains the {other} ({form}) of scenario {scenario.id}")
    for thought in opponent_thoughts:
        if thought and len(thought) >= 8 and thought in text:
            raise LeakError(f"prompt for the {role} contains the other side's private reasoning")
    return text
