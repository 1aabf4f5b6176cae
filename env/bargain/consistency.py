"""Thought consistency: whether the comparisons a buyer states in its private reasoning are true.

The reward never reads the Thought, so nothing in RL teaches a buyer that the numbers it reasons with must be
right; a SmolLM2 buyer was seen writing "Ask $150.00 vs budget $155.19: over budget" and walking away from asks
under its budget. This module reads the comparisons a Thought states, in the form the expert writes them
("Ask $175.00 vs budget $170.00: ...: over budget.") and in plain variants ("ask of $90 is within my budget of
$120", "the offer $X vs budget $Y: under budget"), and checks each against the truth of that turn: the price it
names must be the standing ask (or, for an offer, the buyer's offer: the one its move makes this turn, else its
standing one), the budget the buyer's budget, and the verdict ("over" / "within") must follow from the two.

``claims(text)`` reads the claims; ``check(text, ask, budget, offer=None)`` scores one Thought; ``verdicts`` says, for
each claim whose prices are the turn's own, where its verdict word stands and which word the truth calls for (the
labels of a verdict-teaching stage); ``standing_prices`` recovers each buyer turn's ask and offer from a transcript.
Text that states no comparison has no claims (nothing to be wrong about). Any string is accepted (the parser is
fuzzed).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_PRICE = r"\$\s?([0-9][0-9,]*(?:\.[0-9]+)?)"
_WHAT = r"(ask|offer)"
# "Ask $175.00 vs budget $170.00: 1=1, 7=7, 5>0: over budget." / "offer of $90 vs my budget $120 -> within budget"
_PAIR = re.compile(_WHAT + r"\b[^$\n]{0,12}?" + _PRICE + r"[^$\n]{0,16}?\b(?:vs\.?|versus|against|and)\s+(?:my\s+|the\s+)?"
                   r"budget\b[^$\n]{0,8}?" + _PRICE + r"(?P<rest>[^\n]{0,80})", re.IGNORECASE)
# "ask of $90 is within my budget of $120" / "the ask $150.00 is over budget ($140.00)"
_INLINE = re.compile(_WHAT + r"\b[^$\n]{0,12}?" + _PRICE + r"\s+(?:is\s+)?(?P<verdict>over|above|within|under|below)\s+"
                     r"(?:my\s+|the\s+)?budget\b[^$\n]{0,8}?" + _PRICE, re.IGNORECASE)
_VERDICT = re.compile(r"\b(over|above|within|under|below)\s+(?:my\s+|the\s+)?budget\b", re.IGNORECASE)
OVER = ("over", "above")


@dataclass(frozen=True)
class Claim:
    """One stated comparison: ``what`` ("ask" or "offer") at ``price`` against ``budget``, said to be over it or not."""

    what: str
    price: float
    budget: float
    over: bool
    at: int = field(default=-1, compare=False)  # where the verdict word starts in the text read


def _money(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value < 1e12 else None


def claims(text: str) -> list[Claim]:
    """The comparisons ``text`` states, in order (each read once)."""
    if not isinstance(text, str):
        return []
    out, taken = [], []
    for m in _PAIR.finditer(text):
        verdict = _VERDICT.search(m.group("rest"))
        price, budget = _money(m.group(2)), _money(m.group(3))
        if verdict and price is not None and budget is not None:
            out.append(Claim(m.group(1).lower(), price, budget, verdict.group(1).lower() in OVER,
                             m.start("rest") + verdict.start(1)))
            taken.append(m.span())
    for m in _INLINE.finditer(text):
        if any(a <= m.start() < b for a, b in taken):
            continue
        price, budget = _money(m.group(2)), _money(m.group(4))
        if price is not None and budget is not None:
            out.append(Claim(m.group(1).lower(), price, budget, m.group("verdict").lower() in OVER, m.start("verdict")))
    return out


def _same(a: float, b: float | None) -> bool:
    return b is not None and abs(a - b) < 0.005 + 1e-9


def true_claim(c: Claim, ask: float | None, budget: float, offer: float | None = None) -> bool:
    """A claim is true when its price is the one it names (the standing ask, or the buyer's own offer), its budget
    the buyer's budget, and its verdict follows from them (over: price above budget)."""
    named = ask if c.what == "ask" else offer
    return _same(c.price, named) and _same(c.budget, budget) and c.over == (c.price > budget + 1e-9)


def check(text: str, ask: float | None, budget: float, offer: float | None = None) -> dict:
    """One Thought against the truth of its turn: ``{"claims": n, "true": k, "false": [claims]}``."""
    found = claims(text)
    wrong = [c for c in found if not true_claim(c, ask, budget, offer)]
    return {"claims": len(found), "true": len(found) - len(wrong), "false": wrong}


def verdicts(text: str, ask: float | None, budget: float, offer: float | None = None) -> list[tuple[int, bool, str]]:
    """For each claim of ``text`` that names the turn's own price and budget: where its verdict word starts, whether
    the word is true, and the word the truth calls for ("over" or "within"). A claim that misnames a price is left
    out: its verdict is not its only fault, and no one word would make it true."""
    out = []
    for c in claims(text):
        named = ask if c.what == "ask" else offer
        if _same(c.price, named) and _same(c.budget, budget):
            over = c.price > budget + 1e-9
            out.append((c.at, c.over == over, "over" if over else "within"))
    return out


_RENDERED = re.compile(r"\[(BUY|SELL)\] \$([0-9][0-9,]*(?:\.[0-9]+)?)$")


def standing_prices(turns: Sequence[dict]) -> list[tuple[int, float | None, float | None]]:
    """For each buyer entry of a transcript's ``turns`` (rendered actions, as ``BargainEnv.transcript`` writes them):
    its index, the seller's standing ask and the buyer's offer its Thought may name (the one its move makes, else
    its standing one): what the environment checks that Thought against. A blocked move changes no standing price."""
    ask = own = None
    out = []
    for i, t in enumerate(turns):
        m = _RENDERED.match(t.get("action") or "")
        price = _money(m.group(2)) if m else None
        if t.get("role") == "buyer":
            made = price if m and m.group(1) == "BUY" else None
            out.append((i, ask, made if made is not None else own))
            if made is not None and t.get("error") is None:
                own = made
        elif t.get("role") == "seller" and m and m.group(1) == "SELL" and t.get("error") is None:
            ask = price
    return out
