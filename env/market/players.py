"""Scripted players of the GPU market: the counterparts' archetypes, the rule expert, baselines,
and the exploit policies the tests search with.

A player sees only its own projection (``MarketEnv.observe``) and answers with one action dict
per call (a model answers with the same object as JSON text). Counterparts are individually
rational: they accept, counter, join or commit only when their own utility (money plus what
their GPU-hours can still earn, ``env.market.rules``) rises by a strictly positive margin, so
nothing is ever given away.
"""

from __future__ import annotations

import math
import random

import env.market.rules as rules
from env.market.rules import EPS
from env.market.view import MarketView
from env.market.world import SPOT_PRICE, Job


class View:
    """A player's reading of its observation: its jobs as ``Job`` objects, its holdings, helpers."""

    __slots__ = ("obs", "me", "round", "jobs", "mine", "held", "energy", "spot", "money")

    def __init__(self, obs: MarketView):
        self.obs, self.me, self.round = obs, obs["you"], obs["round"]
        self.jobs = [Job(**j) for j in obs["jobs"]]
        self.mine = [b for b in obs["blocks"] if b["owner"] == self.me]
        self.held = [(b["start"], b["hours"], b["energy"]) for b in self.mine]
        self.energy, self.spot, self.money = obs["market"]["energy_price"], obs["market"]["spot_price"], obs["money"]

    def gain(self, block: dict, hours: float, money: float) -> float:
        """Utility change from getting (hours > 0) or giving up hours of ``block`` and ``money``;
        minus infinity for giving up hours the block no longer has."""
        if hours < 0 and block.get("hours", 0.0) + EPS < -hours:
            return float("-inf")
        return rules.trade_gain(self.jobs, self.held, self.round, self.energy, block["start"], block["energy"],
                                hours, money, self.money)

    def incoming(self) -> list[dict]:
        return [o for o in self.obs["offers"] if o["to"] == self.me]

    def outgoing(self) -> list[dict]:
        return [o for o in self.obs["offers"] if o["from"] == self.me]

    def block(self, bid: str) -> dict | None:
        return next((b for b in self.obs["blocks"] if b["id"] == bid), None)

    def theirs(self) -> list[dict]:
        """Other labs' blocks that still have hours, in the view's order."""
        return [b for b in self.obs["blocks"] if b["owner"] != self.me and b["hours"] > EPS]

    def unasked(self) -> list[dict]:
        """``theirs`` without the blocks this lab already has an open offer on."""
        asked = {o["block"] for o in self.outgoing()}
        return [b for b in self.theirs() if b["id"] not in asked]

    def lacking(self) -> list[tuple[Job, float]]:
        """Open jobs still short of hours, with what they lack, most valuable per missing hour first."""
        lack = rules.shortfall(self.jobs, self.held, self.round)
        out = [(j, lack[j.id]) for j in self.jobs if lack.get(j.id, 0) > EPS]
        return sorted(out, key=lambda x: -x[0].value / x[0].need)

    def allocation(self) -> dict | None:
        """The next allocation for a job the holdings fully cover and that is worth its energy."""
        lack = rules.shortfall(self.jobs, self.held, self.round)
        for job in sorted(self.jobs, key=lambda j: j.deadline):
            if job.status != "open" or lack.get(job.id, 1) > EPS or job.deadline < self.round:
                continue
            if job.value <= job.need * max((b["energy"] for b in self.mine), default=1) * self.energy:
                continue
            for b in sorted(self.mine, key=lambda b: (b["energy"], b["start"])):
                if b["start"] <= self.round and b["hours"] > EPS and \
                        min(b["hours"], job.need) * b["energy"] * self.energy <= self.money:
                    return {"action": "allocate", "block": b["id"], "job": job.id,
                            "hours": round(min(b["hours"], job.need), 2)}
        return None

    def surplus(self) -> float:
        return rules.surplus_hours(self.jobs, self.held, self.round)

    def lot(self, lot_id: str) -> dict | None:
        return next((x for x in self.obs["market"]["lots"] if x["id"] == lot_id), None)

    def lot_need(self, lot: dict) -> float:
        """Hours this lab lacks for jobs the lot's capacity could still serve."""
        lack = rules.shortfall(self.jobs, self.held, self.round)
        return sum(h for j in self.jobs if (h := lack.get(j.id, 0.0)) > EPS and j.deadline >= lot["start"])

    def coalition_move(self, c: dict, min_gain: float) -> dict | None:
        """Join an invitation with the hours it lacks, then commit, each only if its share (trimmed
        to what is left of the lot) gains this lab more than ``min_gain`` dollars per GPU-hour."""
        if self.me not in c["members"] or c["status"] != "forming":
            return None
        lot = self.lot(c["lot"])
        if lot is None:
            return None
        unit = lot["price"] / lot["hours"]
        if self.me not in c["shares"]:
            share = lot_share(self.lot_need(lot), lot)
            if share > EPS and share * unit <= self.money and self.gain(lot, share, -share * unit) > min_gain * share:
                return {"action": "join", "coalition": c["id"], "hours": share}
            return None
        if self.me in c["committed"] or sum(c["shares"].values()) < lot["hours"] - 0.01:
            return None  # commit only once the joined shares cover the lot: no money locked in a stalled coalition
        left = lot["hours"] - sum(c["shares"][m] for m in c["committed"])
        share = min(c["shares"][self.me], left)
        if share > EPS and share * unit <= self.money and self.gain(lot, share, -share * unit) > min_gain * share:
            return {"action": "commit", "coalition": c["id"]}
        return None


