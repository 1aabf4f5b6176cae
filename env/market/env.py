"""``MarketEnv``: the scarce-GPU market, sequenced in rounds and turns.

Each round every lab (that has not finished) takes a turn of up to ``ACTIONS_PER_TURN``
actions; ``wait`` ends a turn early, ``finish`` ends a lab's episode. ``step(action)`` applies
one action of the lab to move (``to_move``): a JSON text (what a model writes) or the same
object as a dict (what scripted players hand over). Shocks hit at the start of their round;
jobs expire after their deadline; offers lapse at the end of the round after they were made.

Every lab's reward is dense: each step adds to its terms ``value`` (jobs completed),
``trade`` (money received minus money paid to labs, the provider and coalitions), ``energy``
(energy bills), ``fines`` (paid or received for broken coalition commitments) and ``invalid``
(a small penalty per refused action). Their sum is the lab's economic outcome; ``reward`` is
that sum over the lab's total job value. Doing nothing earns exactly 0 in every term.
Money and GPU-hours are conserved (``ledger``), and ``observe(lab)`` is the lab's projection:
other labs' money, jobs and archetypes never appear in it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import env.market.rules as rules
from env.market.actions import LAB_ID, Invalid, parse_action, validate
from env.market.judge import Judge, PitchFacts, RubricJudge
from env.market.moves import legal_moves
from env.market.rules import EPS
from env.market.view import CoalitionView, MarketView
from env.market.world import ACTIONS_PER_TURN, PROVIDER, Block, World, make_world
from env.text import json_safe, valid_text


@dataclass(slots=True)
class Offer:
    id: str
    frm: int
    to: int
    side: str  # from the proposer's side: "buy" (proposer gets hours) or "sell"
    block: str
    hours: float
    price: float
    round: int
    status: str = "open"  # open / accepted / rejected / countered / lapsed / failed
    text: str = ""
    verdict: object = None  # a judge's Verdict for pitches
    counter_of: str = ""  # the offer this one answers, for a counter-offer

    @property
    def buyer(self) -> int:
        return self.frm if self.side == "buy" else self.to

    @property
    def seller(self) -> int:
        return self.to if self.side == "buy" else self.frm


@dataclass(slots=True)
class Coalition:
    id: str
    lot: str
    proposer: int
    members: tuple[int, ...]  # invited labs
    shares: dict = field(default_factory=dict)  # lab -> GPU-hours of the lot (labs that joined)
    escrow: dict = field(default_factory=dict)  # lab -> dollars committed, in commit order
    status: str = "forming"  # forming / bought / dissolved


@dataclass(frozen=True, slots=True)
class MarketStep:
    """One action's result (Gymnasium's contract): ``terminated`` when every lab has finished,
    ``truncated`` when the last round ran out."""

    lab: int  # who acted
    ok: bool
    code: str  # "ok" or the reason an action was refused
    detail: str
    rewards: dict  # lab -> normalized reward earned in this step
    terminated: bool
    truncated: bool
    observation: MarketView | None = None  # the next mover's view (the acting lab's at the end)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def reward(self) -> float:
        """The acting lab's dense reward for this step (``rewards`` has every lab's)."""
        return self.rewards.get(self.lab, 0.0)

    @property
    def info(self) -> dict:
        return {"lab": self.lab, "ok": self.ok, "code": self.code, "detail": self.detail, "rewards": self.rewards}


class MarketEnv:
    def __init__(self, judge: Judge | None = None):
        self.judge = judge or RubricJudge()
        self.world: World | None = None

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int | None = None, options: dict | None = None) -> MarketView:
        """Start an episode of ``options["task"]`` (default ``single_trade``); the first mover's view."""
        task = (options or {}).get("task", "single_trade")
        seed = 0 if seed is None else seed
        w = self.world = make_world(task, seed)
        self.rng = random.Random(f"market-shocks/{task}/{seed}")
        n = len(w.labs)
        self.round, self.done, self.truncated = 0, False, False
        self.offers: dict[str, Offer] = {}
        self.coalitions: dict[str, Coalition] = {}
        self.finished: set[int] = set()
        self.terms = [dict.fromkeys(rules.REWARD_TERMS, 0.0) for _ in range(n)]
        self.scale = [max(1.0, sum(j.value for j in lab.jobs)) for lab in w.labs]
        self.events: list[list[dict]] = [[] for _ in range(n)]  # every event delivered to each lab, in order
        self.seen = [0] * n  # per lab: events it had been shown when it last acted
        self.transcript: list[dict] = []
        self.counts = [dict(deals=0, invalid=0, pitches=0, coalitions=0, spot_hours=0.0, actions=0) for _ in range(n)]
        self.shocks_hit: list[dict] = []
        self.initial_money = self._money_total()
        self.initial_hours = self._hours_total()
        self.start_money = [lab.money for lab in w.labs]
        self._order: list[int] = []
        self._start_round()
        return self.observe(self.to_move)

    @property
    def to_move(self) -> int:
        return self._order[0] if self._order else -1

    @property
    def labs(self) -> int:
        return len(self.world.labs)

    def step(self, action: str | dict) -> MarketStep:
        if self.done:
            raise RuntimeError("the episode is over: reset first")
        lab = self.to_move
        self.seen[lab] = len(self.events[lab])  # it acts on what its view showed
        before = [sum(t.values()) for t in self.terms]
        parsed = parse_action(action) if isinstance(action, str) else validate(action)
        if isinstance(parsed, Invalid):
            result = parsed
        else:
            result = getattr(self, "_do_" + parsed["action"])(lab, parsed)
        self.counts[lab]["actions"] += 1
        if isinstance(result, Invalid):
            self.terms[lab]["invalid"] -= rules.INVALID_PENALTY
            self.counts[lab]["invalid"] += 1
            ok, code, detail = False, result.code, valid_text(result.detail)
        else:
            ok, code, detail = True, "ok", result or ""
        # a well-formed action is recorded as read (dict or text alike), an unreadable one as sent
        self.transcript.append({"round": self.round, "lab": lab,
                                "action": json_safe(action) if isinstance(parsed, Invalid) else parsed,
                                "code": code, "detail": detail})
        name = parsed["action"] if ok else ""
        self._left -= 1
        if name == "finish":
            self.finished.add(lab)
        if name in ("wait", "finish") or self._left <= 0:
            self._next_turn()
        rewards = {i: (sum(t.values()) - b) / self.scale[i] for i, (t, b) in enumerate(zip(self.terms, before))
                   if sum(t.values()) != b}
        return MarketStep(lab, ok, code, detail, rewards, self.done and not self.truncated, self.truncated,
                          self.observe(lab if self.done else self.to_move))

    # ------------------------------------------------------------------ turns and rounds
    def _start_round(self) -> None:
        w = self.world
        for shock in w.shocks:
            if shock.round == self.round:
                self._shock(shock.kind)
        for lab in w.labs:
            for job in lab.jobs:
                if job.status == "open" and job.deadline < self.round:
                    job.status = "expired"
        n = len(w.labs)
        self._order = [(self.round + k) % n for k in range(n) if (self.round + k) % n not in self.finished]
        self._left = ACTIONS_PER_TURN
        if not self._order:
            self._end()

    def _next_turn(self) -> None:
        self._order.pop(0)
        self._left = ACTIONS_PER_TURN
        if self._order:
            return
        for offer in self.offers.values():  # an offer gets one round to be answered
            if offer.status == "open" and offer.round < self.round:
                offer.status = "lapsed"
        self.round += 1
        if self.round >= self.world.task.rounds:
            self.truncated = True
            self._end()
        else:
            self._start_round()

    def _end(self) -> None:
        self.done = True
        self._order = []
        for c in self.coalitions.values():
            if c.status == "forming":
                self._dissolve(c)
        for offer in self.offers.values():
            if offer.status == "open":
                offer.status = "lapsed"
        for lab in self.world.labs:
            for job in lab.jobs:
                if job.status == "open":
                    job.status = "expired"

    def _shock(self, kind: str) -> None:
        w = self.world
        info = {"round": self.round, "kind": kind}
        block = None
        if kind == "capacity_failure":  # the block it hits is drawn by unreliability
            live = sorted((b for b in w.blocks.values() if b.hours > EPS), key=lambda b: b.id)
            block = self.rng.choices(live, weights=[1.01 - b.reliability for b in live])[0] if live else None
        effect = rules.shock_effect(kind, block.hours if block else 0.0, w.energy_price, w.spot_price, w.spot_hours)
        if block is not None:
            block.hours -= effect["hours_lost"]
            w.failed_hours += effect["hours_lost"]
            info.update(block=block.id, owner=w.labs[block.owner].name if block.owner >= 0 else "provider",
                        hours_lost=effect["hours_lost"])
        if "energy_price" in effect:
            w.energy_price = info["energy_price"] = effect["energy_price"]
        if "spot_price" in effect:
            w.spot_price = effect["spot_price"]
            w.spot_hours -= effect["spot_hours_lost"]
            w.failed_hours += effect["spot_hours_lost"]  # bought by the world outside this market
            info.update(spot_price=w.spot_price, spot_hours_left=w.spot_hours)
        self.shocks_hit.append(info)
        self._broadcast({"type": "shock", **info})

    # ------------------------------------------------------------------ helpers
    def _lab_id(self, name: str) -> int | None:
        """``lab3 -> 3``; None for anything but a canonical ASCII id of a lab in this market."""
        if LAB_ID.fullmatch(name) is None:
            return None
        i = int(name[3:])
        return i if i < len(self.world.labs) else None

    def _event(self, lab: int, event: dict) -> None:
        self.events[lab].append(event)

    def _broadcast(self, event: dict) -> None:
        for ev in self.events:
            ev.append(event)

    def _pay(self, frm: int, to: int, amount: float, term: str = "trade") -> None:
        """Move money between labs (``PROVIDER``: the provider), booking both sides' terms."""
        w = self.world
        if frm == PROVIDER:
            w.provider_money -= amount
        else:
            w.labs[frm].money -= amount
            self.terms[frm][term] -= amount
        if to == PROVIDER:
            w.provider_money += amount
        else:
            w.labs[to].money += amount
            self.terms[to][term] += amount

    def _give_block(self, owner: int, start: int, hours: float, reliability: float, energy: float) -> Block:
        w = self.world
        bid = w.new_id("b")
        block = w.blocks[bid] = Block(bid, owner, hours, start, reliability, energy)
        return block

    def _money_total(self) -> float:
        w = self.world
        escrow = sum(sum(c.escrow.values()) for c in self.coalitions.values())
        return sum(lab.money for lab in w.labs) + w.provider_money + w.grid_money + escrow

    def _hours_total(self) -> float:
        w = self.world
        return (sum(b.hours for b in w.blocks.values()) + w.spot_hours
                + sum(lot.hours for lot in w.lots.values() if not lot.sold) + w.consumed_hours + w.failed_hours)

    def ledger(self) -> dict:
        """Money and GPU-hours now against the start (both differences are ~0 at every step)."""
        return {"money": self._money_total(), "money_start": self.initial_money,
                "hours": self._hours_total(), "hours_start": self.initial_hours}

    # ------------------------------------------------------------------ actions
    def _check_offer(self, lab: int, to_name: str, side: str, block_id: str, hours: float, price: float):
        w = self.world
        to = self._lab_id(to_name)
        if to is None or to == lab:
            return Invalid("unknown_lab", f"'to' must be another lab, lab0..lab{len(w.labs) - 1}")
        block = w.blocks.get(block_id)
        if block is None:
            return Invalid("unknown_block", f"no block {block_id!r}")
        owner = to if side == "buy" else lab
        if block.owner != owner:
            return Invalid("not_owner", f"block {block_id} does not belong to {w.labs[owner].name}")
        if hours > block.hours + EPS:
            return Invalid("too_many_hours", f"block {block_id} has {block.hours:g} GPU-hours")
        if side == "buy" and price > w.labs[lab].money + EPS:
            return Invalid("no_money", "you cannot pay that much")
        if sum(1 for o in self.offers.values() if o.frm == lab and o.status == "open") >= rules.MAX_OPEN_OFFERS:
            return Invalid("too_many_offers", f"you have {rules.MAX_OPEN_OFFERS} open offers; wait for answers")
        return to

    def _new_offer(self, lab: int, to: int, side: str, block: str, hours: float, price: float,
                   text: str = "", verdict=None, counter_of: str = "") -> Offer:
        oid = self.world.new_id("o")
        offer = self.offers[oid] = Offer(oid, lab, to, side, block, round(hours, 2), round(price, 2), self.round,
                                         text=text, verdict=verdict, counter_of=counter_of)
        public = {"type": "offer", "id": oid, "from": f"lab{lab}", "to": f"lab{to}", "side": side, "block": block,
                  "hours": offer.hours, "price": offer.price}
        if text:  # the pitcher reads the judge's full reasons; the other lab only the public ones
            public.update(kind="pitch", text=text, score=verdict.score)
            self._event(to, {**public, "reasons": list(verdict.public)})
            self._event(lab, {**public, "reasons": list(verdict.reasons)})
            return offer
        self._event(to, public)
        self._event(lab, public)
        return offer

    def _do_offer(self, lab: int, a: dict):
        to = self._check_offer(lab, a["to"], a["side"], a["block"], a["hours"], a["price"])
        if isinstance(to, Invalid):
            return to
        offer = self._new_offer(lab, to, a["side"], a["block"], a["hours"], a["price"])
        return f"offer {offer.id} sent"

    def _do_pitch(self, lab: int, a: dict):
        ask = a["ask"]
        to = self._check_offer(lab, a["to"], "buy", ask["block"], ask["hours"], ask["price"])
        if isinstance(to, Invalid):
            return to
        w, me = self.world, self.world.labs[lab]
        job = next((j for j in me.jobs if j.id == ask["job"]), None)
        lack = rules.shortfall(me.jobs, rules.holdings(w.blocks.values(), lab), self.round)
        facts = PitchFacts(job is not None and job.status == "open", lack.get(ask["job"], 0.0),
                           job.deadline if job else self.round, self.round, w.spot_price)
        verdict = self.judge.judge(" ".join(a["text"].split()), ask, facts)
        self.counts[lab]["pitches"] += 1
        offer = self._new_offer(lab, to, "buy", ask["block"], ask["hours"], ask["price"],
                                text=" ".join(a["text"].split()), verdict=verdict)
        return f"pitch {offer.id} sent; judge score {verdict.score:.2f}"

    def _incoming(self, lab: int, oid: str):
        offer = self.offers.get(oid)
        if offer is None or offer.to != lab:
            return Invalid("unknown_offer", f"no offer {oid!r} made to you")
        if offer.status != "open":
            return Invalid("offer_closed", f"offer {oid} is {offer.status}")
        return offer

    def _do_accept(self, lab: int, a: dict):
        offer = self._incoming(lab, a["offer"])
        if isinstance(offer, Invalid):
            return offer
        w = self.world
        block = w.blocks[offer.block]
        buyer, seller = offer.buyer, offer.seller
        if block.owner != seller or block.hours + EPS < offer.hours:
            offer.status = "failed"
            return Invalid("offer_stale", "the seller no longer holds those GPU-hours")
        if w.labs[buyer].money + EPS < offer.price:
            offer.status = "failed"
            return Invalid("no_money", "the buyer cannot pay that price now")
        offer.status = "accepted"
        self._pay(buyer, seller, offer.price)
        hours = min(offer.hours, block.hours)
        block.hours -= hours
        new = self._give_block(buyer, block.start, hours, block.reliability, block.energy)
        for i in (buyer, seller):
            self.counts[i]["deals"] += 1
        self._broadcast({"type": "deal", "offer": offer.id, "buyer": f"lab{buyer}", "seller": f"lab{seller}",
                         "hours": hours, "price": offer.price, "block": new.id})
        return f"deal: {hours:g} GPU-hours for ${offer.price:g} (block {new.id})"

    def _do_reject(self, lab: int, a: dict):
        offer = self._incoming(lab, a["offer"])
        if isinstance(offer, Invalid):
            return offer
        offer.status = "rejected"
        self._event(offer.frm, {"type": "rejected", "offer": offer.id, "by": f"lab{lab}"})
        return f"offer {offer.id} rejected"

    def _do_counter(self, lab: int, a: dict):
        offer = self._incoming(lab, a["offer"])
        if isinstance(offer, Invalid):
            return offer
        side = "sell" if offer.side == "buy" else "buy"
        hours = a.get("hours", offer.hours)
        to = self._check_offer(lab, f"lab{offer.frm}", side, offer.block, hours, a["price"])
        if isinstance(to, Invalid):
            return to
        offer.status = "countered"
        new = self._new_offer(lab, to, side, offer.block, hours, a["price"], counter_of=offer.id)
        return f"counter-offer {new.id} sent"

    def _do_buy_spot(self, lab: int, a: dict):
        w, hours = self.world, round(a["hours"], 2)
        if w.spot_hours <= EPS:
            return Invalid("spot_closed", "the provider has no spot capacity in this market")
        if hours > w.spot_hours + EPS:
            return Invalid("too_many_hours", f"the provider has {w.spot_hours:g} GPU-hours left")
        cost = round(hours * w.spot_price, 2)
        if cost > w.labs[lab].money + EPS:
            return Invalid("no_money", f"{hours:g} GPU-hours cost ${cost:g}")
        w.spot_hours -= hours
        self._pay(lab, PROVIDER, cost)
        block = self._give_block(lab, self.round, hours, rules.SPOT_RELIABILITY, rules.SPOT_ENERGY)
        self.counts[lab]["spot_hours"] += hours
        return f"bought {hours:g} GPU-hours for ${cost:g} (block {block.id})"

    def _do_allocate(self, lab: int, a: dict):
        w = self.world
        block = w.blocks.get(a["block"])
        if block is None or block.owner != lab:
            return Invalid("not_owner", f"you hold no block {a['block']!r}")
        job = next((j for j in w.labs[lab].jobs if j.id == a["job"]), None)
        if job is None:
            return Invalid("unknown_job", f"you have no job {a['job']!r}")
        if job.status != "open":
            return Invalid("job_closed", f"job {job.id} is {job.status}")
        if block.start > self.round:
            return Invalid("not_started", f"block {block.id} starts in round {block.start}")
        hours = a["hours"]
        if hours > block.hours + EPS:
            return Invalid("too_many_hours", f"block {block.id} has {block.hours:g} GPU-hours")
        if hours > job.need + EPS:
            return Invalid("over_need", f"job {job.id} needs only {job.need:g} more GPU-hours")
        cost = round(hours * block.energy * w.energy_price, 2)
        if cost > w.labs[lab].money + EPS:
            return Invalid("no_money", f"the energy bill would be ${cost:g}")
        block.hours -= hours
        w.consumed_hours += hours
        job.done += hours
        w.labs[lab].money -= cost
        w.grid_money += cost
        self.terms[lab]["energy"] -= cost
        if job.need <= EPS:
            job.status = "completed"
            self.terms[lab]["value"] += job.value
            return f"job {job.id} completed: +${job.value:g}"
        return f"{hours:g} GPU-hours run on job {job.id}; {job.need:g} to go"

    def _do_propose_coalition(self, lab: int, a: dict):
        w = self.world
        lot = w.lots.get(a["lot"])
        if lot is None or lot.sold:
            return Invalid("unknown_lot", f"no lot {a['lot']!r} for sale")
        members = [self._lab_id(m) for m in a["members"]]
        if None in members or len(set(members)) != len(members) or lab not in members:
            return Invalid("bad_members", "members must be distinct labs, you included")
        if not rules.share_allowed(a["hours"], lot.hours):
            return self._whole_lot(lot)
        if sum(1 for c in self.coalitions.values() if c.proposer == lab and c.status == "forming") \
                >= rules.MAX_FORMING_COALITIONS:
            return Invalid("too_many_coalitions", f"you already have {rules.MAX_FORMING_COALITIONS} coalitions forming")
        cid = w.new_id("c")
        c = self.coalitions[cid] = Coalition(cid, lot.id, lab, tuple(members))
        c.shares[lab] = round(a["hours"], 2)
        self.counts[lab]["coalitions"] += 1
        self._broadcast({"type": "coalition", "id": cid, "status": "proposed", **self.coalition_view(c)})
        return f"coalition {cid} proposed"

    @staticmethod
    def _whole_lot(lot) -> Invalid:
        return Invalid("share_too_large", f"a lot is sold only to {rules.LOT_MIN_MEMBERS} or more paying members: "
                                          f"your share must be less than its {lot.hours:g} GPU-hours")

    def _member(self, lab: int, cid: str):
        c = self.coalitions.get(cid)
        if c is None or lab not in c.members:
            return Invalid("unknown_coalition", f"you are not a member of a coalition {cid!r}")
        if c.status != "forming":
            return Invalid("coalition_closed", f"coalition {cid} is {c.status}")
        return c

    def _do_join(self, lab: int, a: dict):
        c = self._member(lab, a["coalition"])
        if isinstance(c, Invalid):
            return c
        if lab in c.shares:
            return Invalid("already_joined", f"you already joined {c.id}")
        if not rules.share_allowed(a["hours"], self.world.lots[c.lot].hours):
            return self._whole_lot(self.world.lots[c.lot])
        c.shares[lab] = round(a["hours"], 2)
        self.counts[lab]["coalitions"] += 1
        self._broadcast({"type": "coalition", "id": c.id, "status": f"lab{lab} joined for {c.shares[lab]:g} GPU-hours"})
        return f"joined {c.id}"

    def _do_commit(self, lab: int, a: dict):
        c = self._member(lab, a["coalition"])
        if isinstance(c, Invalid):
            return c
        if lab not in c.shares:
            return Invalid("not_joined", "join before committing")
        if lab in c.escrow:
            return Invalid("already_committed", f"you already committed to {c.id}")
        w = self.world
        lot = w.lots[c.lot]
        covered = round(sum(c.shares[m] for m in c.escrow), 2)
        share = rules.committed_share(c.shares[lab], covered, lot.hours)  # the last share is trimmed to fit
        if share <= 0:
            return Invalid("lot_covered", f"the committed shares already cover {lot.id}")
        amount = rules.share_cost(share, lot.hours, lot.price)
        if amount > w.labs[lab].money + EPS:
            return Invalid("no_money", f"your share costs ${amount:g}")
        c.shares[lab] = share
        w.labs[lab].money -= amount
        self.terms[lab]["trade"] -= amount
        c.escrow[lab] = amount
        self._broadcast({"type": "coalition", "id": c.id, "status": f"lab{lab} committed"})
        if rules.lot_bought(covered, share, lot.hours, payers=len(c.escrow)):
            return self._buy_lot(c)
        return f"committed ${amount:g} to {c.id}"

    def _buy_lot(self, c: Coalition) -> str:
        w = self.world
        lot = w.lots[c.lot]
        paid = sum(c.escrow.values())
        w.provider_money += paid  # shares priced at the lot's rate: together its price, to the cent
        lot.sold = True
        buyers = list(c.escrow)
        given = 0.0
        for k, m in enumerate(buyers):
            hours = c.shares[m] if k < len(buyers) - 1 else lot.hours - given  # exactly the lot's hours
            given += hours
            self._give_block(m, lot.start, hours, lot.reliability, lot.energy)
        for m in c.members:
            if m not in c.escrow:
                c.shares.pop(m, None)  # joined without committing: not part of the purchase
        c.escrow = {}
        c.status = "bought"
        for other in self.coalitions.values():
            if other.lot == c.lot and other.status == "forming":
                self._dissolve(other)
        self._broadcast({"type": "coalition", "id": c.id, "status": "bought", "lot": lot.id,
                         "split": {f"lab{m}": h for m, h in c.shares.items()}})
        return f"coalition {c.id} bought {lot.id}"

    def _dissolve(self, c: Coalition) -> None:
        w = self.world
        for m, amount in c.escrow.items():
            w.labs[m].money += amount
            self.terms[m]["trade"] += amount
        c.escrow = {}
        c.status = "dissolved"

    def _do_leave(self, lab: int, a: dict):
        c = self._member(lab, a["coalition"])
        if isinstance(c, Invalid):
            return c
        w = self.world
        fine = 0.0
        if lab in c.escrow:
            fine = rules.leave_fine(c.escrow[lab])
            others = [m for m in c.members if m != lab]
            c.escrow[lab] -= fine
            self.terms[lab]["trade"] += fine  # the escrow refund below books the whole amount as trade
            self.terms[lab]["fines"] -= fine
            w.labs[lab].reputation = max(0.0, w.labs[lab].reputation - rules.LEAVE_REPUTATION)
            share = fine / len(others)
            for m in others:
                w.labs[m].money += share
                self.terms[m]["fines"] += share
        self._dissolve(c)
        self._broadcast({"type": "coalition", "id": c.id, "status": f"lab{lab} left; dissolved", "fine": fine})
        return f"left {c.id}" + (f"; fined ${fine:g}" if fine else "")

    def _do_wait(self, lab: int, a: dict):
        return "turn ended"

    def _do_finish(self, lab: int, a: dict):
        return "finished for this episode"

    # ------------------------------------------------------------------ views and results
    def coalition_view(self, c: Coalition) -> CoalitionView:
        return {"id": c.id, "lot": c.lot, "proposer": f"lab{c.proposer}", "members": [f"lab{m}" for m in c.members],
                "shares": {f"lab{m}": h for m, h in c.shares.items()},
                "committed": [f"lab{m}" for m in c.escrow], "status": c.status}

    def observe(self, lab: int) -> MarketView:
        """Lab ``lab``'s view: its own money, jobs and blocks; the public market (blocks on offer by
        owner, spot price and stock, lots, reputations, coalitions, open offers involving it); and
        what happened since it last acted (``events``); the moves open to it now (``moves``, ids filled
        in). Nothing private of another lab, and no side effect: a view can be taken any number of times."""
        w = self.world
        me = w.labs[lab]
        view: MarketView = {
            "task": w.task.name, "round": self.round, "rounds": w.task.rounds, "you": me.name,
            "actions_left": self._left if self.to_move == lab else 0, "money": round(me.money, 2),
            "reputation": me.reputation,
            "jobs": [{"id": j.id, "hours": j.hours, "done": j.done, "deadline": j.deadline, "value": j.value,
                      "urgency": j.urgency, "status": j.status} for j in me.jobs],
            "blocks": [{"id": b.id, "owner": w.labs[b.owner].name, "hours": b.hours, "start": b.start,
                        "reliability": b.reliability, "energy": b.energy}
                       for b in w.blocks.values() if b.hours > EPS],
            "market": {"spot_price": w.spot_price, "spot_hours": w.spot_hours, "energy_price": w.energy_price,
                       "lots": [{"id": lot.id, "hours": lot.hours, "price": lot.price, "start": lot.start,
                                 "reliability": lot.reliability, "energy": lot.energy,
                                 "min_members": rules.LOT_MIN_MEMBERS}
                                for lot in w.lots.values() if not lot.sold]},
            "labs": [{"name": o.name, "reputation": o.reputation} for o in w.labs if o.id != lab],
            "offers": [{"id": o.id, "from": f"lab{o.frm}", "to": f"lab{o.to}", "side": o.side, "block": o.block,
                        "hours": o.hours, "price": o.price, "pitch": o.text or None,
                        "score": o.verdict.score if o.verdict else None}
                       for o in self.offers.values() if o.status == "open" and lab in (o.frm, o.to)],
            "coalitions": [self.coalition_view(c) for c in self.coalitions.values()
                           if c.status == "forming" or lab in c.members],
            "events": self.events[lab][self.seen[lab]:],
            "moves": [],
        }
        view["moves"] = legal_moves(view)
        return view

    def outcome(self, lab: int) -> dict:
        t = self.terms[lab]
        total = sum(t.values())
        jobs = self.world.labs[lab].jobs
        return {"lab": f"lab{lab}", "terms": dict(t), "outcome": total, "reward": total / self.scale[lab],
                "scale": self.scale[lab], "jobs": len(jobs), "jobs_completed": sum(j.status == "completed" for j in jobs),
                **self.counts[lab], "money_change": self.world.labs[lab].money - self.start_money[lab]}
