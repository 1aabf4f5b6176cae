"""Scripted buyers: the rule-based expert and baselines.

No scripted buyer ever offers or accepts more than its budget. The expert writes its
arithmetic out in the Thought field, the ask against the budget digit by digit until two
differ ("Ask $175.00 vs budget $170.00: 1=1, 7=7, 5>0: over budget."), which is what a small
model needs to copy when it learns from expert games.
"""

from __future__ import annotations

from env.bargain.env import Observation
from env.bargain.players.base import ScriptedPlayer, nice_price
from env.bargain.protocol import BUY, DEAL, QUIT, Action, format_price

BUYER_TALK = {
    "open": ("Hi! I'm interested in the {item}. Would you take {price}?",
             "Hello, I'd like to buy the {item}. I can offer {price}.",
             "I've been looking for a {item}. How about {price}?"),
    "counter": ("That's still more than I hoped to spend. I can do {price}.",
                "I've seen similar ones for less. {price}?", "Let's meet somewhere fair: {price}.",
                "I can stretch to {price}.", "How about {price}? That's a solid offer."),
    "accept": ("Deal, {price} it is.", "Alright, {price} works. Thank you!", "You have a deal at {price}."),
    "quit": ("Sorry, that's beyond what I can pay. Thanks anyway.", "I'll have to pass. Goodbye."),
}