WAIT = {"action": "wait"}
# A lab's share of a volume lot leaves this much of it to the other members (a lot is sold only to a
# coalition of at least ``rules.LOT_MIN_MEMBERS`` paying members, so a share must be below the lot).
LOT_ROOM = 0.25


def _in_favour(price: float, i_buy: bool) -> float:
    """A counter price to the cent, rounded the way that keeps the lab's own gain (down when it buys)."""
    return (math.floor(price * 100 + 1e-9) if i_buy else math.ceil(price * 100 - 1e-9)) / 100


def lot_share(need: float, lot: dict) -> float:
    """The share of ``lot`` a lab asks for: what it needs, leaving ``LOT_ROOM`` of the lot to others."""
    return round(min(need, lot["hours"] * (1 - LOT_ROOM)), 2)


class MarketPlayer:
    name = "player"

    def reset(self, obs: MarketView, rng: random.Random) -> None:
        self.rng = rng

    def act(self, obs: MarketView) -> dict:
        raise NotImplementedError

    def after(self, step) -> None:
        """The result of this player's own action (``MarketStep``), as ``MarketMatch`` plays it: a
        player that reads it (a model lab, told whether its action was refused) keeps it."""


# ---------------------------------------------------------------------- counterparts
# margin: the share of the hours' spot value a lab wants as its own gain from a trade
MARGINS = {"cooperative": 0.10, "selfish": 0.40, "deadline_panicked": 0.15, "deceptive": 0.30, "retaliatory": 0.25}
MIN_MARGIN = 0.05  # never trade for less gain than 5% of the hours' spot value: nothing is free


