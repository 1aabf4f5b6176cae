"""The scarce-GPU market's world: labs, jobs, GPU blocks, the provider, shocks, and the three tasks.

A world is drawn from ``(task, seed)`` alone (one local ``random.Random``), so the same seed
gives the same world. Money is in dollars, capacity in GPU-hours, time in rounds. A job's
``deadline`` is the last round in which hours may still be allocated to it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from env.settings import check_choice, check_seed

PROVIDER = -1  # owner id of capacity nobody has bought yet
ARCHETYPES = ("cooperative", "selfish", "deadline_panicked", "deceptive", "retaliatory")
SHOCKS = ("capacity_failure", "energy_spike", "demand_surge")


@dataclass(slots=True)
class Job:
    id: str
    hours: float  # GPU-hours the job needs
    deadline: int  # last round in which hours can be allocated
    value: float  # dollars of value when completed in time
    urgency: str  # low / medium / high (how close the deadline is at the start)
    done: float = 0.0  # GPU-hours allocated so far
    status: str = "open"  # open / completed / expired

    @property
    def need(self) -> float:
        return max(0.0, self.hours - self.done)


@dataclass(slots=True)
class Block:
    id: str
    owner: int
    hours: float
    start: int  # first round its hours can be used
    reliability: float  # 0..1: the less reliable, the likelier a capacity failure hits it
    energy: float  # energy use per GPU-hour (times the market's energy price = dollars)


@dataclass(slots=True)
class Lab:
    id: int
    name: str
    archetype: str  # private: how a scripted lab behaves
    money: float
    jobs: list[Job]
    reputation: float = 1.0


@dataclass(slots=True)
class Lot:
    """A large block the provider sells whole at a volume price (too dear for one lab)."""

    id: str
    hours: float
    price: float  # total dollars
    start: int
    reliability: float
    energy: float
    sold: bool = False


@dataclass(slots=True)
class Shock:
    round: int
    kind: str


@dataclass(frozen=True, slots=True)
class TaskSpec:
    name: str
    labs: int
    rounds: int
    shocks: int
    spot_hours: float  # the provider's spot stock (0: the spot market is closed)
    lot: bool  # whether a volume lot is for sale (coalitions)
    short: int  # how many labs start short of capacity (the rest have spare)
    description: str


TASKS: dict[str, TaskSpec] = {
    "single_trade": TaskSpec("single_trade", 2, 4, 0, 0.0, False, 1,
                             "Two labs, one deal: one lab is short of GPU-hours, the other has spare."),
    "market_round": TaskSpec("market_round", 4, 6, 1, 160.0, False, 2,
                             "Four labs and the provider's spot market; one market shock."),
    "coalition_market": TaskSpec("coalition_market", 5, 8, 3, 60.0, True, 4,
                                 "Five labs, little spot capacity, a volume lot only a coalition can afford; "
                                 "several shocks."),
}

SPOT_PRICE = 2.0  # dollars per GPU-hour at the start
ENERGY_PRICE = 0.3  # dollars per unit of energy at the start
LOT_PRICE = 1.1  # dollars per GPU-hour of a volume lot (spot: 2.0)
ACTIONS_PER_TURN = 4


@dataclass(slots=True)
class World:
    task: TaskSpec
    seed: int
    labs: list[Lab]
    blocks: dict[str, Block]
    lots: dict[str, Lot]
    shocks: list[Shock]
    spot_price: float = SPOT_PRICE
    spot_hours: float = 0.0
    energy_price: float = ENERGY_PRICE
    provider_money: float = 0.0
    grid_money: float = 0.0  # energy bills
    consumed_hours: float = 0.0  # allocated to jobs
    failed_hours: float = 0.0  # lost to capacity failures
    next_id: dict[str, int] = field(default_factory=dict)

    def new_id(self, prefix: str) -> str:
        n = self.next_id.get(prefix, 0) + 1
        self.next_id[prefix] = n
        return f"{prefix}{n}"


def _job(rng: random.Random, lab: int, k: int, rounds: int) -> Job:
    hours = float(rng.randrange(40, 161, 10))
    deadline = rng.randrange(1, rounds)
    per_hour = rng.choice((1.4, 2.4, 3.2, 4.5))  # some jobs are not worth buying capacity for
    urgency = "high" if deadline <= rounds // 3 else "medium" if deadline <= 2 * rounds // 3 else "low"
    return Job(f"j{lab}.{k}", hours, deadline, round(hours * per_hour, 2), urgency)


def make_world(task: str, seed: int) -> World:
    """The world of one episode, drawn from ``seed``. Which labs start short of capacity rotates
    with the seed, so a policy in seat 0 meets both sides of the market. In a coalition market
    the volume lot, sold only whole, covers about half of the short labs' combined need: too big
    for one lab's jobs, worth buying together."""
    spec = TASKS[check_choice(task, TASKS, "task")]
    seed = check_seed(seed)
    rng = random.Random(f"market/{task}/{seed}")
    world = World(spec, seed, [], {}, {}, [], spot_hours=spec.spot_hours)
    for i in range(spec.labs):
        archetype = "expert" if i == 0 else rng.choice(ARCHETYPES)
        jobs = [_job(rng, i, k, spec.rounds) for k in range(1 if task == "single_trade" else rng.randrange(1, 3))]
        need = sum(j.hours for j in jobs)
        short = (i + seed) % spec.labs < spec.short
        if task == "single_trade":
            cover = rng.uniform(0.1, 0.5) if short else rng.uniform(1.6, 2.4)
        else:
            cover = rng.uniform(0.2, 0.7) if short else rng.uniform(1.2, 1.8)
        money = float(rng.randrange(200, 401, 10))
        world.labs.append(Lab(i, f"lab{i}", archetype, money, jobs))
        for b in range(1 if cover < 1 else 2):
            hours = float(round(need * cover / (1 if cover < 1 else 2) / 5) * 5) or 5.0
            bid = world.new_id("b")
            world.blocks[bid] = Block(bid, i, hours, rng.randrange(0, 2), round(rng.uniform(0.8, 0.99), 2),
                                      round(rng.uniform(0.8, 1.3), 2))
    if spec.lot:
        held = {b.owner: 0.0 for b in world.blocks.values()}
        for b in world.blocks.values():
            held[b.owner] += b.hours
        lacking = sum(max(0.0, sum(j.hours for j in lab.jobs) - held.get(lab.id, 0.0)) for lab in world.labs)
        hours = float(max(100, round(lacking * rng.uniform(0.5, 0.7) / 10) * 10))
        price = round(hours * LOT_PRICE, 2)
        lid = world.new_id("lot")
        world.lots[lid] = Lot(lid, hours, price, rng.randrange(1, 3), 0.97, 0.9)
    rounds = sorted(rng.sample(range(1, spec.rounds - 1), spec.shocks)) if spec.shocks else []
    world.shocks = [Shock(r, rng.choice(SHOCKS)) for r in rounds]
    return world
