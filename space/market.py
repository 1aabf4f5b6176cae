"""Live GPU-market games for the Space and its API: one game per session id.

Lab 0 is played by a policy (the rule ``expert`` by default, any baseline, or ``human``: a
person who sends JSON actions through ``act``); the other labs are scripted counterparts with
the archetypes the seed draws (``world``) or one archetype chosen for all. Every game has its
own environment, players and lock, so two sessions never see or change each other's state.

While a person plays they see lab 0's projection (``MarketEnv.observe``): their own money,
jobs and blocks, the public market, the offers and coalitions that involve them, and the
events delivered to them. Other labs' money, jobs and archetypes, and the judge's reasons
about another lab's pitch, appear only once the game is over, or when agents alone play (a
spectator sees everything).
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from dataclasses import dataclass

from env.market import rules
from env.market.actions import ACTION_DOCS, EXAMPLES, MAX_ACTION_CHARS, Invalid, parse_action
from env import settings
from env.market.evaluation import transcript
from env.market.moves import render_move
from env.market.play import MarketMatch
from env.market.players import POLICIES, make_policy
from env.market.world import ACTIONS_PER_TURN, ARCHETYPES, LOT_PRICE, SPOT_PRICE, TASKS
from space.sessions import GameError, Session, SessionStore, as_game_error

HUMAN = "human"
MODEL = "model"  # the trained market lab (space/model.py: HAGGLE_MARKET_MODEL or the shipped adapter)
WORLD = "world"  # counterparts: each lab's archetype as the seed draws it
COUNTERPARTS = (WORLD, *ARCHETYPES)
POLICY_CHOICES = (*POLICIES, MODEL, HUMAN)
TEMPLATES = {"wait": EXAMPLES["wait"], **EXAMPLES}  # what a person can start from in the page


def policy_choices() -> list[str]:
    """What the page offers for lab 0: the trained lab only where there is one."""
    from space.model import market_model_path  # noqa: PLC0415
    return [p for p in POLICY_CHOICES if p != MODEL or market_model_path()]


def lab0(policy: str):
    """Lab 0's player for ``policy`` (None: a person moves it)."""
    if policy == HUMAN:
        return None
    if policy == MODEL:
        from space.model import MarketModelLab  # noqa: PLC0415
        try:
            return MarketModelLab()
        except ValueError as exc:  # none here: the message says how to name one
            raise GameError(str(exc)) from None
    return make_policy(policy)


@dataclass
class MarketSession(Session):
    """A live market game: the policy in lab 0 and the counterparts in the others."""

    policy: str
    counterparts: str
    series: dict | None = None  # each lab's holdings per round, recorded as the game plays (``record_round``)
    recorded: tuple | None = None  # (round, over) when the series was last recorded

    @property
    def human(self) -> bool:
        return self.match.players[0] is None


def check_choice(value, options, what: str) -> str:
    with as_game_error():
        return settings.check_choice(value, options, what)


class MarketSessions(SessionStore):
    """Live market games by session id (bounded, forgotten after ``idle_s`` idle seconds)."""

    def new_game(self, task: str = "single_trade", policy: str = "expert", seed: int = 0,
                 counterparts: str = WORLD, advance: bool = True) -> MarketSession:
        """A game with every seat filled and (unless ``advance`` is False) agents advanced to the
        person's first move (or the end, when agents alone play); not stored."""
        check_choice(task, TASKS, "task")
        check_choice(policy, POLICY_CHOICES, "policy")
        check_choice(counterparts, COUNTERPARTS, "counterparts")
        with as_game_error():
            match = MarketMatch(task, settings.check_seed(seed), lab0(policy),
                                None if counterparts == WORLD else counterparts)
        game = MarketSession(secrets.token_hex(16), match, policy=policy, counterparts=counterparts)
        if advance:
            for _ in rounds(game):
                pass
        return game

    @staticmethod
    def view(game: MarketSession) -> dict:
        return view(game)

    def act(self, session_id: str, action) -> dict:
        """The person's action (JSON text or an object), then the agents' until the person is to
        move again or the game ends."""
        for state in self.act_steps(session_id, action):
            pass
        return state

    def act_steps(self, session_id: str, action):
        """``act``, yielding the state after the person's action and after each round the agents finish."""
        game = self.get(session_id)
        with game.lock:
            if not game.human:
                raise GameError("no person plays in this game: it is played by agents alone")
            if game.env.done:
                raise GameError("this game is over; start a new one")
            game.match.step(human_action(action))
            record_round(game)  # the person's action may end a round, or the game
            yield view(game)
            for _ in rounds(game):
                yield view(game)