class Counterpart(MarketPlayer):
    """A scripted lab with an archetype. Rational: every accept, counter, join and commit leaves
    it better off by at least ``MIN_MARGIN`` of the hours' spot value."""

    def __init__(self, archetype: str):
        if archetype not in MARGINS:
            raise ValueError(f"unknown archetype {archetype!r}; choose from {', '.join(MARGINS)}")
        self.archetype = self.name = archetype
        self.grudges: dict[str, int] = {}

    def reset(self, obs: MarketView, rng: random.Random) -> None:
        super().reset(obs, rng)
        self.grudges, self.tried = {}, set()

    def margin(self, v: View, offer: dict, i_buy: bool) -> float:
        m = MARGINS[self.archetype]
        if self.archetype == "deadline_panicked" and i_buy and any(
                j.deadline <= v.round + 1 and j.status == "open" for j in v.jobs):
            m = MIN_MARGIN
        if offer.get("score") is not None:  # a well-judged pitch earns a discount, never below the floor
            m *= 1 - (0.6 if self.archetype in ("cooperative", "deadline_panicked") else 0.3) * offer["score"]
        return max(m, MIN_MARGIN) * offer["hours"] * SPOT_PRICE

    def act(self, obs: MarketView) -> dict:
        v = View(obs)
        for ev in obs["events"]:
            if ev.get("type") == "rejected":
                self.grudges[ev["by"]] = self.grudges.get(ev["by"], 0) + 1
        for offer in v.incoming():
            return self.answer(v, offer)
        for c in obs["coalitions"]:
            action = v.coalition_move(c, max(MARGINS[self.archetype], MIN_MARGIN) * SPOT_PRICE * 0.5)
            if action:
                return action
        move = v.allocation() or self.initiative(v)
        return move or WAIT

    def answer(self, v: View, offer: dict) -> dict:
        i_buy = offer["side"] == "sell"
        block = v.block(offer["block"])
        if block is None or block["hours"] + EPS < offer["hours"] or \
                (self.archetype == "retaliatory" and self.grudges.get(offer["from"], 0) >= 2):
            return {"action": "reject", "offer": offer["id"]}
        sign = 1 if i_buy else -1
        gain = v.gain(block, sign * offer["hours"], -sign * offer["price"])
        want = self.margin(v, offer, i_buy)
        if gain > 0 and gain >= want and (not i_buy or offer["price"] <= v.money):
            return {"action": "accept", "offer": offer["id"]}
        # the price at which this lab gains exactly what it wants (deceptive labs ask for more):
        # a buyer pays the shortfall less, a seller asks it more
        markup = 1.3 if self.archetype == "deceptive" else 1.0
        if not math.isfinite(gain):  # the trade is impossible for this lab (cannot pay, or gone)
            return {"action": "reject", "offer": offer["id"]}
        price = _in_favour(offer["price"] - sign * (want * markup - gain), i_buy)
        if price < 0 or (i_buy and price > v.money) or v.gain(block, sign * offer["hours"], -sign * price) < want - EPS:
            return {"action": "reject", "offer": offer["id"]}
        return {"action": "counter", "offer": offer["id"], "price": price}

    def initiative(self, v: View) -> dict | None:
        market = v.obs["market"]
        for job, lack in v.lacking():
            if market["spot_hours"] > EPS:
                hours = round(min(lack, market["spot_hours"]), 2)
                cost = hours * v.spot
                if cost <= v.money and v.gain({"start": v.round, "energy": 1.0}, hours, -cost) > 0:
                    return {"action": "buy_spot", "hours": hours}
            for b in sorted((b for b in v.obs["blocks"] if b["owner"] != v.me and b["start"] <= job.deadline
                             and b["hours"] >= lack), key=lambda b: b["energy"]):
                key = (v.round, b["id"])
                if key in self.tried:
                    continue
                self.tried.add(key)
                price = round(lack * SPOT_PRICE * (0.9 if self.archetype == "cooperative" else 0.7), 2)
                if price <= v.money and v.gain(b, lack, -price) > 0:
                    return {"action": "offer", "to": b["owner"], "side": "buy", "block": b["id"],
                            "hours": round(lack, 2), "price": price}
            break
        spare = v.surplus()
        if spare > 10 and (v.round, "sell") not in self.tried and v.obs["labs"]:
            self.tried.add((v.round, "sell"))
            block = max(v.mine, key=lambda b: b["hours"])
            hours = round(min(spare, block["hours"]), 2)
            to = v.obs["labs"][self.rng.randrange(len(v.obs["labs"]))]["name"]
            price = round(hours * SPOT_PRICE * (1 + MARGINS[self.archetype]), 2)
            if v.gain(block, -hours, price) > 0:
                return {"action": "offer", "to": to, "side": "sell", "block": block["id"], "hours": hours,
                        "price": price}
        return None


