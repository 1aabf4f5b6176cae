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

CENT_ROUNDING = 0.005  # the most the view's money (rounded to the cent) can exceed the lab's
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
    v.money -= CENT_ROUNDING  # the view rounds money to the cent: a move is listed only if it surely pays
    can_offer = sum(1 for o in obs["offers"] if o["from"] == v.me) < rules.MAX_OPEN_OFFERS
    return [*_answers(v, can_offer), *_coalition_steps(v), *_allocations(v), *_purchases(v, can_offer),
            *_sales(v, can_offer), _move(action="wait")]


def _move(note: str = "", **action) -> MoveView:
    return {"move": action, "note": note}


def _answers(v: View, can_offer: bool):
    """Accept (where the trade can happen: the block still holds the hours, and this lab can pay when it buys),
    counter, or reject each offer made to the lab."""
    spot = v.obs["market"]["spot_price"]
    for o in v.incoming():
        block, i_buy = v.block(o["block"]), o["side"] == "sell"
        held = block is not None and block["hours"] + EPS >= o["hours"]
        if held and (not i_buy or o["price"] <= v.money + EPS):
            yield _move(f"you {'buy' if i_buy else 'sell'} {o['hours']:g}h for {_money(o['price'])}",
                        action="accept", offer=o["id"])
        if held and can_offer:
            yield _move(f"at spot {_money(o['hours'] * spot)}", action="counter", offer=o["id"], price=None)
        yield _move(action="reject", offer=o["id"])


def _coalition_steps(v: View):
    """Join a forming coalition it is invited to (with the hours it lacks that the lot could serve), or commit to
    one it joined (where it can pay its share)."""
    for c in v.obs["coalitions"]:
        lot = v.lot(c["lot"])
        if v.me not in c["members"] or c["status"] != "forming" or lot is None:
            continue
        if v.me not in c["shares"]:
            share = lot_share(v.lot_need(lot), lot)
            if share > EPS and rules.share_allowed(share, lot["hours"]):
                yield _move(f"costs {_money(share * lot['price'] / lot['hours'])} when committed", action="join",
                            coalition=c["id"], hours=share)
        elif v.me not in c["committed"]:
            covered = round(sum(c["shares"][m] for m in c["committed"]), 2)
            share = rules.committed_share(c["shares"][v.me], covered, lot["hours"])
            cost = rules.share_cost(share, lot["hours"], lot["price"]) if share > 0 else 0.0
            if share > 0 and cost <= v.money + EPS:
                yield _move(f"escrows {_money(cost)}", action="commit", coalition=c["id"])


def _allocations(v: View):
    """Every started block of its own on every open job, with all the hours the block can give the job (where the
    energy bill is payable)."""
    energy = v.obs["market"]["energy_price"]
    for b in v.mine:
        if b["start"] > v.round or b["hours"] <= EPS:
            continue
        for j in v.jobs:
            if j.status != "open" or j.deadline < v.round or j.need <= EPS:
                continue
            hours = round(min(b["hours"], j.need), 2)
            if hours > EPS and round(hours * b["energy"] * energy, 2) <= v.money + EPS:
                yield _move(action="allocate", block=b["id"], job=j.id, hours=hours)


def _purchases(v: View, can_offer: bool):
    """When a job lacks hours: what the jobs lack from the spot market (as much as the stock and its money allow),
    a pitch for each lacking job to the other lab's block with the most hours it could use, and a coalition for
    each lot that no coalition it is invited to is forming for."""
    lacking = v.lacking()
    if not lacking:
        return
    market, spot = v.obs["market"], v.obs["market"]["spot_price"]
    stock = market["spot_hours"]
    affordable = int(v.money / spot * 100) / 100 if spot > 0 else stock
    hours = round(min(sum(lack for _, lack in lacking), stock, affordable), 2)
    if stock > EPS and hours > EPS:
        yield _move(f"costs {_money(round(hours * spot, 2))}", action="buy_spot", hours=hours)
    if can_offer:
        for job, lack in lacking:
            usable = [b for b in v.theirs() if b["start"] <= job.deadline]
            for b in sorted(usable, key=lambda b: -b["hours"])[:PITCHES_PER_JOB]:
                hours = round(min(lack, b["hours"]), 2)
                yield _move(f"at spot {_money(hours * spot)}", action="pitch", to=b["owner"], text=None,
                            ask={"job": job.id, "block": b["id"], "hours": hours, "price": None})
    coalitions = v.obs["coalitions"]
    proposing = sum(1 for c in coalitions if c["proposer"] == v.me and c["status"] == "forming")
    forming = {c["lot"] for c in coalitions if c["status"] == "forming" and v.me in c["members"]}
    for lot in market["lots"]:
        share = lot_share(v.lot_need(lot), lot)
        if lot["id"] not in forming and proposing < rules.MAX_FORMING_COALITIONS and share > EPS \
                and rules.share_allowed(share, lot["hours"]):
            yield _move(f"your share costs {_money(share * lot['price'] / lot['hours'])}", action="propose_coalition",
                        lot=lot["id"], members=[v.me, *(o["name"] for o in v.obs["labs"])], hours=share)


def _sales(v: View, can_offer: bool):
    """When it holds spare hours: its largest block's spare hours to the first labs it has no open offer to."""
    spare = v.surplus()
    if spare <= EPS or not v.mine or not can_offer:
        return
    block = max(v.mine, key=lambda b: b["hours"])
    hours = round(min(spare, block["hours"]), 2)
    offered = {o["to"] for o in v.outgoing()}
    for lab in [lab for lab in v.obs["labs"] if lab["name"] not in offered][:SALES_LISTED]:
        yield _move(f"at spot {_money(hours * v.obs['market']['spot_price'])}", action="offer", to=lab["name"],
                    side="sell", block=block["id"], hours=hours, price=None)


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
    takes them (a pitch's ``ask`` in braces), its free fields as ``P`` and ``T``, its note after it:
    ``pitch to=lab2 text=T ask={job=j0.1 block=b4 hours=5 price=P} (at spot $10)``."""
    fields = " ".join(_field(k, v) for k, v in m["move"].items() if k != "action")
    return f"{m['move']['action']} {fields}".strip() + (f" ({m['note']})" if m["note"] else "")


def _field(key: str, value) -> str:
    if isinstance(value, dict):  # a pitch's ask: its fields inside braces, as the JSON nests them
        return f"{key}={{{' '.join(_field(k, v) for k, v in value.items())}}}"
    return f"{key}={FREE[key] if value is None else ','.join(value) if isinstance(value, list) else _whole(value)}"


def fill(move: dict, price: float = 0.0, text: str = "") -> dict:
    """A listed move with its free fields set (what a player that copies it hands the environment)."""
    filled = {k: fill(v, price, text) if isinstance(v, dict) else v for k, v in move.items()}
    for field, value in (("price", price), ("text", text)):
        if field in filled and filled[field] is None:
            filled[field] = value
    return filled