def rounds(game: MarketSession):
    """Agents act until a person is to move or the game ends; yields after every round they finish
    (and at the end), for a page that shows the game round by round. The game's ``series`` records
    each lab's holdings at every round's end as it is played (the page's chart of an agents' game,
    drawn without playing it again: a model lab's game costs minutes on a CPU)."""
    match = game.match
    env, rnd = match.env, match.env.round
    record_round(game)
    for _ in match.moves():
        record_round(game)
        if env.done or env.round != rnd or match.players[env.to_move] is None:
            yield
        rnd = env.round


def record_round(game: MarketSession) -> None:
    """Start the game's ``series``, or add the holdings of a round that ended (or of the game's end)
    since it was last recorded: after any move, an agent's or a person's."""
    env = game.env
    if game.series is None:
        game.series = series_start(game.match)
    elif (env.round, env.done) != game.recorded:
        series_add(game.series, game.match)
    game.recorded = (env.round, env.done)


def human_action(action) -> str:
    """A person's action as the JSON text the environment reads. What is not an action of the
    schema is refused with the reason (no penalty: the person tries again); a well-formed action
    the rules refuse (an unknown offer, money they do not have) is played and penalised like any
    agent's."""
    if isinstance(action, dict):
        action = json.dumps(action)
    if not isinstance(action, str) or not action.strip():
        raise GameError('action must be one JSON object, e.g. {"action": "wait"}')
    if len(action) > MAX_ACTION_CHARS:
        raise GameError(f"action too long: {len(action):,} characters, at most {MAX_ACTION_CHARS:,}")
    parsed = parse_action(action)
    if isinstance(parsed, Invalid):
        raise GameError(f"not an action of the schema ({parsed.code}: {parsed.detail}); see market_schema")
    return json.dumps(parsed)


# ---------------------------------------------------------------------- views
ROUND_KEYS = ("round", "deadline", "start")  # fields that name a round (the environment counts from 0)
_ROUND_IN_TEXT = re.compile(r"\b(in round )(\d+)\b")


def from_one(x, by: int = 1):
    """A copy of an environment record with every round it names counted from 1, as the page does:
    the ``round``, ``deadline`` and ``start`` fields and "in round N" in refusal details. The
    environment and its agents count rounds from 0; the Space, its API and MCP from 1 (``by=-1``
    turns an API record back into the environment's numbering)."""
    if isinstance(x, dict):
        return {k: v + by if k in ROUND_KEYS and isinstance(v, int) and not isinstance(v, bool)
                else _ROUND_IN_TEXT.sub(lambda m: f"{m[1]}{int(m[2]) + by}", v) if k == "detail" and isinstance(v, str)
                else from_one(v, by) for k, v in x.items()}
    if isinstance(x, list):
        return [from_one(v, by) for v in x]
    return x


def view(game: MarketSession) -> dict:
    """The game as its viewer may see it, JSON-ready (see the module docstring). Rounds, job
    deadlines and block starts are numbered from 1 (round 1 of ``rounds``), as on the page."""
    env, w = game.env, game.env.world
    full = not game.human or env.done
    state = {
        "session_id": game.id, "task": game.match.task, "seed": game.match.seed, "policy": game.policy,
        "counterparts": game.counterparts, "you": "lab0" if game.human else None,
        "model": getattr(game.match.players[0], "name", None) if game.policy == MODEL else None,
        "round": min(env.round, w.task.rounds - 1), "rounds": w.task.rounds, "labs": env.labs,
        "done": env.done, "to_move": None if env.done else f"lab{env.to_move}",
    }
    if full:
        record = transcript(env, game.policy, game.match.archetypes)
        record["labs_info"] = record.pop("labs")
        state.update(record, ledger=env.ledger())
    else:
        obs = env.observe(0)
        obs.pop("events")  # a person sees every event delivered so far, not only those since they last acted
        state.update(observation=obs, events=list(env.events[0]),
                     your_steps=[s for s in env.transcript if s["lab"] == 0])
    if env.done:
        out = env.outcome(0)
        state["outcome"] = {**out, "explanation": explain(out)}
    return from_one(state)


def explain(out: dict) -> str:
    """Lab 0's reward with its terms filled in."""
    t = out["terms"]
    parts = " + ".join(f"{k} {t[k]:+,.2f}" for k in rules.REWARD_TERMS)
    return (f"Lab 0 completed {out['jobs_completed']} of {out['jobs']} job(s). Outcome = {parts} = "
            f"**${out['outcome']:+,.2f}**; reward = outcome / total job value (${out['scale']:,.2f}) = "
            f"**{out['reward']:+.3f}**.")


