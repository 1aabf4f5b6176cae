"""What a language-model lab reads in the GPU market: the system prompt (the rules, every action as
a JSON example, the task) and, at each of its moves, one user turn rendering its own view
(``MarketEnv.observe(0)``) with the result of its previous action."""

from __future__ import annotations

import json
import re

from env.core import LeakError
from env.market import rules
from env.market.actions import EXAMPLES
from env.market.env import MarketEnv, MarketStep
from env.market.moves import legal_moves, render_move
from env.market.world import ACTIONS_PER_TURN, TASKS

LAB = "lab0"  # the seat a model plays
MOVES_HEAD = "Moves open to you:"
PITCH_CHARS = 160  # a pitch's words as an event shows them (the rest is cut: a lab reads many events a round)
FORMATS = {
    "option_a": "Reply with exactly one JSON object: the action, nothing else.",
    "option_b": "Think inside <think>...</think> (private), then reply with exactly one JSON object: the action.",
}


def market_system_prompt(obs: dict, reasoning_mode: str = "option_a") -> str:
    """The rules and the action language first (shared by every episode), the task last."""
    t = TASKS[obs["task"]]
    actions = "\n".join(json.dumps(a) for a in EXAMPLES.values())
    return (f"You run an AI lab in a market for scarce GPU capacity. Complete your jobs: a job is done when its "
            f"GPU-hours are allocated from blocks you own that have started, before its deadline. Your reward is "
            f"(value of completed jobs + money received - money paid - energy bills - fines - "
            f"${rules.INVALID_PENALTY:g} per refused action) / your total job value. Other labs trade only when it "
            f"pays them. Up to {ACTIONS_PER_TURN} actions per round; wait ends your turn.\n{FORMATS[reasoning_mode]}\n"
            f"Actions (examples; use ids from your view):\n{actions}\n"
            f"A lot is sold only to a coalition of {rules.LOT_MIN_MEMBERS}+ paying labs. Each message ends with the "
            f"moves open to you, ids filled in: write one as a JSON action, with your price for P and your words for T "
            f"(hours may be changed).\n"
            f"Task {t.name}: {t.description} {t.rounds} rounds. You are {obs['you']}.")


def _r(k: int) -> int:  # rounds are 0-based in the environment, 1-based for readers
    return k + 1


def market_user_message(obs: dict, last: MarketStep | None = None) -> str:
    """Lab ``obs['you']``'s view as one user turn, with the result of its previous action. The
    whole view opens each turn; later moves in the same turn (nobody else acts in between) get
    only the result and what it caused, which keeps long episodes within a small context."""
    me, m = obs["you"], obs["market"]
    lines = [f"Round {_r(obs['round'])} of {obs['rounds']}, {obs['actions_left']} action(s) left."]
    if last is not None:
        lines.append(f"Your last action: {'ok' if last.ok else 'REFUSED ' + last.code}: {last.detail}")
    if obs["events"]:
        lines.append("Events: " + "; ".join(map(event_text, obs["events"])))
    if last is not None and obs["actions_left"] < ACTIONS_PER_TURN:
        return "\n".join(lines + _moves(obs))
    lines.append(f"Money ${obs['money']:.2f}, reputation {obs['reputation']:.2f}.")
    lines.append("Your jobs: " + "; ".join(
        f"{j['id']} {j['hours']:g}h ({j['done']:g} done) by round {_r(j['deadline'])} worth ${j['value']:g}, "
        f"{j['status']}" for j in obs["jobs"]))
    mine = [b for b in obs["blocks"] if b["owner"] == me]
    other = [b for b in obs["blocks"] if b["owner"] != me]
    lines.append("Your blocks: " + ("; ".join(f"{b['id']} {b['hours']:g}h from round {_r(b['start'])}, energy "
                                              f"{b['energy']:g}/h" for b in mine) or "none"))
    lines.append("Other blocks: " + ("; ".join(f"{b['id']} of {b['owner']} {b['hours']:g}h from round "
                                               f"{_r(b['start'])}" for b in other) or "none"))
    lots = "; ".join(f"{x['id']} {x['hours']:g}h for ${x['price']:g} from round {_r(x['start'])}" for x in m["lots"])
    lines.append(f"Spot {m['spot_hours']:g}h at ${m['spot_price']:g}/h, energy ${m['energy_price']:g}."
                 + (f" Lots (for coalitions): {lots}." if lots else ""))
    if obs["offers"]:
        lines.append("Open offers: " + "; ".join(
            _offer(o) + (f" (pitch, score {o['score']:.2f})" if o["pitch"] else "") for o in obs["offers"]))
    if obs["coalitions"]:
        lines.append("Coalitions: " + "; ".join(
            f"{c['id']} for {c['lot']} by {c['proposer']}, {c['status']}, members {','.join(c['members'])}, shares "
            f"{_shares(c['shares'])}, committed {','.join(c['committed']) or 'none'}"
            for c in obs["coalitions"]))
    return "\n".join(lines + _moves(obs))


