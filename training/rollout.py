"""Language-model players and the batched multi-turn rollout engine.

``LLMAgent`` is a model player: a backend, a reasoning format and sampling settings. In an
episode each model seat is a ``Conversation``: its system prompt (built from its own view
only), the opponent's public messages as user turns, and its own replies, private reasoning
included. With a token backend the conversation is kept as one token stream that only ever
grows (never re-rendered), so what the model saw while generating is exactly what training
scores: each generated token has mask 1 and its sampling log-prob; template, opponent and
environment tokens have mask 0.

``play_episodes`` runs many episodes in lockstep: at each step every pending model reply is
generated in one batched call per agent, scripted players answer inline, finished episodes
drop out. Any model output is handed to the environment as it is; what cannot be parsed is a
format error that the environment scores, never replaced by a default move.

option_b (native ``<think>``) caps thinking: generation stops at ``</think>`` or after
``think_tokens``; at the cap the engine closes the block itself (mask 0) and the model then
writes its answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from env.bargain.env import DEFAULT_MAX_TURNS, BargainEnv, Observation
from env.bargain.play import Match
from env.bargain.players import make_player
from env.bargain.players.base import Player
from env.bargain.protocol import REASONING_MODES
from env.bargain.rules import BUYER, SELLER
from env.bargain.scenarios import Scenario
from training.backends import OpenAIChatBackend, SamplingConfig
from training.prompts import assert_no_leak, new_user_messages, system_prompt
from training.untrusted import TextGuard, guard_observation

_PLACEHOLDER = "\u2063HAGGLE_MESSAGE\u2063"


class LLMAgent:
    """A model player (either role): a backend plus reasoning format; builds token-level helpers once."""

    def __init__(self, backend, reasoning_mode: str = "option_a", name: str = "model"):
        if reasoning_mode not in REASONING_MODES:
            raise ValueError(f"reasoning_mode must be one of {REASONING_MODES}, got {reasoning_mode!r}")
        self.backend, self.reasoning_mode, self.name = backend, reasoning_mode, name
        self.sampling: SamplingConfig = backend.sampling
        self.chat_only = isinstance(backend, OpenAIChatBackend)
        # what players and scenario files wrote reaches the model as text, never as control tokens
        self.guard = TextGuard.generic() if self.chat_only else TextGuard.for_tokenizer(backend.tokenizer)
        if not self.chat_only:
            tok = self.tokenizer = backend.tokenizer
            self.eos_id = tok.eos_token_id
            self.template_kwargs = {"enable_thinking": reasoning_mode == "option_b"}
            before, after = self._user_turn_template()
            self._user_before, self._user_after = before, after
            close = tok.convert_tokens_to_ids("</think>")
            single = close is not None and close != tok.unk_token_id and tok.convert_ids_to_tokens(close) == "</think>"
            self.think_close_id = close if single and reasoning_mode == "option_b" else None
            self.forced_close = tok("\n</think>\n\n", add_special_tokens=False)["input_ids"]
            self.max_len = getattr(backend.model.config, "max_position_embeddings", None) if hasattr(backend, "model") \
                else None

    def _user_turn_template(self) -> tuple[str, str]:
        """The text the chat template puts between the end of an assistant turn and the next
        generation (a user turn plus the generation prompt), split around the message."""
        tok = self.tokenizer
        dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "dummy"}]
        full = tok.apply_chat_template(dummy + [{"role": "user", "content": _PLACEHOLDER}], tokenize=False,
                                       add_generation_prompt=True, **self.template_kwargs)
        head = full[: full.index(_PLACEHOLDER)]
        end = head.rfind(tok.eos_token)
        if end < 0:
            raise ValueError("the chat template does not end assistant turns with the eos token")
        before = head[end + len(tok.eos_token):]
        return before, full[full.index(_PLACEHOLDER) + len(_PLACEHOLDER):]

    def user_turn_ids(self, text: str) -> list[int]:
        return self.tokenizer(self._user_before + text + self._user_after, add_special_tokens=False)["input_ids"]


@dataclass
class Turn:
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    mask: list[int]
    text: str


@dataclass
class Conversation:
    """One model seat in one episode."""

    agent: LLMAgent
    role: str
    scenario: Scenario | None  # when known, prompts are checked against the other side's secrets
    messages: list[dict] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    prompt_len: int = 0
    seen: int = 0
    kv: object = None  # the backend's prefix cache of ``ids`` (token backends that keep one)
    teacher: Player | None = None  # a scripted player that writes this seat's replies (expert data)

    def teach(self, obs: Observation) -> str:
        """Write the teacher's reply into the stream as if the model had generated it (mask 1). The
        teacher reads the model's guarded view: a title it quotes cannot put control tokens there."""
        return self.write(self.teacher.act(guard_observation(obs, self.agent.guard)))

    def write(self, text: str) -> str:
        """``text`` as this seat's reply, as if the model had generated it (mask 1)."""
        if not self.agent.chat_only:
            tok = self.agent.tokenizer
            ids = tok(text, add_special_tokens=False)["input_ids"] + [self.agent.eos_id]
            self.add_reply(len(self.ids), ids, [0.0] * len(ids), [1] * len(ids), text)
        else:
            self.add_reply(0, [], [], [], text)
        return text

    def observe(self, obs: Observation, opponent_thoughts: tuple[str, ...] = ()) -> None:
        """Take in what happened since this seat last spoke (the opponent's public messages), with
        every text a player or the scenario file wrote guarded (``training.untrusted``)."""
        obs = guard_observation(obs, self.agent.guard)
        first = not self.messages
        sys = None
        if first:
            sys = system_prompt(obs, self.agent.reasoning_mode)
            if self.scenario is not None:
                assert_no_leak(sys, self.scenario, self.role)
        new = new_user_messages(obs, self.seen)
        self.seen = len(obs.history)
        for text, talk in new:
            if self.scenario is not None:
                assert_no_leak(text.replace(talk, "") if talk else text, self.scenario, self.role,
                               opponent_thoughts, check_values=first and not obs.history)
        self.push([text for text, _ in new], sys)

    def push(self, users: list[str], system: str | None = None) -> None:
        """Add user turns (and, on the first call, the system prompt) to the conversation; with a
        token backend they extend the stream with mask 0, ending in the generation prompt."""
        agent = self.agent
        first = not self.messages
        if first:
            self.messages.append({"role": "system", "content": system})
        for text in users:
            self.messages.append({"role": "user", "content": text})
            if not agent.chat_only and not first:
                self._extend(agent.user_turn_ids(text), None, 0)
        if not agent.chat_only and first:
            ids = agent.tokenizer.apply_chat_template(self.messages, tokenize=True, add_generation_prompt=True,
                                                      return_dict=False, **agent.template_kwargs)
            self._extend(list(ids), None, 0)
            self.prompt_len = len(self.ids)

    def _extend(self, ids: list[int], logprobs: list[float] | None, mask: int | list[int]) -> None:
        self.ids += ids
        self.mask += mask if isinstance(mask, list) else [mask] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)

    def add_reply(self, prompt_len: int, ids: list[int], logprobs: list[float], mask: list[int], text: str) -> None:
        if not self.agent.chat_only:
            self.turns.append(Turn(self.ids[:prompt_len], ids, logprobs, mask, text))
            self._extend(ids, logprobs, mask)
        self.messages.append({"role": "assistant", "content": text})


