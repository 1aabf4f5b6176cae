"""Pure rules of the GPU market: what a lab's capacity is worth to it, and what a trade does to
its utility. Scripted labs use these to stay individually rational; the tests use them to check it.

A lab's utility is its money plus the value of its holdings: the jobs its GPU-hours can still
complete in time, net of the energy they would burn (greedy, most valuable hours first).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from env.market.world import Block, Job

EPS = 1e-6
INVALID_PENALTY = 2.0  # dollars of reward lost per refused action
LEAVE_FINE = 0.25  # share of a committed contribution forfeited by leaving
LEAVE_REPUTATION = 0.25
LOT_MIN_MEMBERS = 2  # a volume lot is sold only to a coalition of at least this many paying members
MAX_OPEN_OFFERS = 6  # offers one lab may have waiting for an answer
MAX_FORMING_COALITIONS = 2  # coalitions one lab may have forming at once
SPOT_RELIABILITY, SPOT_ENERGY = 0.95, 1.0  # what spot capacity is like
REWARD_TERMS = ("value", "trade", "energy", "fines", "invalid")

# What each market shock does (``shock_effect``).
SHOCKS = {
    "capacity_failure": {"hours_lost": 0.5},  # half of one block's hours (unreliable blocks are likelier hit)
    "energy_spike": {"energy_price": 2.5},  # energy price times 2.5
    "demand_surge": {"spot_price": 1.6, "spot_hours_lost": 0.5},  # spot 1.6x dearer, half its stock bought elsewhere
}


def shock_effect(kind: str, block_hours: float, energy_price: float, spot_price: float,
                 spot_hours: float) -> dict:
    """What a shock changes: ``hours_lost`` (of the block it hits), and the new ``energy_price``,
    ``spot_price`` and ``spot_hours`` (each only where the shock touches it)."""
    table = SHOCKS[kind]
    out = {}
    if "hours_lost" in table:
        out["hours_lost"] = round(block_hours * table["hours_lost"], 2)
    if "energy_price" in table:
        out["energy_price"] = round(energy_price * table["energy_price"], 4)
    if "spot_price" in table:
        out["spot_price"] = round(spot_price * table["spot_price"], 4)
        out["spot_hours_lost"] = round(spot_hours * table["spot_hours_lost"], 2)
    return out


def leave_fine(escrow: float) -> float:
    """What leaving a coalition after committing ``escrow`` dollars forfeits."""
    return round(escrow * LEAVE_FINE, 2)


def share_cost(share: float, lot_hours: float, lot_price: float) -> float:
    """Dollars a share of a lot costs: the lot's price per GPU-hour, to the cent."""
    return round(share * lot_price / lot_hours, 2)


def share_allowed(hours: float, lot_hours: float) -> bool:
    """A share must leave GPU-hours of the lot to the other paying members (``LOT_MIN_MEMBERS``)."""
    return hours < lot_hours - EPS


def committed_share(share: float, covered: float, lot_hours: float) -> float:
    """A committing member's share, trimmed to what the shares committed before (``covered``) leave."""
    return round(min(share, lot_hours - covered), 2)


def lot_bought(covered: float, share: float, lot_hours: float, payers: int) -> bool:
    """Whether committing ``share`` on top of ``covered`` buys the lot: it covers the lot exactly and
    at least ``LOT_MIN_MEMBERS`` members pay."""
    return round(covered + share, 2) >= lot_hours and payers >= LOT_MIN_MEMBERS


Holding = tuple[int, float, float]  # (start round, hours, energy per hour)


def holdings(blocks: Iterable[Block], owner: int) -> list[Holding]:
    return [(b.start, b.hours, b.energy) for b in blocks if b.owner == owner and b.hours > EPS]


def holdings_value(jobs: Sequence[Job], held: Sequence[Holding], round_: int, energy_price: float,
                   budget: float = float("inf")) -> float:
    """Dollars of job value the holdings can still realise, net of energy: jobs in order of value
    per missing hour, each taking the cheapest-energy usable hours, done only if fully covered,
    worth its energy, and its energy bill payable from ``budget``."""
    avail = sorted(([max(s, round_), h, e] for s, h, e in held), key=lambda a: a[2])
    total = 0.0
    for job in sorted((j for j in jobs if j.status == "open" and j.deadline >= round_ and j.need > EPS),
                      key=lambda j: -j.value / j.need):
        need, take = job.need, []
        for a in avail:
            if a[0] <= job.deadline and a[1] > EPS:
                t = min(a[1], need)
                take.append((a, t))
                need -= t
                if need <= EPS:
                    break
        if need > EPS:
            continue
        energy = sum(t * a[2] for a, t in take) * energy_price
        if job.value - energy <= 0 or energy > budget:
            continue
        for a, t in take:
            a[1] -= t
        budget -= energy
        total += job.value - energy
    return total


def shortfall(jobs: Sequence[Job], held: Sequence[Holding], round_: int) -> dict[str, float]:
    """GPU-hours each open job still lacks after the holdings usable for it are spread over the
    jobs in deadline order."""
    avail = sorted(([max(s, round_), h] for s, h, _ in held), key=lambda a: a[0])
    out = {}
    for job in sorted((j for j in jobs if j.status == "open" and j.deadline >= round_), key=lambda j: j.deadline):
        need = job.need
        for a in avail:
            if a[0] <= job.deadline and a[1] > EPS and need > EPS:
                t = min(a[1], need)
                a[1] -= t
                need -= t
        out[job.id] = need
    return out


def surplus_hours(jobs: Sequence[Job], held: Sequence[Holding], round_: int) -> float:
    """Hours held beyond what the open jobs could use."""
    return max(0.0, sum(h for _, h, _ in held) - sum(j.need for j in jobs if j.status == "open"
                                                     and j.deadline >= round_))


def with_change(held: Sequence[Holding], start: int, hours: float, energy: float) -> list[Holding]:
    """Holdings after gaining (hours > 0) or giving up (hours < 0) hours of one kind of block."""
    out = list(held)
    if hours > 0:
        out.append((start, hours, energy))
        return out
    for i, (s, h, e) in enumerate(out):
        if s == start and e == energy and h + EPS >= -hours:
            out[i] = (s, h + hours, e)
            return out
    raise ValueError("giving up hours the lab does not hold")


def trade_gain(jobs: Sequence[Job], held: Sequence[Holding], round_: int, energy_price: float, start: int,
               energy: float, hours: float, money: float, cash: float = float("inf")) -> float:
    """Change in a lab's utility (money plus holdings' value) from receiving ``hours`` (negative:
    giving) of a block and ``money`` dollars (negative: paying), for a lab holding ``cash``; minus
    infinity when it cannot pay."""
    if cash + money < -EPS:
        return float("-inf")
    before = holdings_value(jobs, held, round_, energy_price, cash)
    after = holdings_value(jobs, with_change(held, start, hours, energy), round_, energy_price, cash + money)
    return after - before + money
