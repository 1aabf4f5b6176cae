"""Live bilateral games for the Space and its API: one game per session id.

A game seats two players: any scripted buyer or seller by name, ``model`` (the trained
checkpoint, see ``space.model``), or ``human`` (a person who moves through ``reply``). Agents
move on their own until it is the person's turn or the game ends. Every game has its own
environment, players and lock, so two sessions never see or change each other's state.

What a person sees while playing is their own role's projection of the game (the
environment's ``observe``): the opponent's public messages, never its private reasoning or
private value. When the game ends, or when nobody human is seated (a spectator), the whole
game is shown, both sides' reasoning included.
"""

from __future__ import annotations

import html
import queue
import secrets
import threading
import time
from dataclasses import dataclass

from env.bargain.env import DEFAULT_MAX_TURNS, BargainEnv
from env.bargain import play
from env.bargain.play import Match, available_sources, check_max_turns, check_mode, pick_scenario
from env.bargain.players import ALL_SELLERS, BUYERS, make_player
from env.bargain.protocol import BUY, DEAL, MAX_TALK_CHARS, QUIT, REJECT, SELL, Action, compose_reply, format_price, \
    parse_reply, split_private
from env.bargain.rules import BUYER, OTHER, SELLER, bargained_ratio
from env.bargain.sources import Scenario
from space.sessions import GameError, MoveRefused, Session, SessionStore, as_game_error

HUMAN = "human"
MODEL = "model"
HUMAN_ACTIONS = ("offer", "accept", "reject", "quit")

__all__ = ["BargainSessions", "BargainSession", "available_sources", "check_seed", "choices", "view", "turn_messages", "HUMAN", "MODEL"]


def check_seed(seed) -> int:
    with as_game_error():
        return play.check_seed(seed)


def choices(role: str, model_roles: tuple[str, ...] | list[str] = (BUYER,)) -> list[str]:
    """Who may sit in ``role``: scripted players, the trained model (only in a role it was trained
    for) and a person."""
    return [*(BUYERS if role == BUYER else ALL_SELLERS), *([MODEL] if role in model_roles else []), HUMAN]


def _seat(role: str, name: str, mode: str, model_loader, model_roles=(BUYER,)):
    if not isinstance(name, str):
        raise GameError(f"the {role} must be named by text; choose from {', '.join(choices(role, model_roles))}")
    if name == HUMAN:
        return None
    if name == MODEL:
        if role not in model_roles:
            raise GameError(f"the model was trained as the {' and '.join(model_roles)} only, not the {role}; "
                            f"choose from {', '.join(choices(role, model_roles))}")
        return model_loader(role, mode)
    if name not in (BUYERS if role == BUYER else ALL_SELLERS):
        raise GameError(f"unknown {role} {name!r}; choose from {', '.join(choices(role, model_roles))}")
    return make_player(role, name, mode)


HIDDEN = "hidden"  # a sealed seat's name while the game runs


@dataclass
class BargainSession(Session):
    """A live bilateral game: its test product, reasoning format and the names in each seat.
    ``sealed`` names what no view shows while the game runs (a challenge's ``seed``, ``product`` and
    scripted opponent: with them a visitor could rehearse the very game); every view reads it, so no
    endpoint can show them."""

    product: int
    mode: str
    names: dict
    sealed: tuple = ()

    @property
    def human(self) -> str | None:
        return self.match.outside_role()