def generate_replies(agent: LLMAgent, convs: Sequence[Conversation]) -> list[str]:
    """One batched generation for every conversation waiting on ``agent``; returns reply texts."""
    s = agent.sampling
    if agent.chat_only:
        budget = s.max_new_tokens + (s.think_tokens if agent.reasoning_mode == "option_b" else 0)
        texts = []
        for conv, reply in zip(convs, agent.backend.generate_chat([c.messages for c in convs], budget)):
            text = f"<think>{reply.reasoning}</think>\n{reply.text}" if reply.reasoning else reply.text
            conv.add_reply(0, [], [], [], reply.text)
            texts.append(text)
        return texts
    eos = agent.eos_id
    starts = [len(c.ids) for c in convs]
    parts: list[tuple[list[int], list[float], list[int]]] = [([], [], []) for _ in convs]
    pending = list(range(len(convs)))
    if agent.think_close_id is not None:  # option_b, phase 1: think up to the cap
        firsts = _generate(agent, [convs[i] for i in pending], [convs[i].ids for i in pending], s.think_tokens,
                           [agent.think_close_id, eos])
        nxt = []
        for i, c in zip(pending, firsts):
            ids, lps, mask = list(c.ids), list(c.logprobs), [1] * len(c.ids)
            if not c.stopped:  # thinking hit the cap: close the block for the model
                ids += agent.forced_close
                lps += [0.0] * len(agent.forced_close)
                mask += [0] * len(agent.forced_close)
            parts[i] = (ids, lps, mask)
            if not (c.stopped and c.ids and c.ids[-1] == eos):
                nxt.append(i)
        pending = nxt
    answer_budget = s.max_new_tokens + (s.think_tokens if agent.reasoning_mode == "option_b"
                                        and agent.think_close_id is None else 0)
    if pending:
        outs = _generate(agent, [convs[i] for i in pending], [convs[i].ids + parts[i][0] for i in pending],
                         answer_budget, [eos])
        for i, c in zip(pending, outs):
            ids, lps, mask = parts[i]
            parts[i] = (ids + c.ids, lps + list(c.logprobs), mask + [1] * len(c.ids))
    texts = []
    for conv, start, (ids, lps, mask) in zip(convs, starts, parts):
        body = ids[:-1] if ids and ids[-1] == eos else ids
        text = agent.tokenizer.decode(body, skip_special_tokens=True)
        if not ids or ids[-1] != eos:  # out of tokens: end the turn so the stream stays well formed
            ids, lps, mask = ids + [eos], lps + [0.0], mask + [0]
        conv.add_reply(start, ids, lps, mask, text)
        texts.append(text)
    return texts


