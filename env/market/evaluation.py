"""Evaluation of market policies: each policy in seat 0 of every task over held-out seeds, the
counterparts' archetypes in the other seats. Rows follow the artifact contract (``policy``,
``task``, reward mean/std/CI, ``deal_rate``) plus market statistics."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Callable

from env.bargain.evaluation import Z95, _mean
from env.market.env import MarketEnv
from env.market.play import play_market
from env.market.players import MarketPlayer

MARKET_EVAL_SEED_BASE = 1_000_000  # training draws its seeds below this
PASSIVE = ("wait", "finish")  # the actions that do nothing in the market


def lab_actions(env: MarketEnv, lab: int = 0) -> dict:
    """A lab's actions in a game: how many, how many act (not wait or finish; carried out or refused), and the
    refusals by reason code."""
    own = [s for s in env.transcript if s["lab"] == lab]
    return {"actions": len(own),
            "acts": sum(not (isinstance(s["action"], dict) and s["action"].get("action") in PASSIVE) for s in own),
            "refused": dict(Counter(s["code"] for s in own if s["code"] != "ok"))}


def summarize(task: str, policy: str, envs: list[MarketEnv]) -> dict:
    outs = [e.outcome(0) for e in envs]
    rewards = [o["reward"] for o in outs]
    n = len(rewards)
    mean = statistics.mean(rewards)
    std = statistics.stdev(rewards) if n > 1 else 0.0
    half = Z95 * std / math.sqrt(n) if n > 1 else 0.0
    shocks: dict[str, list[float]] = {}
    for e, r in zip(envs, rewards):
        for kind in {s["kind"] for s in e.shocks_hit}:
            shocks.setdefault(kind, []).append(r)
    in_coalition = [any(c.status == "bought" and 0 in c.shares for c in e.coalitions.values()) for e in envs]
    played = [lab_actions(e) for e in envs]
    actions = sum(p["actions"] for p in played)
    refused = sum((Counter(p["refused"]) for p in played), Counter())
    return {
        "policy": policy, "task": task, "split": "test", "episodes": n,
        "reward_mean": mean, "reward_std": std, "reward_ci95": [mean - half, mean + half],
        "deal_rate": sum(o["deals"] > 0 for o in outs) / n,
        "deals_mean": sum(o["deals"] for o in outs) / n,
        "job_completion_rate": sum(o["jobs_completed"] for o in outs) / max(1, sum(o["jobs"] for o in outs)),
        "coalitions_joined_mean": sum(o["coalitions"] for o in outs) / n,
        "coalition_bought_rate": sum(in_coalition) / n,
        "pitches_mean": sum(o["pitches"] for o in outs) / n,
        "pitch_score_mean": _mean([o.verdict.score for e in envs for o in e.offers.values() if o.text and o.frm == 0]),
        "invalid_rate": sum(o["invalid"] for o in outs) / max(1, sum(o["actions"] for o in outs)),
        # lab 0's actions per game, and those that act (not wait or finish, carried out or refused); each refusal
        # reason's share of its actions
        "actions_mean": actions / n,
        "acts_mean": sum(p["acts"] for p in played) / n,
        "refused_by_code": {code: k / max(1, actions) for code, k in refused.most_common()},
        "spot_hours_mean": sum(o["spot_hours"] for o in outs) / n,
        "terms_mean": {k: sum(o["terms"][k] for o in outs) / n for k in outs[0]["terms"]},
        "outcome_mean": sum(o["outcome"] for o in outs) / n,
        "under_shocks": {k: {"episodes": len(v), "reward_mean": statistics.mean(v)} for k, v in sorted(shocks.items())},
        "steps_mean": sum(len(e.transcript) for e in envs) / n,
        # the whole market (every lab), so the counterparts' behaviour is on the record too
        "market_deals_mean": sum(o.status == "accepted" for e in envs for o in e.offers.values()) / n,
        "zero_hour_deals": sum(o.status == "accepted" and o.hours <= 0 for e in envs for o in e.offers.values()),
        "counters_mean": sum(bool(o.counter_of) for e in envs for o in e.offers.values()) / n,
        "counters_accepted_mean": sum(bool(o.counter_of) and o.status == "accepted"
                                      for e in envs for o in e.offers.values()) / n,
        "policy_counters_mean": sum(bool(o.counter_of) and o.frm == 0 for e in envs for o in e.offers.values()) / n,
        "lots_bought_rate": sum(any(c.status == "bought" for c in e.coalitions.values()) for e in envs) / n,
    }


def evaluate(tasks: list[str], policies: dict[str, Callable[[], MarketPlayer]], episodes: int,
             seed_base: int = MARKET_EVAL_SEED_BASE, on_episode: Callable[[], None] | None = None
             ) -> tuple[list[dict], dict[str, tuple[str, MarketEnv]]]:
    """Rows for every task x policy, and per task the first finished game with a judged pitch,
    with the policy that played it (for the transcripts)."""
    rows, judged = [], {}
    for task in tasks:
        for name, make in policies.items():
            envs = []
            for k in range(episodes):
                env = play_market(task, seed_base + k, make())
                envs.append(env)
                if task not in judged and any(o.text for o in env.offers.values()):
                    judged[task] = (name, env)
                if on_episode:
                    on_episode()
            rows.append(summarize(task, name, envs))
    return rows, judged


def transcript(env: MarketEnv, policy: str, archetypes: list[str] | None = None) -> dict:
    """A finished game for the record: every action with its result, the shocks, every pitch with
    the judge's full reasons (a spectator's view), and each lab's outcome. ``archetypes``: the
    labs' archetypes as played, when they differ from the world's draw (``MarketMatch.archetypes``)."""
    w = env.world
    played = archetypes or [lab.archetype for lab in w.labs]
    return {
        "task": w.task.name, "seed": w.seed, "policy": policy,
        "labs": [{"name": lab.name, "archetype": "policy under test" if lab.id == 0 else played[lab.id],
                  "start_money": env.start_money[lab.id], "jobs": [{"id": j.id, "hours": j.hours, "deadline": j.deadline,
                                                                     "value": j.value, "status": j.status}
                                                                    for j in lab.jobs]} for lab in w.labs],
        "shocks": env.shocks_hit,
        "steps": env.transcript,
        "pitches": [{"offer": o.id, "from": f"lab{o.frm}", "to": f"lab{o.to}", "text": o.text, "hours": o.hours,
                     "price": o.price, "status": o.status, "score": o.verdict.score, "reasons": list(o.verdict.reasons)}
                    for o in env.offers.values() if o.text],
        "coalitions": [env.coalition_view(c) for c in env.coalitions.values()],
        "outcomes": [env.outcome(i) for i in range(env.labs)],
    }


def format_market_table(rows: list[dict]) -> str:
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    cell = {(r["policy"], r["task"]): r for r in rows}
    lines = ["policy".ljust(16) + "".join(t.rjust(26) for t in tasks)]
    for p in policies:
        parts = []
        for t in tasks:
            r = cell.get((p, t))
            parts.append((f"{r['reward_mean']:+.3f} [{r['reward_ci95'][0]:+.3f},{r['reward_ci95'][1]:+.3f}]"
                          if r else "—").rjust(26))
        lines.append(p.ljust(16) + "".join(parts))
    return "\n".join(lines)