class BargainSessions(SessionStore):
    """Live bilateral games by session id, bounded in number, forgotten after ``idle_s`` without a move."""

    def __init__(self, model_loader=None, max_sessions: int = 1000, idle_s: float = 1800.0, model_roles=None):
        super().__init__(max_sessions, idle_s)
        self.model_loader = model_loader or _no_model
        self._model_roles = model_roles  # a callable: the roles the model was trained for

    @property
    def model_roles(self) -> list[str]:
        return list(self._model_roles()) if self._model_roles else [BUYER]

    @staticmethod
    def view(game: BargainSession) -> dict:
        return view(game)

    # ------------------------------------------------------------------ lifecycle
    def new_game(self, source: str = "builtin", buyer: str = "expert", seller: str = "neutral",
                 product: int | None = None, seed: int = 0, reasoning_mode: str = "option_a",
                 max_turns: int = DEFAULT_MAX_TURNS, advance: bool = True) -> BargainSession:
        """A game with its seats filled and (unless ``advance`` is False) agents advanced to the
        first human move; not stored."""
        if buyer == HUMAN and seller == HUMAN:
            raise GameError("one side must be an agent: a person plays the buyer or the seller, not both")
        with as_game_error():
            check_mode(reasoning_mode)
            check_max_turns(max_turns)
            product, scenario = pick_scenario(source, "test", product, play.check_seed(seed))
        roles = self.model_roles if MODEL in (buyer, seller) else [BUYER]
        match = Match(scenario, _seat(BUYER, buyer, reasoning_mode, self.model_loader, roles),
                      _seat(SELLER, seller, reasoning_mode, self.model_loader, roles), seed, max_turns)
        game = BargainSession(secrets.token_hex(16), match, product=product, mode=reasoning_mode,
                              names={BUYER: buyer, SELLER: seller})
        if advance:
            match.advance()
        return game

    def reply(self, session_id: str, action: str, price: float | None = None, talk: str = "") -> dict:
        """The person's move, then the agents' until it is the person's turn again or the game ends."""
        for state in self.reply_steps(session_id, action, price, talk):
            pass
        return state

    def reply_steps(self, session_id: str, action: str, price: float | None = None, talk: str = "",
                    previews: bool = False):
        """``reply``, yielding the state after the person's move and after each agent reply (and, with
        ``previews``, while a model writes: see ``agent_replies``)."""
        game = self.get(session_id)
        with game.lock:
            role = game.human
            if role is None:
                raise GameError("no person plays in this game: it is played by agents alone")
            if game.env.done:
                raise GameError("this game is over; start a new one")
            game.match.step(human_reply(role, game.env.observe(role).their_offer, action, price, talk, game.mode))
            yield view(game)
            yield from agent_replies(game, previews)


PREVIEW_EVERY_S = 0.25  # how often a reply being written is shown anew


def agent_replies(game: BargainSession, previews: bool = False):
    """The agents' replies, one at a time, until a person must move or the game ends (the caller holds the game's
    lock): the view after each reply and, with ``previews``, while a model seat writes, the view with ``writing``:
    ``{"role", "text"}``, the reply so far as the viewer may see it (a person sees only its public part, never the
    private reasoning; a spectator sees it all, as the finished game shows it)."""
    while not game.env.done:
        writer = game.env.to_move
        agent = getattr(getattr(game.match.seats[writer], "player", None), "agent", None)  # a model seat's
        tokenizer = getattr(agent, "tokenizer", None)
        if not previews or tokenizer is None:
            if not game.match.advance(limit=1):
                return
            yield view(game)
            continue
        written: queue.SimpleQueue = queue.SimpleQueue()
        moved = threading.Thread(target=_move_streaming, args=(game, written), daemon=True, name="model-move")
        moved.start()
        ids, shown, done = [], "", False
        while not done:
            time.sleep(PREVIEW_EVERY_S)
            while not written.empty():
                item = written.get()
                if isinstance(item, int):
                    ids.append(item)
                else:
                    done, outcome = True, item
            text = tokenizer.decode(ids, skip_special_tokens=True)
            text = text if game.human is None else split_private(text)[1]
            if not done and text != shown:
                shown = text
                yield {**view(game), "writing": {"role": writer, "text": text}}
        moved.join()
        if isinstance(outcome, BaseException):
            raise outcome
        if not outcome:
            return
        yield view(game)


def _move_streaming(game: BargainSession, written: queue.SimpleQueue) -> None:
    """One agent reply, its tokens put on ``written`` as they are written; then the moves made (or the error)."""
    from space.model import streaming  # noqa: PLC0415 - the model seat, imported when first asked

    try:
        with streaming(written.put):
            outcome = game.match.advance(limit=1)
    except BaseException as exc:  # noqa: BLE001 - handed to the page's thread, which raises it
        outcome = exc
    written.put(outcome)