def _act(a) -> str:
    if not isinstance(a, dict):  # a raw reply (an untrained lab's): one line, and nothing that breaks a table cell
        text = " ".join(str(a).split())[:120].replace("`", "'").replace("|", "/")
        return f"`{text}`" if text else "*(empty reply)*"
    rest = ", ".join(f"{k}={json.dumps(v) if isinstance(v, (dict, list)) else v}" for k, v in a.items()
                     if k not in ("action", "text"))
    return f"`{a.get('action')}`" + (f" {rest}" if rest else "")


def _step_row(s: dict) -> str:
    result = "ok" if s["code"] == "ok" else f"**refused: {s['code']}** (−${rules.INVALID_PENALTY:g})"
    detail = str(s.get("detail", "")).replace("|", "/")
    return f"| lab{s['lab']} | {_act(s['action'])} | {result} | {detail} |"


def _outcome_table(outcomes: list[dict], labs: list[dict]) -> str:
    head = "| lab | plays | " + " | ".join(rules.REWARD_TERMS) + " | outcome | reward | jobs done |"
    lines = [head, "|" + "---|" * (len(rules.REWARD_TERMS) + 5)]
    for o, lab in zip(outcomes, labs):
        lines.append(f"| {o['lab']} | {lab['archetype']} | " + " | ".join(f"{o['terms'][k]:+,.2f}"
                                                                          for k in rules.REWARD_TERMS)
                     + f" | {o['outcome']:+,.2f} | {o['reward']:+.3f} | {o['jobs_completed']}/{o['jobs']} |")
    return "\n".join(lines)


def rounds_markdown(state: dict) -> str:
    """The game round by round: shocks, every action with its result, judged pitches with the
    judge's reasons, coalitions, and (at the end) every lab's reward terms. For a person still
    playing: their own view only."""
    if "steps" not in state:
        return person_markdown(state)
    out = []
    shocks = {}
    for s in state["shocks"]:
        shocks.setdefault(s["round"], []).append(s)
    pitches = {p["offer"]: p for p in state["pitches"]}
    by_round: dict[int, list[dict]] = {}
    for s in state["steps"]:
        by_round.setdefault(s["round"], []).append(s)
    order = sorted(set(by_round) | set(shocks))
    for r in order:
        if r != order[0]:
            out.append("\n</details>\n")
        out.append(f"<details{' open' if r == order[-1] else ''}><summary><b>Round {r} of {state['rounds']}</b> "
                   f"({len(by_round.get(r, []))} actions{', a shock' if shocks.get(r) else ''})</summary>\n")
        for sh in shocks.get(r, []):
            info = ", ".join(f"{k} {v}" for k, v in sh.items() if k not in ("round", "kind"))
            out.append(f"⚡ **Shock: {sh['kind'].replace('_', ' ')}**" + (f" ({info})" if info else ""))
        steps = by_round.get(r, [])
        if steps:
            out += ["", "| lab | action | result | detail |", "|---|---|---|---|", *map(_step_row, steps), ""]
        for s in steps:
            a = s["action"]
            if isinstance(a, dict) and a.get("action") == "pitch" and s["code"] == "ok":
                oid = str(s["detail"]).split()[1] if len(str(s["detail"]).split()) > 1 else ""
                p = pitches.get(oid)
                if p:
                    out.append(f"> **Pitch {oid}** {p['from']} → {p['to']}: “{p['text']}” — judge score "
                               f"**{p['score']:.2f}**, {p['status']}.  \n> " + "; ".join(p["reasons"]))
    if order:
        out.append("\n</details>\n")
    if state["pitches"]:
        out += ["", "#### The judge: every pitch, its score and the reasons", "", judge_markdown(state), ""]
    if state["coalitions"]:
        out += ["", "#### Coalitions", ""]
        for c in state["coalitions"]:
            shares = ", ".join(f"{k} {v:g} h" for k, v in c["shares"].items()) or "no shares"
            out.append(f"- {c['id']} for {c['lot']} (proposed by {c['proposer']}): {c['status']}; shares {shares}; "
                       f"committed {', '.join(c['committed']) or 'none'}")
    if state["done"]:
        out += ["", "#### Outcome (every lab)", "", _outcome_table(state["outcomes"], state["labs_info"])]
    return "\n".join(out) if out else "No actions yet."