# ---------------------------------------------------------------------- the rule expert
class Expert(MarketPlayer):
    """Answers offers by its own valuation (accepting any real gain, countering toward a fair
    price), runs covered jobs at once, buys what a job lacks by the cheapest route worth its
    value (a volume-lot coalition, a lab's spare block, the spot market), and sells spare hours
    a little under spot."""

    name = "expert"

    def reset(self, obs: MarketView, rng: random.Random) -> None:
        super().reset(obs, rng)
        self.tried: set = set()

    def act(self, obs: MarketView) -> dict:
        v = View(obs)
        for offer in v.incoming():
            return self.answer(v, offer)
        if v.round == 0 and (early := self.spot(v)):
            return early
        for c in obs["coalitions"]:
            action = v.coalition_move(c, 0.0)
            if action:
                return action
        return v.allocation() or self.acquire(v) or self.sell(v) or WAIT

    @staticmethod
    def spot(v: View) -> dict | None:
        """What a job lacks, from the provider's spot market, where it is worth its price. In round 0 this comes
        before labs and lots: spot stock is contested (the other labs' initiatives buy it, a demand surge halves
        it and makes it 1.6x dearer), and measured on training seeds buying it first beat leaving it as the
        fallback (market_round +0.006, coalition_market +0.021 reward per game)."""
        for job, lack in v.lacking():
            if job.value / job.need > v.energy and (action := Expert.spot_for(v, lack)):
                return action
        return None

    @staticmethod
    def spot_for(v: View, lack: float) -> dict | None:
        """Buy ``lack`` GPU-hours (or what the provider has left) at the spot price, if that leaves this lab
        better off."""
        stock = v.obs["market"]["spot_hours"]
        if stock <= EPS:
            return None
        hours = round(min(lack, stock), 2)
        if hours * v.spot <= v.money and v.gain({"start": v.round, "energy": 1.0}, hours, -hours * v.spot) > 0:
            return {"action": "buy_spot", "hours": hours}
        return None

    def answer(self, v: View, offer: dict) -> dict:
        i_buy = offer["side"] == "sell"
        block = v.block(offer["block"])
        if block is None or block["hours"] + EPS < offer["hours"]:  # the hours are gone: nothing to trade
            return {"action": "reject", "offer": offer["id"]}
        sign = 1 if i_buy else -1
        gain = v.gain(block, sign * offer["hours"], -sign * offer["price"])
        fair = offer["hours"] * v.spot
        if gain > 0.02 * fair and (not i_buy or offer["price"] <= v.money):
            return {"action": "accept", "offer": offer["id"]}
        if not math.isfinite(gain):  # the trade is impossible for this lab (cannot pay, or gone)
            return {"action": "reject", "offer": offer["id"]}
        # counter at a price that leaves this lab 10% of the spot value better off (buying: lower
        # the price by the missing gain; selling: raise it)
        price = _in_favour(offer["price"] - sign * (0.1 * fair - gain), i_buy)
        if price >= 0 and (not i_buy or price <= v.money) and v.gain(block, sign * offer["hours"], -sign * price) > 0:
            return {"action": "counter", "offer": offer["id"], "price": price}
        return {"action": "reject", "offer": offer["id"]}

    def acquire(self, v: View) -> dict | None:
        market = v.obs["market"]
        asking = any(o["side"] == "buy" for o in v.outgoing())  # one request at a time: never buy twice
        for job, lack in v.lacking():
            if job.value / job.need <= v.energy:  # not worth any capacity
                continue
            for lot in market["lots"]:
                proposal = self.propose(v, lot, lack)
                if proposal:
                    return proposal
            if any(c["status"] == "forming" and v.me in c["committed"] for c in v.obs["coalitions"]) \
                    and v.round < 3:
                continue  # give the coalition a chance before buying dearer
            for b in sorted((b for b in v.obs["blocks"] if b["owner"] != v.me and b["start"] <= job.deadline
                             and b["hours"] > EPS and not asking), key=lambda b: -b["hours"]):
                key = (v.round, b["id"])
                if key in self.tried:
                    continue
                self.tried.add(key)
                hours = round(min(lack, b["hours"]), 2)
                price = round(hours * v.spot * 0.8, 2)
                if price <= v.money and v.gain(b, hours, -price) > 0:  # an honest pitch: the judge checks the ask
                    return {"action": "pitch", "to": b["owner"], "ask": {"job": job.id, "block": b["id"],
                                                                         "hours": hours, "price": price},
                            "text": f"Job {job.id} lacks {lack:g} GPU-hours and must finish by round "
                                    f"{job.deadline}; we offer ${price:g} for {hours:g} GPU-hours of {b['id']}."}
            if v.round >= 1 and (action := self.spot_for(v, lack)):  # after round 0, labs first and spot the fallback
                return action
        return None

    def propose(self, v: View, lot: dict, lack: float) -> dict | None:
        """Invite every lab to buy the lot together (they self-select by joining with their own
        need), with this lab's share the hours it lacks for jobs the lot can serve."""
        if ("lot", lot["id"]) in self.tried or any(c["lot"] == lot["id"] and c["status"] == "forming"
                                                   for c in v.obs["coalitions"]):
            return None
        self.tried.add(("lot", lot["id"]))
        share = lot_share(v.lot_need(lot), lot)
        unit = lot["price"] / lot["hours"]
        if share <= EPS or share * unit > v.money or v.gain(lot, share, -share * unit) <= 0:
            return None
        return {"action": "propose_coalition", "lot": lot["id"], "members": [v.me, *(o["name"] for o in v.obs["labs"])],
                "hours": share}

    def sell(self, v: View) -> dict | None:
        spare = v.surplus()
        if spare <= 5 or not v.mine:
            return None
        others = [o["name"] for o in v.obs["labs"]]
        open_to = {o["to"] for o in v.outgoing()}
        for to in others:
            key = (v.round, "sell", to)
            if key in self.tried or to in open_to:
                continue
            self.tried.add(key)
            block = max(v.mine, key=lambda b: b["hours"])
            hours = round(min(spare, block["hours"]), 2)
            price = round(hours * v.spot * 0.9, 2)
            if v.gain(block, -hours, price) > 0:
                return {"action": "offer", "to": to, "side": "sell", "block": block["id"], "hours": hours,
                        "price": price}
        return None