def _generate(agent: LLMAgent, convs: Sequence[Conversation], prompts: list[list[int]], max_new: int,
              stops: list[int]):
    """Generate within the model's context window (a prompt with no room left gets nothing),
    reusing and refreshing each conversation's prefix cache when the backend keeps one."""
    from training.backends import Completion  # noqa: PLC0415

    backend = agent.backend
    room = [max_new if agent.max_len is None else min(max_new, agent.max_len - len(p)) for p in prompts]
    out = [Completion([], [], False)] * len(prompts)
    groups: dict[int, list[int]] = {}  # each row keeps its own token budget: one call per distinct room
    for i, r in enumerate(room):
        if r > 0:
            groups.setdefault(r, []).append(i)
    for budget, ok in sorted(groups.items(), reverse=True):
        batch = [prompts[i] for i in ok]
        if getattr(backend, "prefix_cache", False):
            comps = backend.generate_ids(batch, budget, stops, caches=[convs[i].kv for i in ok])
            for i, kv in zip(ok, backend.last_caches):
                convs[i].kv = kv
        else:
            comps = backend.generate_ids(batch, budget, stops)
        for i, c in zip(ok, comps):
            out[i] = Completion(c.ids, c.logprobs if c.logprobs is not None else [0.0] * len(c.ids), c.stopped)
    return out


@dataclass
class Teacher:
    """A scripted player writing into a model's conversation format (for supervised data)."""

    player: str | Callable[[], Player]
    agent: LLMAgent


PlayerSpec = LLMAgent | Teacher | str | Callable[[], Player]


@dataclass
class EpisodeRecord:
    """Everything training and evaluation need from one episode."""

    scenario_id: str
    seed: int
    reward: float
    metrics: dict
    transcript: dict
    trained_role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    logprobs: list[float]
    turns: list[Turn]
    messages: list[dict]


def _seat(spec: PlayerSpec, role: str, scenario: Scenario, reasoning_mode: str = "option_a"):
    if isinstance(spec, LLMAgent):
        return Conversation(spec, role, scenario)
    if isinstance(spec, Teacher):  # the teacher writes in the format the model will be asked for
        teacher = _seat(spec.player, role, scenario, spec.agent.reasoning_mode)
        return Conversation(spec.agent, role, scenario, teacher=teacher)
    player = make_player(role, spec, reasoning_mode) if isinstance(spec, str) else spec()
    if player.role != role:
        raise ValueError(f"a {player.role} cannot play the {role}")
    return player


