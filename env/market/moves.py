"""The moves open to a lab at its turn, read off its own view: every id filled in, so that a small
model (or a person) copies a move instead of recalling which ids are its to use.

Each move is a complete action except for its free fields: ``price`` (dollars) and a pitch's
``text`` are the lab's to choose (``None`` here, ``P`` and ``T`` when rendered). Hours are filled
with what the lab's own jobs call for (an allocation: all the block can give the job; a purchase:
what the jobs lack; a sale: the spare hours) and may be changed. The list is computed from the
view alone (``legal_moves(view)``), so it can hold nothing the view does not; the environment still
checks every action it is handed, listed or not.

Which moves are listed: answers to every offer made to the lab (accept where the trade can happen,
counter, reject); its coalition steps (join, commit); every allocation of a started block of
its own to an open job; when a job lacks hours: spot hours, a pitch for each other lab's block the
job could use with the most hours (``PITCHES_PER_JOB``: the list stays short among five labs), a coalition
for each volume lot; when it holds spare hours: a sale of its largest block to the first
``SALES_LISTED`` labs it has no open offer to; and
``wait``. ``leave``, ``finish`` and plain buy offers are legal too but not listed (a pitch is a
buy offer with an argument; leaving after a commitment costs a fine; finishing early never pays).
"""

from __future__ import annotations

import json

import env.market.rules as rules
from env.market.players import View, lot_share
from env.market.rules import EPS
from env.market.view import MarketView, MoveView

FREE = {"price": "P", "text": "T"}  # a move's free fields, as rendered (``render_move``)
SALES_LISTED = 2  # sales of spare hours listed: to the first labs (in the view's order) it has no open offer to
PITCHES_PER_JOB = 1  # pitches listed for a job that lacks hours: to the block with the most hours it could use


def _money(x: float) -> str:
    return f"${x:,.2f}".rstrip("0").rstrip(".") if x % 1 else f"${x:,.0f}"