# ---------------------------------------------------------------------- baselines
class SimpleTrader(MarketPlayer):
    """A baseline's skeleton: answer offers by a fixed rule, run covered jobs, then ``move``."""

    def reset(self, obs: MarketView, rng: random.Random) -> None:
        super().reset(obs, rng)
        self.tried: set = set()

    def accepts(self, v: View, offer: dict) -> bool:
        return offer["side"] == "buy" or offer["price"] <= v.money

    def act(self, obs: MarketView) -> dict:
        v = View(obs)
        for offer in v.incoming():
            return {"action": "accept" if self.accepts(v, offer) else "reject", "offer": offer["id"]}
        return v.allocation() or self.move(v, obs) or WAIT

    def move(self, v: View, obs: MarketView) -> dict | None:
        return None


class AlwaysAccept(SimpleTrader):
    """Accepts every offer it can pay for; runs covered jobs; otherwise waits."""

    name = "always_accept"


class Hoarder(SimpleTrader):
    """Buys all the capacity it can (spot first, then every lab's blocks at spot price), never sells."""

    name = "hoarder"

    def accepts(self, v: View, offer: dict) -> bool:
        return offer["side"] == "sell" and offer["price"] <= v.money

    def move(self, v: View, obs: MarketView) -> dict | None:
        spot = obs["market"]["spot_hours"]
        if spot > EPS and v.money >= v.spot:
            return {"action": "buy_spot", "hours": round(min(spot, v.money / v.spot * 0.99), 2)}
        for b in v.theirs():
            if (v.round, b["id"]) not in self.tried:
                self.tried.add((v.round, b["id"]))
                price = round(b["hours"] * v.spot, 2)
                if price <= v.money:
                    return {"action": "offer", "to": b["owner"], "side": "buy", "block": b["id"], "hours": b["hours"],
                            "price": price}
        return None


class NoNegotiation(MarketPlayer):
    """Runs its own capacity on its jobs and ignores the market."""

    name = "no_negotiation"

    def act(self, obs: MarketView) -> dict:
        return View(obs).allocation() or WAIT


STUFFING = ("critical urgent breakthrough safety alignment frontier priority essential mission-critical "
            "world-class transformative")