def _no_model(role: str, mode: str):
    raise GameError("no trained model is configured in this process")


def human_reply(role: str, their_offer: float | None, action: str, price, talk: str, mode: str) -> str:
    """A person's move written in the protocol, checked before it reaches the environment.

    Unreadable input is refused with a reason (the person may try again); a readable move that
    breaks the rules (an offer over the budget, below the cost) is played and scored like any
    agent's."""
    if action not in HUMAN_ACTIONS:
        raise MoveRefused(f"action must be one of {', '.join(HUMAN_ACTIONS)}; got {str(action)[:40]!r}")
    talk = "" if talk is None else talk
    if not isinstance(talk, str):
        raise MoveRefused("talk must be text")
    if len(talk) > MAX_TALK_CHARS:
        raise MoveRefused(f"message too long: {len(talk):,} characters, at most {MAX_TALK_CHARS:,}")
    talk = " ".join(talk.split())
    if action == "offer":
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 < price < 1e9 or price != price:
            raise MoveRefused(f"an offer needs a positive price in dollars; got {price!r}")
        move = Action(BUY if role == BUYER else SELL, round(float(price), 2))
    elif action == "accept":
        if their_offer is None:
            raise MoveRefused(f"there is no {OTHER[role]} offer to accept yet")
        move = Action(DEAL, their_offer)
    else:
        move = Action(REJECT if action == "reject" else QUIT)
    text = compose_reply("", talk or "", move, mode)
    parsed = parse_reply(text)
    if not parsed.ok:
        raise MoveRefused(f"your message could not be read ({parsed.error}: {parsed.detail}); "
                        "leave the action and the price to the controls, not the message")
    return text


# ---------------------------------------------------------------------- views
def view(game: BargainSession) -> dict:
    """The game as its viewer may see it, JSON-ready (see the module docstring)."""
    env, s, human = game.env, game.match.scenario, game.human
    full = human is None or env.done
    state = {
        "session_id": game.id, "product": game.product, "seed": game.match.seed, "reasoning_mode": game.mode,
        "buyer": game.names[BUYER], "seller": game.names[SELLER], "you": human,
        "title": s.title, "category": s.category, "description": s.description, "list_price": s.list_price,
        "turn": min(env.turn, env.max_turns), "max_turns": env.max_turns, "done": env.done,
        "to_move": None if env.done else env.to_move,
    }
    if full:
        state.update(budget=s.budget, cost=s.cost, interest=s.interest, messages=full_messages(env),
                     transcript=env.transcript())
    else:
        obs = env.observe(human)
        state.update({"budget" if human == BUYER else "cost": obs.private_value, "your_offer": obs.my_offer,
                      "their_offer": obs.their_offer, "messages": role_messages(env, human)})
    if game.sealed and not env.done:
        for key in game.sealed:
            if key in (BUYER, SELLER):
                state[key] = HIDDEN
            else:
                state.pop(key, None)
    if env.done:
        m = env.metrics()
        state["outcome"] = {**m.to_dict(), "seller_reward": env.reward_of(SELLER),
                            "seller_surplus": None if m.price is None else round(m.price - s.cost, 2),
                            "explanation": explain(s, m)}
    return state


def _chat_role(role: str) -> str:
    return "user" if role == BUYER else "assistant"


def full_messages(env: BargainEnv) -> list[dict]:
    """Every reply, private reasoning in a collapsible message the other side never saw."""
    return turn_messages(env.transcript()["turns"])


def as_text(text: str) -> str:
    """A player's words as the page shows them: text, never markup (``<b>`` or ``<img ...>`` typed by a person or
    written by a model is shown as typed, not rendered). The API's JSON keeps the words as they were."""
    return html.escape(text or "", quote=False)


def page_messages(messages: list[dict]) -> list[dict]:
    """Chat messages for the page's chat boxes: every message's text escaped (``as_text``); the markdown around
    the words (the speaker in bold, the action in code) has no ``<``, ``>`` or ``&`` to change."""
    return [{**m, "content": as_text(m["content"])} for m in messages]