def play_episodes(episodes: Sequence[tuple[Scenario, int]], buyer: PlayerSpec | list[PlayerSpec],
                  seller: PlayerSpec | list[PlayerSpec],
                  max_turns: int = DEFAULT_MAX_TURNS, trained_role: str = BUYER,
                  on_done: Callable[[int], None] | None = None) -> list[EpisodeRecord]:
    """Play ``(scenario, seed)`` episodes in lockstep. Scripted players are given by name (or a
    factory); model players by an ``LLMAgent``; either side may be one spec for all episodes or a
    list with one per episode. Returns one record per episode, in order."""
    n = len(episodes)
    buyers = buyer if isinstance(buyer, list) else [buyer] * n
    sellers = seller if isinstance(seller, list) else [seller] * n
    if len(buyers) != n or len(sellers) != n:
        raise ValueError("per-episode buyer/seller lists must have one entry per episode")
    seats = [{BUYER: _seat(b, BUYER, sc), SELLER: _seat(s, SELLER, sc)}
             for (sc, _), b, s in zip(episodes, buyers, sellers)]
    # scripted seats move inside the driver; model seats (conversations) are moved from here, batched
    matches = [Match(sc, *(None if isinstance(seat[r], Conversation) else seat[r] for r in (BUYER, SELLER)), seed,
                     max_turns) for (sc, seed), seat in zip(episodes, seats)]
    for match, seat in zip(matches, seats):
        for role, conv in seat.items():
            if isinstance(conv, Conversation) and conv.teacher is not None:
                conv.teacher.reset(match.env.observe(role), match.rngs[role])
    active = list(range(n))
    while active:
        waiting: dict[int, list[int]] = {}
        replies: dict[int, str] = {}
        for i in active:
            matches[i].advance()
            if matches[i].env.done:
                continue
            role = matches[i].env.to_move
            seat, obs = seats[i][role], matches[i].env.observe(role)
            thoughts = tuple(t["thought"] for t in matches[i].env.log if t["role"] != seat.role)
            seat.observe(obs, thoughts)
            if seat.teacher is not None:
                replies[i] = seat.teach(obs)
            else:
                waiting.setdefault(id(seat.agent), []).append(i)
        for idx in waiting.values():
            agent = seats[idx[0]][matches[idx[0]].env.to_move].agent
            texts = generate_replies(agent, [seats[i][matches[i].env.to_move] for i in idx])
            replies.update(zip(idx, texts))
        active, _ = step_replies(matches, active, replies, on_done)
    envs = [m.env for m in matches]
    return [_record(envs[i], seats[i], episodes[i], trained_role) for i in range(n)]


def step_replies(matches: Sequence, active: list[int], replies: dict[int, str],
                 on_done: Callable[[int], None] | None) -> tuple[list[int], dict]:
    """Hand each active episode's reply (if it has one) to its driver; the episodes still running
    and each step's result. ``on_done(i)`` for every episode that ended."""
    still, results = [], {}
    for i in active:
        if i in replies:
            results[i] = matches[i].step(replies[i])
        if matches[i].env.done:
            if on_done is not None:
                on_done(i)
        else:
            still.append(i)
    return still, results


def token_fields(conv) -> dict:
    """The trained seat's token stream after its first prompt, mask, log-probs, turns and messages
    (empty for a scripted seat or a chat-only backend)."""
    tokens = isinstance(conv, Conversation) and not conv.agent.chat_only
    p = conv.prompt_len if tokens else 0
    return dict(prompt_ids=conv.ids[:p] if tokens else [], completion_ids=conv.ids[p:] if tokens else [],
                env_mask=conv.mask[p:] if tokens else [], logprobs=conv.logprobs[p:] if tokens else [],
                turns=conv.turns if tokens else [], messages=conv.messages if isinstance(conv, Conversation) else [])


def _record(env: BargainEnv, seats: dict, episode: tuple[Scenario, int], trained_role: str) -> EpisodeRecord:
    return EpisodeRecord(scenario_id=episode[0].id, seed=episode[1], reward=env.reward_of(trained_role), metrics=env.metrics().to_dict(),
                         transcript=env.transcript(), trained_role=trained_role, **token_fields(seats.get(trained_role)))


class LLMPlayer:
    """The ``Player`` interface for one model seat (one episode at a time, e.g. in the Space)."""

    def __init__(self, agent: LLMAgent, role: str):
        self.agent, self.role, self.name = agent, role, agent.name
        self.conv: Conversation | None = None

    def reset(self, obs: Observation, rng=None) -> None:
        # Built from the seat's own observation only, so there is no other-side secret to guard.
        self.conv = Conversation(self.agent, self.role, None)

    def act(self, obs: Observation) -> str:
        self.conv.observe(obs)
        return generate_replies(self.agent, [self.conv])[0]