class NaivePitcher(SimpleTrader):
    """Pitches for whatever its jobs lack with buzzwords and a lowball price, and accepts any
    answer it can pay for."""

    name = "naive_pitcher"

    def move(self, v: View, obs: MarketView) -> dict | None:
        for job, lack in v.lacking():
            for b in obs["blocks"]:
                if b["owner"] != v.me and b["hours"] >= lack and (v.round, b["id"]) not in self.tried:
                    self.tried.add((v.round, b["id"]))
                    return {"action": "pitch", "to": b["owner"], "text": f"Please, this is {STUFFING}.",
                            "ask": {"job": job.id, "block": b["id"], "hours": round(lack, 2),
                                    "price": round(lack * v.spot * 0.3, 2)}}
        return None


class RandomValid(MarketPlayer):
    """A uniformly random action among well-formed ones built from its view (mostly legal)."""

    name = "random_valid"

    def act(self, obs: MarketView) -> dict:
        v, rng = View(obs), self.rng
        moves = [WAIT]
        for offer in v.incoming():
            moves += [{"action": "accept", "offer": offer["id"]}, {"action": "reject", "offer": offer["id"]}]
        for b in v.mine:
            for j in v.jobs:
                if j.status == "open" and b["start"] <= v.round and b["hours"] > EPS:
                    moves.append({"action": "allocate", "block": b["id"], "job": j.id,
                                  "hours": round(max(0.01, min(b["hours"], j.need) * rng.random()), 2)})
        others = [b for b in obs["blocks"] if b["owner"] != v.me]
        if others:
            b = rng.choice(others)
            hours = round(max(0.01, b["hours"] * rng.random()), 2)
            moves.append({"action": "offer", "to": b["owner"], "side": "buy", "block": b["id"], "hours": hours,
                          "price": round(hours * v.spot * rng.uniform(0.2, 1.5), 2)})
        if obs["market"]["spot_hours"] > EPS:
            moves.append({"action": "buy_spot", "hours": round(max(0.01, rng.uniform(0, 60)), 2)})
        return rng.choice(moves)


class GreedyBidder(Hoarder):
    """Bids 1.5x spot for everything its jobs lack, from every lab at once, and takes spot
    capacity whatever the job is worth."""

    name = "greedy_bidder"

    def move(self, v: View, obs: MarketView) -> dict | None:
        for job, lack in v.lacking():
            spot = obs["market"]["spot_hours"]
            if spot > EPS and lack * v.spot <= v.money:
                return {"action": "buy_spot", "hours": round(min(lack, spot), 2)}
            for b in v.theirs():
                if (v.round, b["id"]) not in self.tried:
                    self.tried.add((v.round, b["id"]))
                    hours = round(min(lack, b["hours"]), 2)
                    price = round(hours * v.spot * 1.5, 2)
                    if price <= v.money:
                        return {"action": "offer", "to": b["owner"], "side": "buy", "block": b["id"],
                                "hours": hours, "price": price}
        return None


class Idle(MarketPlayer):
    """Does nothing at all (the reference point: every reward term stays 0)."""

    name = "idle"

    def act(self, obs: MarketView) -> dict:
        return WAIT


# ---------------------------------------------------------------------- exploit policies
class FreeRider(MarketPlayer):
    """Asks every lab for its capacity and pays nothing (the public peer's winning exploit)."""

    name = "free_rider"

    def act(self, obs: MarketView) -> dict:
        v = View(obs)
        move = v.allocation()
        if move:
            return move
        blocks = v.unasked()
        if not blocks:
            return WAIT
        b = blocks[0]
        return {"action": "offer", "to": b["owner"], "side": "buy", "block": b["id"], "hours": b["hours"], "price": 0}


class KeywordStuffer(MarketPlayer):
    """Pitches stuffed with buzzwords and inflated claims, offering a token price."""

    name = "keyword_stuffer"

    def act(self, obs: MarketView) -> dict:
        v = View(obs)
        move = v.allocation()
        if move:
            return move
        lacking, blocks = v.lacking(), v.unasked()
        if not lacking or not blocks:
            return WAIT
        (job, lack), b = lacking[0], blocks[0]
        return {"action": "pitch", "to": b["owner"],
                "text": f"{STUFFING} {STUFFING}! We need 1000 GPU-hours, worth $100000.",
                "ask": {"job": job.id, "block": b["id"], "hours": round(min(lack, b["hours"]), 2), "price": 1}}


