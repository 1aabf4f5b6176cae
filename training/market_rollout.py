"""Language-model labs in the GPU market: what the model reads, and the batched rollout engine.

The model plays lab 0 through the same ``LLMAgent`` and ``Conversation`` as in the bilateral
game: a system prompt (the rules, every action as a JSON example, the task), then at each of
its moves one user turn rendering its own view (``MarketEnv.observe(0)``: its money, jobs and
blocks, the public market, the offers and coalitions that involve it, the events delivered to
it, and the result of its previous action), and its reply: one JSON action, handed to the
environment as written. A reply that is not an action is refused by the environment with a
reason code and the invalid-action penalty; the next user turn tells the model why.

``play_market_episodes`` runs many market episodes in lockstep: scripted labs act inline, every
pending lab-0 reply is generated in one batched call, finished episodes drop out. Each record
holds lab 0's token stream with the mask (1 exactly on the tokens the model generated), sampling
log-probs, the reward (lab 0's outcome over its total job value) and the finished environment.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable, Sequence

from env.market import rules
from env.market.actions import EXAMPLES
from env.market.env import MarketEnv, MarketStep
from env.market.evaluation import transcript
from env.market.play import MarketMatch, seat_rng
from env.market.players import MarketPlayer, make_policy
from env.market.world import ACTIONS_PER_TURN, TASKS
from training.prompts import LeakError
from training.rollout import Conversation, EpisodeRecord, LLMAgent, Teacher, generate_replies, step_replies, \
    token_fields

LAB = "lab0"  # the seat a model plays
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
        lines.append("Events: " + "; ".join(json.dumps(e, separators=(",", ":")) for e in obs["events"]))
    if last is not None and obs["actions_left"] < ACTIONS_PER_TURN:
        return "\n".join(lines)
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
                 + (f" Lots (sold only to a coalition of {m['lots'][0]['min_members']}+ paying labs): {lots}."
                    if lots else ""))
    if obs["offers"]:
        lines.append("Open offers: " + "; ".join(
            f"{o['id']} {o['from']}->{o['to']} {o['side']} {o['hours']:g}h of {o['block']} for ${o['price']:g}"
            + (f" (pitch, score {o['score']:.2f})" if o["pitch"] else "") for o in obs["offers"]))
    if obs["coalitions"]:
        lines.append("Coalitions: " + "; ".join(
            f"{c['id']} for {c['lot']} by {c['proposer']}, {c['status']}, members {','.join(c['members'])}, shares "
            f"{json.dumps(c['shares'], separators=(',', ':'))}, committed {','.join(c['committed']) or 'none'}"
            for c in obs["coalitions"]))
    return "\n".join(lines)


def assert_market_no_leak(text: str, env: MarketEnv, lab: int = 0) -> str:
    """Raise ``LeakError`` if a prompt for ``lab`` names another lab's private jobs (a bug guard:
    the view is a projection already; this catches a prompt builder that reaches around it)."""
    for other in env.world.labs:
        if other.id != lab:
            for job in other.jobs:
                if re.search(rf"(?<![\w.]){re.escape(job.id)}(?![\w.]|\.\d)", text):
                    raise LeakError(f"prompt for lab{lab} names {other.name}'s private job {job.id}")
    return text


@dataclass
class MarketRecord(EpisodeRecord):
    env: MarketEnv | None = None  # the finished environment (outcomes, offers, coalitions)


PolicySpec = LLMAgent | Teacher | str | Callable[[], MarketPlayer]


def _lab0(spec: PolicySpec) -> tuple[MarketPlayer | None, Conversation | None]:
    """Lab 0's seated player (scripted policy or a teacher's player) and, for a model or a teacher
    writing into one, its ``Conversation``."""
    if isinstance(spec, LLMAgent):
        return None, Conversation(spec, LAB, None)
    scripted = spec.player if isinstance(spec, Teacher) else spec
    player = make_policy(scripted) if isinstance(scripted, str) else scripted()
    return (None, Conversation(spec.agent, LAB, None, teacher=player)) if isinstance(spec, Teacher) else (player, None)


def play_market_episodes(episodes: Sequence[tuple[str, int]], policy: PolicySpec | list[PolicySpec],
                         counterparts: str | None = None, name: str = "model",
                         on_done: Callable[[int], None] | None = None) -> list[MarketRecord]:
    """Play ``(task, seed)`` market episodes in lockstep with ``policy`` in lab 0 (an ``LLMAgent``, a
    ``Teacher``, or a scripted policy by name or factory; one for all or one per episode) and the
    world's archetypes (or ``counterparts``) in the other labs. One record per episode, in order."""
    n = len(episodes)
    policies = policy if isinstance(policy, list) else [policy] * n
    if len(policies) != n:
        raise ValueError("a per-episode policy list must have one entry per episode")
    lab0 = [_lab0(p) for p in policies]
    matches = [MarketMatch(task, seed, player, counterparts) for (task, seed), (player, _) in zip(episodes, lab0)]
    seats = [conv if conv is not None else player for player, conv in lab0]
    for match, seat in zip(matches, seats):
        if isinstance(seat, Conversation) and seat.teacher is not None:  # seeded like a seated lab 0
            seat.teacher.reset(match.env.observe(0), seat_rng(match.task, match.seed, 0))
    last: dict[int, MarketStep] = {}  # each episode's latest lab-0 step (what the next user turn reports)
    active = list(range(n))
    while active:
        replies, waiting = {}, {}
        for i in active:
            match = matches[i]
            match.advance()  # scripted labs (and a scripted lab 0) act inline
            if match.env.done:
                continue
            seat, env = seats[i], match.env
            obs = env.observe(0)
            system = None if seat.messages else market_system_prompt(obs, seat.agent.reasoning_mode)
            user = market_user_message(obs, last.get(i))
            assert_market_no_leak((system or "") + user, env)
            # the market's text holds no intended control token; a lab's echoed words or ids could
            guard = seat.agent.guard
            seat.push([guard(user)], None if system is None else guard(system))
            if seat.teacher is not None:  # in option_b an empty think block first, as Qwen3 writes when not thinking
                think = "<think>\n\n</think>\n\n" if seat.agent.reasoning_mode == "option_b" else ""
                replies[i] = seat.write(think + json.dumps(seat.teacher.act(obs)))
            else:
                waiting.setdefault(id(seat.agent), []).append(i)
        for idx in waiting.values():
            texts = generate_replies(seats[idx[0]].agent, [seats[i] for i in idx])
            replies.update(zip(idx, texts))
        active, results = step_replies(matches, active, replies, on_done)
        last.update(results)
    return [_record(m.env, seat, ep, name) for m, seat, ep in zip(matches, seats, episodes)]


def _record(env: MarketEnv, seat, episode: tuple[str, int], name: str) -> MarketRecord:
    out = env.outcome(0)
    return MarketRecord(scenario_id=f"{episode[0]}/{episode[1]}", seed=episode[1], reward=out["reward"], metrics=out,
                        transcript=transcript(env, name), trained_role=LAB, **token_fields(seat), env=env)