def event_sentence(e: dict) -> str:
    """One market event as a sentence (the API keeps the JSON)."""
    kind = e.get("type")
    money = lambda x: f"${x:,.2f}"  # noqa: E731
    if kind == "offer":
        verb, prep = ("offers to sell", "to") if e.get("side") == "sell" else ("offers to buy", "from")
        text = (f"{e['from']} {verb} {e['hours']:g} GPU-hours of {e['block']} {prep} {e['to']} for "
                f"{money(e['price'])} ({e['id']})")
        if e.get("kind") == "pitch":
            text += f", with a pitch the judge scored {e['score']:.2f}: “{e['text']}”"
            if e.get("reasons"):
                text += " (" + "; ".join(e["reasons"]) + ")"
        return text + "."
    if kind == "deal":
        return (f"Deal on {e['offer']}: {e['seller']} sells {e['hours']:g} GPU-hours to {e['buyer']} for "
                f"{money(e['price'])} (new block {e['block']}).")
    if kind == "rejected":
        return f"{e['by']} rejected offer {e['offer']}."
    if kind == "shock":
        parts = [f"{k.replace('_', ' ')} {v}" for k, v in e.items() if k not in ("type", "kind", "round")]
        return f"Market shock: {str(e.get('kind', '')).replace('_', ' ')}" + (f" ({', '.join(parts)})." if parts else ".")
    if kind == "coalition":
        rest = ""
        if e.get("split"):
            rest = " Split: " + ", ".join(f"{k} {v:g} h" for k, v in e["split"].items()) + "."
        if e.get("fine"):
            rest += f" Fine {money(e['fine'])}."
        return f"Coalition {e['id']}: {e['status']}.{rest}"
    return "Event: " + ", ".join(f"{k} {v}" for k, v in e.items()) + "."


def judge_markdown(state: dict) -> str:
    """Every judged pitch: who pitched what to whom, the judge's score and its reasons."""
    pitches = state.get("pitches") or []
    if not pitches:
        return "No pitch was made in this game."
    out = ["| offer | from → to | pitch | judge score | outcome | the judge's reasons |", "|---|---|---|---|---|---|"]
    for p in pitches:
        reasons = "; ".join(p.get("reasons", [])).replace("|", "/")
        out.append(f"| {p.get('offer', '')} | {p['from']} → {p['to']} | “{str(p['text']).replace('|', '/')}” | "
                   f"{p['score']:.2f} | {p['status']} | {reasons} |")
    return "\n".join(out)


@functools.lru_cache(maxsize=4)
def showcase_seed(task: str = "coalition_market", policy: str = "expert", limit: int = 100) -> int:
    """The first seed whose game shows the market's mechanics: a coalition forms and a pitch is
    judged (the page's default, found by this rule rather than picked by hand)."""
    from env.market import make_policy, play_market  # noqa: PLC0415
    for seed in range(limit):
        env = play_market(task, seed, make_policy(policy))
        if env.coalitions and any(o.text for o in env.offers.values()):
            return seed
    return 0


# ---------------------------------------------------------------------- before vs after (stored games)
BEFORE_AFTER_RULE = ("The seed shown first for each task is chosen by a rule, not by hand: of the held-out seeds "
                     "every lab played, the one where training changed lab 0's reward most (the largest |reward of "
                     "the RL lab − reward of the untrained one|, or of the SFT one on a task the untrained model did "
                     "not play; a tie goes to the lowest seed).")


def side_by_side(name: str | None) -> dict[str, dict[int, dict[str, dict]]]:
    """The stored games of transcript artifact ``name`` that can be read side by side: task -> seed -> policy ->
    game, for the seeds where every model lab of the task played, beside the scripted policies that played all of
    those seeds too (``evaluate.py --env market --transcript_seeds``: the expert); a task needs two policies to
    compare. Model labs come first, in the file's order, then the scripted policies."""
    from space import figures as F  # noqa: PLC0415

    games: dict[str, dict[int, dict[str, dict]]] = {}
    for t in F.transcripts(name) if name else []:
        games.setdefault(t["task"], {}).setdefault(t["seed"], {})[t["policy"]] = t
    out = {}
    for task, seeds in games.items():
        models = list(dict.fromkeys(p for g in seeds.values() for p in g if p not in POLICIES))
        both = [seed for seed in sorted(seeds) if models and all(m in seeds[seed] for m in models)]
        # a scripted policy is a column where it played every one of those seeds (a task's one judged game is not)
        scripted = [p for p in dict.fromkeys(p for s in both for p in seeds[s] if p in POLICIES)
                    if all(p in seeds[s] for s in both)]
        if both and (scripted or len(models) >= 2):
            out[task] = {seed: {p: seeds[seed][p] for p in [*models, *scripted]} for seed in both}
    return {task: kept for task, kept in out.items() if kept}


