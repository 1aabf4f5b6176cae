"""What a lab sees (``MarketEnv.observe``), as types: plain JSON-ready dicts, typed so that every
reader (players, prompts, the Space, the server) is checked against one definition."""

from __future__ import annotations

from typing import TypedDict


class JobView(TypedDict):
    id: str
    hours: float
    done: float
    deadline: int
    value: float
    urgency: str
    status: str


class BlockView(TypedDict):
    id: str
    owner: str  # a lab's name, e.g. "lab2"
    hours: float
    start: int
    reliability: float
    energy: float


class LotView(TypedDict):
    id: str
    hours: float
    price: float
    start: int
    reliability: float
    energy: float
    min_members: int  # paying members a coalition needs to buy it


class MarketInfo(TypedDict):
    spot_price: float
    spot_hours: float
    energy_price: float
    lots: list[LotView]


class LabInfo(TypedDict):
    name: str
    reputation: float


# "from" is a keyword, so the offer's view is declared the functional way
OfferView = TypedDict("OfferView", {"id": str, "from": str, "to": str, "side": str, "block": str, "hours": float,
                                    "price": float, "pitch": "str | None", "score": "float | None"})


class CoalitionView(TypedDict):
    id: str
    lot: str
    proposer: str
    members: list[str]
    shares: dict[str, float]
    committed: list[str]
    status: str


class MoveView(TypedDict):
    """One move open to the lab (``env.market.moves``): the action with its free fields (price, a pitch's
    text) None, and a note on what it costs or what its hours are worth at spot ('' when none)."""

    move: dict
    note: str


class MarketView(TypedDict):
    """One lab's view: its own money, jobs and blocks; the public market; the offers and coalitions
    that involve it; the events delivered to it since it last acted; the moves open to it now."""

    task: str
    round: int
    rounds: int
    you: str
    actions_left: int
    money: float
    reputation: float
    jobs: list[JobView]
    blocks: list[BlockView]
    market: MarketInfo
    labs: list[LabInfo]
    offers: list[OfferView]
    coalitions: list[CoalitionView]
    events: list[dict]
    moves: list[MoveView]  # the moves open to it now, ids filled in (empty when it is not its turn)