def compare_digits(a: float, b: float) -> str:
    """How ``a`` stands against ``b``, worked out the way one compares prices by hand: by the
    number of digits before the point when those differ ("3 digits vs 2"), else digit by digit,
    cents included, up to the first that differs ("1=1, 2>1"); "equal" when none does. Each step
    copies one digit of each price and compares two single digits, which a small model can learn
    where "$122.00 vs $119.99" in one step it often cannot."""
    ca, cb = round(a * 100), round(b * 100)
    ia, ib = str(ca // 100), str(cb // 100)
    if len(ia) != len(ib):
        return f"{len(ia)} digits vs {len(ib)}"
    steps = []
    for x, y in zip(ia + f"{ca % 100:02d}", ib + f"{cb % 100:02d}", strict=True):
        steps.append(f"{x}{'=' if x == y else '>' if x > y else '<'}{y}")
        if x != y:
            return ", ".join(steps)
    return "equal"


class ScriptedBuyer(ScriptedPlayer):
    role = "buyer"
    talk_lines = BUYER_TALK

    def offer(self, obs: Observation, price: float, thought: str) -> tuple[str, str, Action]:
        """Offer ``price`` rounded down and capped at the budget; take the ask if it is no higher."""
        price = min(nice_price(price, obs.list_price, up=False), obs.private_value)
        ask = obs.their_offer
        if ask is not None and price >= ask:  # never offer more than is already asked
            return self.accept(obs, f"{thought} Offer {format_price(price)} >= ask {format_price(ask)}: accept the ask.")
        situation = "open" if obs.my_offer is None else "counter"
        return f"{thought} Offer {format_price(price)}.", self.say(situation, obs, price), Action(BUY, price)

    def accept(self, obs: Observation, thought: str) -> tuple[str, str, Action]:
        ask = obs.their_offer
        return thought, self.say("accept", obs, ask), Action(DEAL, ask)


class ExpertBuyer(ScriptedBuyer):
    """Anchors at 55% of the list price and concedes on a convex plan toward 85% of the budget
    (a deal at the budget itself pays nothing, so the last offer keeps a margin). Takes the
    seller's ask once it is no higher than the planned offer, or in the last turn once it
    is within budget. Never exceeds the budget."""

    name = "expert"
    anchor = 0.55  # first offer, as a share of the list price (capped below the budget)
    target = 0.85  # last offer, as a share of the budget
    curve = 1.5  # convex: small steps first, bigger ones near the deadline
    cap = 0.9  # the first offer is at most this share of the budget

    def planned(self, obs: Observation) -> float:
        budget = obs.private_value
        start = min(self.anchor * obs.list_price, self.cap * budget)
        end = max(self.target * budget, start)
        progress = (obs.turn - 1) / (obs.max_turns - 1) if obs.max_turns > 1 else 1.0
        return start + (end - start) * progress ** self.curve

    def decide(self, obs: Observation) -> tuple[str, str, Action]:
        budget = obs.private_value
        ask = obs.their_offer
        plan = min(self.planned(obs), budget)
        if ask is None:  # the opening: the list price copied next to the offer it is a share of
            share, of = ((self.anchor, f"list {format_price(obs.list_price)}")
                         if self.anchor * obs.list_price <= self.cap * budget else (self.cap, f"budget {format_price(budget)}"))
            return self.offer(obs, plan, f"No ask yet. Open at {share:.0%} of {of}.")
        over = ask > budget
        compare = (f"Ask {format_price(ask)} vs budget {format_price(budget)}: {compare_digits(ask, budget)}: "
                   + ("over budget." if over else "within budget."))
        if not over and ask <= plan:
            return self.accept(obs, f"{compare} Ask <= plan {format_price(plan)}: accept.")
        if not over and obs.turn >= obs.max_turns:
            return self.accept(obs, f"{compare} Last round: accept.")
        return self.offer(obs, plan, compare if over else f"{compare} Ask > plan {format_price(plan)}.")


class SteadyBuyer(ExpertBuyer):
    """The expert's plan, set to survive a student's imprecision, and no last-round grab: a teacher to distil.

    Opens at 60% of the list price (capped at 90% of the budget) and moves toward 75% of the budget, so on most
    products it holds one offer until the last round, clear of the line under which an offended seller counts an
    offer as an insult. In the last round it offers 85% of the budget instead of taking any ask within it: a seller
    in its own last turn takes any offer at or above its private floor, which is often well under its standing ask.
    It takes an ask no higher than its offer, as every scripted buyer does, and writes the expert's digit-by-digit
    ask-versus-budget comparison in every Thought, so a student learns the same reasoning. The numbers were chosen
    on the builtin *train* products with every offer perturbed by 5% noise, as a small model's arithmetic is, and
    the verdict word never decides its move on its own: a student whose verdicts err still plays this plan."""

    name = "steady"
    anchor = 0.6
    target = 0.75
    last = 0.85  # the last round's offer, as a share of the budget

    def decide(self, obs: Observation) -> tuple[str, str, Action]:
        ask, budget = obs.their_offer, obs.private_value
        if obs.turn < obs.max_turns or ask is None:
            return super().decide(obs)
        verdict = "over budget." if ask > budget else "within budget."
        return self.offer(obs, self.last * budget,
                          f"Ask {format_price(ask)} vs budget {format_price(budget)}: {compare_digits(ask, budget)}: "
                          f"{verdict} Last round: offer {self.last:.0%} of budget.")


class AlwaysAcceptBuyer(ScriptedBuyer):
    """Accepts the first ask within budget; until then repeats an offer at 70% of list."""

    name = "always_accept"

    def decide(self, obs):
        ask = obs.their_offer
        if ask is not None and ask <= obs.private_value:
            return self.accept(obs, f"Ask {format_price(ask)} <= budget {format_price(obs.private_value)}: accept.")
        return self.offer(obs, 0.7 * obs.list_price, "Repeat 70% of list, capped at budget.")


class SplitDifferenceBuyer(ScriptedBuyer):
    """Opens at half the list price, then offers the midpoint of its last offer and the ask."""

    name = "split_difference"

    def decide(self, obs):
        ask, budget = obs.their_offer, obs.private_value
        if ask is None or obs.my_offer is None:
            return self.offer(obs, 0.5 * obs.list_price, "Open at half the list price.")
        if ask <= budget and (ask - obs.my_offer <= 0.02 * obs.list_price or obs.turn >= obs.max_turns):
            return self.accept(obs, "Gap is small (or last turn) and ask within budget: accept.")
        return self.offer(obs, (obs.my_offer + ask) / 2, "Midpoint of my offer and the ask, capped at budget.")


class LowballBuyer(ScriptedBuyer):
    """Offers 30% of the list price every turn and never raises."""

    name = "lowballer"

    def decide(self, obs):
        low = min(nice_price(0.3 * obs.list_price, obs.list_price, up=False), obs.private_value)
        ask = obs.their_offer
        if ask is not None and ask <= low:
            return self.accept(obs, "Ask at or below my lowball: accept.")
        return self.offer(obs, low, "Stay at 30% of list.")


class OfferBudgetBuyer(ScriptedBuyer):
    """Offers its whole budget at once and accepts any ask within it."""

    name = "offer_budget"

    def decide(self, obs):
        ask = obs.their_offer
        if ask is not None and ask <= obs.private_value:
            return self.accept(obs, "Ask within budget: accept.")
        return self.offer(obs, obs.private_value, "Whole budget.")


class RandomValidBuyer(ScriptedBuyer):
    """Picks a random legal move: mostly offers uniform in [30% of list, budget]."""

    name = "random_valid"

    def decide(self, obs):
        ask, budget = obs.their_offer, obs.private_value
        r = self.rng.random()
        if r < 0.04:
            return "Random move: quit.", self.say("quit", obs), Action(QUIT)
        if ask is not None and ask <= budget and r < 0.3:
            return self.accept(obs, "Random move: accept the ask (within budget).")
        low = min(0.3 * obs.list_price, budget)
        return self.offer(obs, self.rng.uniform(low, budget), "Random move.")


BUYERS: dict[str, type[ScriptedBuyer]] = {
    cls.name: cls for cls in (ExpertBuyer, AlwaysAcceptBuyer, SplitDifferenceBuyer, LowballBuyer,
                              OfferBudgetBuyer, RandomValidBuyer)
}
BASELINES = tuple(n for n in BUYERS if n != "expert")
# Buyers whose games a model may be trained on (``sft.py --teacher``); a name here that is not in ``BUYERS`` is
# still played by name (``make_player``, ``evaluate.py --buyers``) but joins no default line-up.
TEACHERS: dict[str, type[ExpertBuyer]] = {cls.name: cls for cls in (ExpertBuyer, SteadyBuyer)}
NAMED_BUYERS: dict[str, type[ScriptedBuyer]] = {**BUYERS, **TEACHERS}  # every buyer a name plays