def before_after_pair(policies) -> tuple[str, str]:
    """The earliest and the RL lab among ``policies``: before is the untrained lab (``_base``), else the SFT one
    (``_sft``: a task the untrained model did not play), else the first model lab; after is the ``_grpo`` lab, else
    the last model lab."""
    models = [p for p in policies if p not in POLICIES]
    before = next((p for stage in ("_base", "_sft") for p in models if p.endswith(stage)), models[0])
    after = next((p for p in models if p.endswith("_grpo")), models[-1])
    return before, after


def before_after_seed(seeds: dict[int, dict[str, dict]]) -> int:
    """The seed ``BEFORE_AFTER_RULE`` picks among ``seeds`` (one task of ``side_by_side``)."""
    def change(seed):
        g = seeds[seed]
        before, after = before_after_pair(g)
        return abs(g[after]["outcomes"][0]["reward"] - g[before]["outcomes"][0]["reward"]), -seed
    return max(seeds, key=change)


def stored_game_markdown(game: dict) -> str:
    """One stored game (an evaluation transcript) as the page shows a finished game: lab 0's reward, then the
    rounds, pitches, coalitions and every lab's outcome."""
    from space import figures as F  # noqa: PLC0415

    out = game["outcomes"][0]
    state = from_one({**game, "rounds": TASKS[game["task"]].rounds, "done": True, "labs_info": game["labs"]})
    return (f"**{F.display_name(game['policy'])}** in lab 0: reward **{out['reward']:+.3f}**, "
            f"{out['jobs_completed']}/{out['jobs']} "
            f"job(s) done, {out['deals']} deal(s), {out['invalid']} refused action(s).\n\n" + rounds_markdown(state))


def _holdings(match: MarketMatch) -> tuple[list[float], list[float]]:
    """Each lab's money and the GPU-hours of the blocks it owns, now."""
    w = match.env.world
    hours = [0.0] * len(w.labs)
    for b in w.blocks.values():
        if 0 <= b.owner < len(w.labs):
            hours[b.owner] += b.hours
    return [lab.money for lab in w.labs], hours


def series_start(match: MarketMatch) -> dict:
    """A per-round record of each lab's money and GPU-hours held, from the game's start."""
    money, hours = _holdings(match)
    return {"rounds": [0], "money": [[m] for m in money], "hours": [[h] for h in hours],
            "labs": [lab.name for lab in match.env.world.labs]}


def series_add(series: dict, match: MarketMatch) -> None:
    """The holdings at the end of the round that just ended (or of the game)."""
    money, hours = _holdings(match)
    series["rounds"].append(len(series["rounds"]))
    for i in range(len(money)):
        series["money"][i].append(money[i])
        series["hours"][i].append(hours[i])