def legal_moves(obs: MarketView) -> list[MoveView]:
    """The moves open to ``obs['you']`` now (none when it is not its turn), in the order above."""
    if obs["actions_left"] <= 0:
        return []
    v = View(obs)
    spot = obs["market"]["spot_price"]
    out: list[MoveView] = []

    def add(note: str = "", **action) -> None:
        out.append({"move": action, "note": note})

    outgoing = sum(1 for o in obs["offers"] if o["from"] == v.me)
    can_offer = outgoing < rules.MAX_OPEN_OFFERS
    for o in v.incoming():
        block, i_buy = v.block(o["block"]), o["side"] == "sell"
        if block is not None and block["hours"] + EPS >= o["hours"] and (not i_buy or o["price"] <= v.money + EPS):
            add(f"you {'buy' if i_buy else 'sell'} {o['hours']:g}h for {_money(o['price'])}",
                action="accept", offer=o["id"])
        if can_offer and block is not None and block["hours"] + EPS >= o["hours"]:
            add(f"at spot {_money(o['hours'] * spot)}", action="counter", offer=o["id"], price=None)
        add(action="reject", offer=o["id"])
    for c in obs["coalitions"]:
        lot = v.lot(c["lot"])
        if v.me not in c["members"] or c["status"] != "forming" or lot is None:
            continue
        unit = lot["price"] / lot["hours"]
        if v.me not in c["shares"]:
            share = lot_share(v.lot_need(lot), lot)
            if share > EPS and rules.share_allowed(share, lot["hours"]):
                add(f"costs {_money(share * unit)} when committed", action="join", coalition=c["id"], hours=share)
            continue
        if v.me not in c["committed"]:
            covered = round(sum(c["shares"][m] for m in c["committed"]), 2)
            share = rules.committed_share(c["shares"][v.me], covered, lot["hours"])
            cost = rules.share_cost(share, lot["hours"], lot["price"]) if share > 0 else 0.0
            if share > 0 and cost <= v.money + EPS:
                add(f"escrows {_money(cost)}", action="commit", coalition=c["id"])
    energy = obs["market"]["energy_price"]
    for b in v.mine:
        if b["start"] > v.round or b["hours"] <= EPS:
            continue
        for j in v.jobs:
            if j.status != "open" or j.deadline < v.round or j.need <= EPS:
                continue
            hours = round(min(b["hours"], j.need), 2)
            cost = round(hours * b["energy"] * energy, 2)
            if hours > EPS and cost <= v.money + EPS:
                add(action="allocate", block=b["id"], job=j.id, hours=hours)
    lacking = v.lacking()
    if lacking:
        stock = obs["market"]["spot_hours"]
        short = sum(lack for _, lack in lacking)
        hours = round(min(short, stock, int(v.money / spot * 100) / 100 if spot > 0 else stock), 2)
        if stock > EPS and hours > EPS:
            add(f"costs {_money(round(hours * spot, 2))}", action="buy_spot", hours=hours)
        if can_offer:
            for job, lack in lacking:
                usable = [b for b in v.theirs() if b["start"] <= job.deadline]
                for b in sorted(usable, key=lambda b: -b["hours"])[:PITCHES_PER_JOB]:
                    hours = round(min(lack, b["hours"]), 2)
                    add(f"at spot {_money(hours * spot)}", action="pitch", to=b["owner"], text=None,
                        ask={"job": job.id, "block": b["id"], "hours": hours, "price": None})
        proposing = sum(1 for c in obs["coalitions"] if c["proposer"] == v.me and c["status"] == "forming")
        joined = {c["lot"] for c in obs["coalitions"] if c["status"] == "forming" and v.me in c["members"]}
        for lot in obs["market"]["lots"]:
            if lot["id"] in joined:  # a coalition it is invited to is already forming for this lot
                continue
            share = lot_share(v.lot_need(lot), lot)
            if proposing < rules.MAX_FORMING_COALITIONS and share > EPS and rules.share_allowed(share, lot["hours"]):
                add(f"your share costs {_money(share * lot['price'] / lot['hours'])}", action="propose_coalition",
                    lot=lot["id"], members=[v.me, *(o["name"] for o in obs["labs"])], hours=share)
    spare = v.surplus()
    if spare > EPS and v.mine and can_offer:
        block = max(v.mine, key=lambda b: b["hours"])
        hours = round(min(spare, block["hours"]), 2)
        offered = {o["to"] for o in v.outgoing()}
        for lab in [lab for lab in obs["labs"] if lab["name"] not in offered][:SALES_LISTED]:
            add(f"at spot {_money(hours * spot)}", action="offer", to=lab["name"], side="sell", block=block["id"],
                hours=hours, price=None)
    add(action="wait")
    return out


def action_text(action: dict) -> str:
    """An action as a lab writes it: ``json.dumps``'s spacing, whole numbers without a decimal point
    (``70``, not ``70.0``), so a listed move and the expert's own replies read alike."""
    return json.dumps(_whole(action))


def _whole(x):
    if isinstance(x, dict):
        return {k: _whole(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_whole(v) for v in x]
    return int(x) if type(x) is float and x.is_integer() and abs(x) < 1e15 else x


def render_move(m: MoveView) -> str:
    """One move as a short line: the action's name, then its fields as ``key=value`` in the order its JSON
    takes them (a pitch's ``ask`` fields inline), its free fields as ``P`` and ``T``, its note after it:
    ``pitch to=lab2 text=T job=j0.1 block=b4 hours=5 price=P (at spot $10)``."""
    parts = [m["move"]["action"]]
    for key, value in _flat(m["move"]):
        shown = FREE[key] if value is None else ",".join(value) if isinstance(value, list) else _whole(value)
        parts.append(f"{key}={shown}")
    return " ".join(parts) + (f" ({m['note']})" if m["note"] else "")


def _flat(action: dict):
    for key, value in action.items():
        if key == "action":
            continue
        if isinstance(value, dict):
            yield from value.items()
        else:
            yield key, value


def fill(move: dict, price: float = 0.0, text: str = "") -> dict:
    """A listed move with its free fields set (what a player that copies it hands the environment)."""
    filled = {k: fill(v, price, text) if isinstance(v, dict) else v for k, v in move.items()}
    for field, value in (("price", price), ("text", text)):
        if field in filled and filled[field] is None:
            filled[field] = value
    return filled