def turn_messages(turns: list[dict]) -> list[dict]:
    """Transcript turns (live or stored) as chat messages, private reasoning collapsible."""
    out = []
    for turn in turns:
        role = turn["role"]
        if turn.get("thought"):
            out.append({"role": _chat_role(role), "content": turn["thought"],
                        "metadata": {"title": f"{role}'s private reasoning (never shown to the {OTHER[role]})"}})
        if turn.get("action"):
            action = f"`{turn['action']}`" + (f" — invalid: {turn['error']}" if turn.get("error") else "")
        else:
            action = f"format error: {turn.get('error')} (ends the game for the buyer; a seller's counts as [REJECT])"
        out.append({"role": _chat_role(role), "content": f"**{role}**: {turn['talk']}\n\n{action}"})
    return out


REFUSED = {  # why the environment refused a seller's move, in the seller's words
    "below_cost": "you cannot sell below your cost",
    "wrong_role_action": "a seller offers with [SELL], not [BUY]",
    "no_offer_to_accept": "there is no buyer offer to accept yet",
    "deal_price_mismatch": "[DEAL] must name the buyer's standing offer",
}


def role_messages(env: BargainEnv, role: str) -> list[dict]:
    """What ``role`` has seen: its own public replies and the opponent's messages as delivered. A
    seller whose move was refused is told why, at once (the buyer sees only that it was refused)."""
    out = []
    refused = iter([e for e in env.log if e["role"] == SELLER and e["error"]])
    for msg in env.observe(role).history:
        note = f"\n\n*({msg.note})*" if msg.note else ""
        talk = msg.talk
        if msg.note and msg.role == SELLER and role == SELLER:
            entry = next(refused, None)
            if entry is not None:
                offered = f" ({entry['action'].render()})" if entry.get("action") else ""
                why = REFUSED.get(entry["error"], f"it could not be read ({entry['error']})")
                note = (f"\n\n**Your move{offered} was refused: {why}** (cost {format_price(env.scenario.cost)}). "
                        f"It counts as [REJECT]; the buyer was not told what you said.")
                talk = entry.get("talk") or talk  # the seller's own words stay in its view
        out.append({"role": _chat_role(msg.role), "content": f"**{msg.role}**: {talk}\n\n"
                    f"`{msg.action.render()}`" + note})
    return out


def explain(s: Scenario, m) -> str:
    """The buyer's reward for this ending, with the formula filled in."""
    head = (f"Buyer budget {format_price(s.budget)}, seller cost {format_price(s.cost)} "
            f"({s.interest} interest). ")
    if m.end_reason == "deal":
        gap = max(abs(s.budget - s.cost), 1.0)
        raw = bargained_ratio(s.budget, s.cost, m.price)
        seller = min(1.0, (m.price - s.cost) / gap)
        return (head + f"Deal at {format_price(m.price)}. Buyer reward = clip((budget − price) / |budget − cost|, −1, 1)"
                f" = clip(({s.budget:.2f} − {m.price:.2f}) / {gap:.2f}) = clip({raw:+.3f}) = **{m.reward:+.3f}**. "
                f"Seller surplus over cost = {format_price(m.price - s.cost)}; seller reward = clip((price − cost) / "
                f"|budget − cost|) = **{seller:+.3f}**.")
    why = {"turn_limit": "no deal before the turn limit", "buyer_quit": "the buyer walked away",
           "seller_quit": "the seller walked away", "buyer_format_error": "the buyer's reply could not be read",
           "buyer_invalid_move": "the buyer made an illegal move", "buyer_over_budget": "the buyer went over budget"}
    return head + f"No deal: {why.get(m.end_reason, m.end_reason)}. Buyer reward **{m.reward:+.3f}** " \
        "(0 without a deal; −1 for an unreadable reply, an illegal move or going over budget); seller surplus " \
        "$0.00, seller reward **+0.000** (nothing sold)."