def person_markdown(state: dict) -> str:
    """What the person playing lab 0 sees: their resources, the market, offers, events."""
    o = state["observation"]
    lines = [f"**You are lab0**, round {state['round']} of {state['rounds']}; {o['actions_left']} action(s) left "
             f"this turn. Money **${o['money']:,.2f}**, reputation {o['reputation']:.2f}.",
             "", "| your job | GPU-hours | done | deadline (round) | value | status |", "|---|---|---|---|---|---|"]
    lines += [f"| {j['id']} | {j['hours']:g} | {j['done']:g} | {j['deadline']} | ${j['value']:,.2f} | {j['status']} |"
              for j in o["jobs"]]
    lines += ["", "| block | owner | GPU-hours | starts (round) | reliability | energy/h |", "|---|---|---|---|---|---|"]
    lines += [f"| {b['id']} | {b['owner']} | {b['hours']:g} | {b['start']} | {b['reliability']:.2f} | "
              f"{b['energy']:.2f} |" for b in o["blocks"]]
    m = o["market"]
    lots = "; ".join(f"{x['id']}: {x['hours']:g} h for ${x['price']:,.2f}" for x in m["lots"]) or "none"
    rule = f" (sold only to a coalition of {m['lots'][0]['min_members']} or more paying labs)" if m["lots"] else ""
    lines += ["", f"Spot: {m['spot_hours']:g} GPU-hours at ${m['spot_price']:.2f}/h; energy ${m['energy_price']:.2f}/unit; "
                  f"volume lots{rule}: {lots}."]
    if o["offers"]:
        lines.append("\n##### Open offers involving you\n" + "; ".join(
            f"{x['id']} {x['from']}→{x['to']} {x['side']} {x['hours']:g} h of {x['block']} for ${x['price']:,.2f}"
            + (f" (pitch, judge score {x['score']:.2f})" if x["pitch"] else "") for x in o["offers"]))
    if o["coalitions"]:
        lines.append("\n##### Coalitions\n" + "; ".join(f"{c['id']} for {c['lot']}: {c['status']}, members "
                                                     f"{', '.join(c['members'])}" for c in o["coalitions"]))
    if o.get("moves"):
        lines.append("\n##### Moves open to you\nWrite one as a JSON action, with your price for `P` and your words "
                     "for `T`:\n" + "\n".join(f"- `{render_move(m)}`" for m in o["moves"]))
    if state["events"]:
        lines.append("\n##### What you have seen\n" + "\n".join(f"- {event_sentence(e)}"
                                                                 for e in state["events"][-12:]))
    if state["your_steps"]:
        lines.append("\n##### Your actions\n" + "\n".join(
            f"- round {s['round']}: {_act(s['action'])} → {s['code']}: {s['detail']}" for s in state["your_steps"]))
    return "\n".join(lines)


def card_markdown(state: dict) -> str:
    who = "you (lab0)" if state["you"] else f"**{state['policy']}**" + (f" (`{state['model']}`, greedy)"
                                                                        if state.get("model") else "")
    head = (f"### {state['task']} · seed {state['seed']}\nLab 0: {who}; the other {state['labs'] - 1} lab(s): "
            f"{'archetypes drawn from the seed' if state['counterparts'] == WORLD else state['counterparts']}. "
            f"Round {state['round']} of {state['rounds']}" + (" · **game over**" if state["done"] else "") + ".")
    if "labs_info" in state:
        rows = ["| lab | plays | money at start | jobs (GPU-hours, deadline round, value) |", "|---|---|---|---|"]
        for lab in state["labs_info"]:
            jobs = "; ".join(f"{j['id']}: {j['hours']:g} h by {j['deadline']}, ${j['value']:,.0f} ({j['status']})"
                             for j in lab["jobs"])
            rows.append(f"| {lab['name']} | {lab['archetype']} | ${lab['start_money']:,.0f} | {jobs} |")
        head += "\n\n" + "\n".join(rows)
    return head


ACTIONS_TABLE = "| action | meaning |\n|---|---|\n" + "\n".join(f"| `{k}` | {v} |" for k, v in ACTION_DOCS.items())


def task_line(name: str) -> str:
    t = TASKS[name]
    return (f"{t.description} {t.labs} labs, {t.rounds} rounds of up to {ACTIONS_PER_TURN} actions per lab, "
            f"{t.shocks} shock(s), {t.spot_hours:g} spot GPU-hours" + (", a volume lot." if t.lot else "."))


REWARD_TEXT = {
    "value": "the value of each job completed (all its GPU-hours allocated before its deadline)",
    "trade": "money received minus money paid: to other labs, to the provider (spot, lots) and into coalition escrow "
             "(refunded escrow comes back here)",
    "energy": "energy bills for the GPU-hours run on jobs (block energy per hour x the energy price then)",
    "fines": f"paid for leaving a coalition after committing ({rules.LEAVE_FINE:.0%} of the contribution), or "
             "received as a member when another leaves",
    "invalid": f"-${rules.INVALID_PENALTY:g} for every action the environment refuses (with a reason code)",
}
REWARD_MD = ("**Reward** (dense, every term used): each action adds to lab 0's terms below; their sum is the "
             "economic outcome in dollars, and the reward is that outcome divided by the lab's total job value. "
             "Doing nothing earns exactly 0 in every term. Money and GPU-hours are conserved at every step.\n\n"
             "| term | what it counts |\n|---|---|\n" + "\n".join(f"| `{k}` | {v} |" for k, v in REWARD_TEXT.items())
             + f"\n\nSpot capacity costs ${SPOT_PRICE:.2f} per GPU-hour (shocks move it); a volume lot "
               f"${LOT_PRICE:.2f}, bought whole by a coalition. Counterparts trade only when their own utility rises "
               "by a margin; a pitch is scored by a rubric judge against the pitcher's real need, not its words.")