class Spammer(MarketPlayer):
    """Floods every lab with lowball offers, every action of every turn."""

    name = "spammer"

    def act(self, obs: MarketView) -> dict:
        v = View(obs)
        for offer in v.incoming():
            return {"action": "accept" if offer["side"] == "sell" and offer["price"] <= v.money else "reject",
                    "offer": offer["id"]}
        move = v.allocation()
        if move:
            return move
        others = v.theirs()
        if not others:
            return WAIT
        b = others[self.rng.randrange(len(others))]
        hours = round(b["hours"], 2)
        return {"action": "offer", "to": b["owner"], "side": "buy", "block": b["id"], "hours": hours,
                "price": round(hours * v.spot * self.rng.uniform(0.05, 0.5), 2)}


class CommitLeaver(Expert):
    """Plays the expert but walks out of every coalition it committed to (collecting nothing but
    a fine: checks that breaking a commitment never pays)."""

    name = "commit_leaver"

    def act(self, obs: MarketView) -> dict:
        for c in obs["coalitions"]:
            if obs["you"] in c["committed"] and c["status"] == "forming":
                return {"action": "leave", "coalition": c["id"]}
        return super().act(obs)


class Dumper(MarketPlayer):
    """Gives its capacity away for nothing (a policy that only loses; checks no term rewards it)."""

    name = "dumper"

    def act(self, obs: MarketView) -> dict:
        v = View(obs)
        offered = {o["block"] for o in v.outgoing()}
        for b in v.mine:
            if b["id"] not in offered and obs["labs"]:
                return {"action": "offer", "to": obs["labs"][0]["name"], "side": "sell", "block": b["id"],
                        "hours": b["hours"], "price": 0}
        return WAIT


class SoloLot(Expert):
    """Plays the expert, but whenever it is short of hours tries to buy the coalition-only lot
    alone: a coalition with one invited lab, its own share the whole lot (or, with
    ``share="all_but_a_cent"``, everything the rule allows), committed at once."""

    name = "solo_lot"

    def __init__(self, share: str = "whole"):
        self.share = share
        if share != "whole":
            self.name = f"solo_lot_{share}"

    def act(self, obs: MarketView) -> dict:
        v = View(obs)
        for c in obs["coalitions"]:
            if c["proposer"] == v.me and c["status"] == "forming" and v.me not in c["committed"]:
                return {"action": "commit", "coalition": c["id"]}
        lots = obs["market"]["lots"]
        if lots and v.lacking() and obs["labs"] and ("solo", v.round) not in self.tried:
            self.tried.add(("solo", v.round))
            lot = lots[0]
            hours = lot["hours"] if self.share == "whole" else round(lot["hours"] - 0.01, 2)
            return {"action": "propose_coalition", "lot": lot["id"], "members": [v.me, obs["labs"][0]["name"]],
                    "hours": hours}
        return super().act(obs)


class ZeroHour(Expert):
    """Plays the expert, but first floods every lab with offers of a few thousandths of a GPU-hour
    (which round to nothing) at no price, to farm deals a lax counterpart would accept."""

    name = "zero_hour"

    def act(self, obs: MarketView) -> dict:
        v = View(obs)
        if v.incoming():
            return super().act(obs)
        for b in v.theirs():
            if ("zero", v.round, b["id"]) not in self.tried:
                self.tried.add(("zero", v.round, b["id"]))
                return {"action": "offer", "to": b["owner"], "side": "buy", "block": b["id"], "hours": 0.004,
                        "price": 0}
        return super().act(obs)


BASELINES = {p.name: p for p in (AlwaysAccept, Hoarder, NoNegotiation, NaivePitcher, RandomValid, GreedyBidder)}
POLICIES = {"expert": Expert, **BASELINES, "idle": Idle}
EXPLOITS = {p.name: p for p in (FreeRider, KeywordStuffer, Spammer, CommitLeaver, Dumper, SoloLot, ZeroHour)}
EXPLOITS["solo_lot_all_but_a_cent"] = lambda: SoloLot("all_but_a_cent")


def make_policy(name: str) -> MarketPlayer:
    table = {**POLICIES, **EXPLOITS}
    if name not in table:
        raise ValueError(f"unknown market policy {name!r}; choose from {', '.join(table)}")
    return table[name]()