def _offer(o: dict) -> str:
    """An offer (the view's, or an offer event) in a few words: ``o11 lab2->lab0 sell 80h of b8 for $184``."""
    return f"{o['id']} {o['from']}->{o['to']} {o['side']} {o['hours']:g}h of {o['block']} for ${o['price']:g}"


def _shares(shares: dict) -> str:
    return ",".join(f"{lab} {h:g}h" for lab, h in shares.items()) or "none"


def event_text(e: dict) -> str:
    """One event in a few words (a lab reads many each round): ``o11 lab2->lab0 sell 80h of b8 for $184``,
    ``deal o4: lab3 sold 80h to lab2 for $112 (b8)``, ``c1 lab1 joined for 115 GPU-hours``."""
    kind = e.get("type")
    if kind == "offer":
        text = _offer(e)
        if e.get("kind") != "pitch":
            return text
        words = " ".join(str(e.get("text", "")).split())
        words = words if len(words) <= PITCH_CHARS else words[:PITCH_CHARS - 1] + "…"
        reasons = "; ".join(map(str, e.get("reasons") or []))
        return f'{text} (pitch "{words}", score {e["score"]:.2f}' + (f": {reasons})" if reasons else ")")
    if kind == "deal":
        return (f"deal {e['offer']}: {e['seller']} sold {e['hours']:g}h to {e['buyer']} for ${e['price']:g} "
                f"({e['block']})")
    if kind == "rejected":
        return f"{e['by']} rejected {e['offer']}"
    if kind == "shock":
        rest = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in e.items()
                         if k not in ("type", "kind", "round"))
        return f"shock {e['kind']}" + (f" ({rest})" if rest else "")
    if kind == "coalition":
        if e["status"] in ("proposed", "forming"):
            return f"{e['id']} proposed by {e['proposer']} for {e['lot']}, members {','.join(e['members'])}"
        split = f", split {_shares(e['split'])}" if e.get("split") else ""
        return f"{e['id']} {e['status']}{split}" + (f", fine ${e['fine']:g}" if e.get("fine") else "")
    return json.dumps(e, separators=(",", ":"))


def _moves(obs: dict) -> list[str]:
    """The moves open to the lab now (``env.market.moves``), one short line each."""
    moves = obs["moves"] if "moves" in obs else legal_moves(obs)
    return [MOVES_HEAD, *map(render_move, moves)]


def assert_market_no_leak(text: str, env: MarketEnv, lab: int = 0) -> str:
    """Raise ``LeakError`` if a prompt for ``lab`` names another lab's private jobs (a bug guard:
    the view is a projection already; this catches a prompt builder that reaches around it)."""
    for other in env.world.labs:
        if other.id != lab:
            for job in other.jobs:
                if re.search(rf"(?<![\w.]){re.escape(job.id)}(?![\w.]|\.\d)", text):
                    raise LeakError(f"prompt for lab{lab} names {other.name}'s private job {job.id}")
    return text


