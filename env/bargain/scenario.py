"""One negotiation's facts: what is sold, what the buyer may pay, what the seller paid.

Money is whole cents everywhere: the budget is floored to the cent and the cost raised to the
cent when a ``Scenario`` is built, so the budget a buyer is shown is the one its offers are
checked against and rewarded by. Text fields have one documented limit each (``TEXT_LIMITS``,
in characters): a longer value is cut there and ends in "…".
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from env.text import valid_text

BUDGET_FACTOR = 0.8
TEXT_LIMITS = {"title": 300, "category": 100, "description": 2000}


class ScenarioDataError(ValueError):
    """Scenario data that cannot be used; the message names the file, product and field."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """One negotiation: what is sold, what the buyer may pay, what the seller paid."""

    id: str
    title: str
    description: str
    category: str
    list_price: float
    budget: float
    cost: float
    source: str = "builtin"

    def __post_init__(self) -> None:
        for name in ("list_price", "budget", "cost"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ScenarioDataError(f"scenario {self.id!r}: {name} must be a positive finite number, got {value!r}")
        # one budget, in cents, everywhere: shown, checked and rewarded (a budget of 8.959999...
        # shown as $8.96 must not make a deal at $8.96 an overshoot)
        for name, to_cents in (("list_price", round_cents), ("budget", floor_cents), ("cost", ceil_cents)):
            value = to_cents(float(getattr(self, name)))
            if value <= 0:
                raise ScenarioDataError(f"scenario {self.id!r}: {name} must be at least one cent, got {getattr(self, name)!r}")
            object.__setattr__(self, name, value)
        for name, limit in TEXT_LIMITS.items():
            value = getattr(self, name)
            if not isinstance(value, str):
                raise ScenarioDataError(f"scenario {self.id!r}: {name} must be text, got {type(value).__name__}")
            # a lone surrogate is no character: a tokenizer or a JSON writer would fail on it mid-game
            object.__setattr__(self, name, cut_text(valid_text(value).strip(), limit))
        if not self.title:
            raise ScenarioDataError(f"scenario {self.id!r}: empty title")

    @property
    def mutual_interest(self) -> bool:
        return self.budget > self.cost

    @property
    def interest(self) -> str:
        return "mutual" if self.mutual_interest else "conflicting"

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


def floor_cents(x: float) -> float:
    """Down to the cent (``8.959999... -> 8.96``: float noise within 1e-6 of a cent is not a cent)."""
    return math.floor(x * 100 + 1e-6) / 100


def ceil_cents(x: float) -> float:
    return math.ceil(x * 100 - 1e-6) / 100


def round_cents(x: float) -> float:
    return round(x, 2)


def cut_text(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters; a cut value ends in "…"."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def make_scenario(title: str, description: str, category: str, list_price: float, cost: float,
                  source: str, budget_factor: float = BUDGET_FACTOR, budget: float | None = None) -> Scenario:
    """Build a scenario with a stable id: the benchmark's derivation (budget ``budget_factor`` x
    list price), or the ``budget`` given."""
    digest = hashlib.sha1(valid_text(f"{category}\n{title}").encode()).hexdigest()[:12]
    check_budget_factor(budget_factor)
    list_price = round(float(list_price), 2)
    return Scenario(
        id=f"{source}:{digest}", title=title, description=description, category=category,
        list_price=list_price, budget=budget_factor * list_price if budget is None else float(budget),
        cost=float(cost), source=source,
    )


def check_budget_factor(budget_factor: float) -> float:
    if isinstance(budget_factor, bool) or not isinstance(budget_factor, (int, float)) \
            or not math.isfinite(budget_factor) or not 0 < budget_factor <= 10:
        raise ScenarioDataError(f"budget_factor must be a number in (0, 10], got {budget_factor!r}")
    return float(budget_factor)
