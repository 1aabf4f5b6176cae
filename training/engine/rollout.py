"""Language-model players and the batched multi-turn generation they share across games.

``LLMAgent`` is a model player: a backend, a reasoning format and sampling settings. In an
episode each model seat is a ``Conversation``: its system prompt, what the game shows it as user
turns, and its own replies, private reasoning included. With a token backend the conversation is
kept as one token stream that only ever grows (never re-rendered), so what the model saw while
generating is exactly what training scores: each generated token has mask 1 and its sampling
log-prob; template, opponent and environment tokens have mask 0.

``play_turns`` plays a game's episodes (``training.games.<game>.rollout`` says how one moves on):
with one model agent on a backend that batches continuously (``training.engine.batching``), each
episode asks for its next reply as soon as its last one is complete; otherwise in lockstep, with
``generate_replies`` making one batched generation for every conversation waiting on an agent.
Any model output is handed to the environment as it is; what cannot be parsed is a format error
that the environment scores, never replaced by a default move.

option_b (native ``<think>``) caps thinking: generation stops at ``</think>`` or after
``think_tokens``; at the cap the engine closes the block itself (mask 0) and the model then
writes its answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from env.bargain.protocol import REASONING_MODES
from training.engine.backends import OpenAIChatBackend, SamplingConfig
from training.engine.batching import Completion, Request
from env.untrusted import TextGuard

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
            # the model's window, and an engine's own sequence where it keeps one (llama.cpp: its context, which may
            # be shorter; an engine opened from its export has no model)
            model = getattr(backend, "model", None)
            limits = [n for n in (getattr(model.config, "max_position_embeddings", None) if model is not None else None,
                                  getattr(backend, "context", None)) if n]
            self.max_len = min(limits) if limits else None

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
    scenario: object | None  # when known, prompts are checked against the other side's secrets
    messages: list[dict] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    prompt_len: int = 0
    seen: int = 0
    kv: object = None  # the backend's prefix cache of ``ids`` (token backends that keep one)
    teacher: object | None = None  # a scripted player that writes this seat's replies (expert data)
    # with a teacher: None, it writes every reply and they are trained on (supervised data); k, it writes the first k
    # replies untrained (mask 0: a demonstration's prefix, the start state of an RL episode) and the model plays on
    handover: int | None = None
    # with a teacher writing every reply (handover None): its first ``untrained`` replies are mask 0 (a replayed prefix)
    # and the rest mask 1 (off-policy guidance from the state the prefix reached)
    untrained: int = 0

    def teacher_due(self) -> bool:
        """Whether the next reply is the teacher's to write."""
        replies = sum(m["role"] == "assistant" for m in self.messages)
        return self.teacher is not None and (self.handover is None or replies < self.handover)

    def write(self, text: str, trained: bool = True) -> str:
        """``text`` as this seat's reply, as if the model had generated it (mask 1; mask 0 when not ``trained``)."""
        if not self.agent.chat_only:
            tok = self.agent.tokenizer
            ids = tok(text, add_special_tokens=False)["input_ids"] + [self.agent.eos_id]
            self.add_reply(len(self.ids), ids, [0.0] * len(ids), [int(trained)] * len(ids), text)
        else:
            self.add_reply(0, [], [], [], text)
        return text

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


class ReplyJob:
    """One reply being written into a conversation: in option_b a thinking phase (stopped at
    ``</think>`` or the cap, where the engine closes the block itself, mask 0) then the answer.
    ``request()`` is what to generate next (prompt, token budget, stop ids; None when the reply is
    complete), ``feed()`` takes the completion, ``finish()`` adds the reply to the conversation."""

    def __init__(self, agent: LLMAgent, conv: Conversation):
        self.agent, self.conv = agent, conv
        self.start = len(conv.ids)
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.mask: list[int] = []
        self.thinking = agent.think_close_id is not None
        self.complete = False

    def request(self) -> tuple[list[int], int, tuple[int, ...]] | None:
        if self.complete:
            return None
        agent, s = self.agent, self.agent.sampling
        if self.thinking:
            budget, stops = s.think_tokens, (agent.think_close_id, agent.eos_id)
        else:
            budget = s.max_new_tokens + (s.think_tokens if agent.reasoning_mode == "option_b" else 0) * \
                (agent.think_close_id is None)
            stops = (agent.eos_id,)
        prompt = self.conv.ids + self.ids
        # within the model's context window: a prompt with no room left gets nothing
        room = budget if agent.max_len is None else min(budget, agent.max_len - len(prompt))
        return prompt, room, stops

    def feed(self, c: Completion) -> None:
        self.ids += c.ids
        self.logprobs += c.logprobs if c.logprobs is not None else [0.0] * len(c.ids)
        self.mask += [1] * len(c.ids)
        if self.thinking:
            self.thinking = False
            if not c.stopped:  # thinking hit the cap: close the block for the model
                close = self.agent.forced_close
                self.ids, self.logprobs, self.mask = self.ids + close, self.logprobs + [0.0] * len(close), \
                    self.mask + [0] * len(close)
            elif c.ids and c.ids[-1] == self.agent.eos_id:  # the whole reply came in the thinking phase
                self.complete = True
            return
        self.complete = True

    def finish(self) -> str:
        eos = self.agent.eos_id
        ids, lps, mask = self.ids, self.logprobs, self.mask
        body = ids[:-1] if ids and ids[-1] == eos else ids
        text = self.agent.tokenizer.decode(body, skip_special_tokens=True)
        if not ids or ids[-1] != eos:  # out of tokens: end the turn so the stream stays well formed
            ids, lps, mask = ids + [eos], lps + [0.0], mask + [0]
        self.conv.add_reply(self.start, ids, lps, mask, text)
        return text


def streams(agent: LLMAgent) -> bool:
    """Whether ``agent``'s backend serves requests with continuous batching."""
    return not agent.chat_only and getattr(agent.backend, "continuous", False)


def generate_replies(agent: LLMAgent, convs: Sequence[Conversation]) -> list[str]:
    """One reply for every conversation waiting on ``agent`` (batched); returns the reply texts."""
    s = agent.sampling
    if agent.chat_only:
        budget = s.max_new_tokens + (s.think_tokens if agent.reasoning_mode == "option_b" else 0)
        texts = []
        for conv, reply in zip(convs, agent.backend.generate_chat([c.messages for c in convs], budget)):
            text = f"<think>{reply.reasoning}</think>\n{reply.text}" if reply.reasoning else reply.text
            conv.add_reply(0, [], [], [], reply.text)
            texts.append(text)
        return texts
    jobs = [ReplyJob(agent, c) for c in convs]
    if streams(agent):
        def on_done(i, completion):
            jobs[i].feed(completion)
            nxt = jobs[i].request()
            return None if nxt is None else Request(i, *nxt)
        agent.backend.stream([Request(i, *j.request()) for i, j in enumerate(jobs)], on_done)
    else:
        while any(not j.complete for j in jobs):
            todo = [j for j in jobs if not j.complete]
            for j, c in zip(todo, _generate(agent.backend, todo)):
                j.feed(c)
    return [j.finish() for j in jobs]


Move = Conversation | str | None


def play_turns(agents: set, episodes: int, turn: Callable[[int], Move], answer: Callable[[int, str], None],
               on_done: Callable[[int], None] | None = None) -> None:
    """Play ``episodes`` episodes to the end. ``turn(i)`` moves episode ``i`` on to its next model
    reply and returns the seat that must generate it (a ``Conversation``), a reply already written (a
    teacher's text), or None when the episode is over; ``answer(i, text)`` hands the reply to it;
    ``on_done(i)`` once for every episode that ended.

    With one model agent whose backend batches continuously, an episode whose reply is complete is
    answered and asks for its next reply at once, while the others keep generating; otherwise the
    episodes move in lockstep, one batched generation per agent and turn."""
    agents = {a for a in agents if isinstance(a, LLMAgent)}
    def ask(i: int) -> Move:
        move = turn(i)
        if move is None and on_done is not None:
            on_done(i)
        return move

    if len(agents) == 1 and streams(next(iter(agents))):
        _play_streaming(next(iter(agents)), episodes, ask, answer)
        return
    active = list(range(episodes))
    while active:
        waiting: dict[int, list[int]] = {}
        moves: dict[int, Move] = {}
        for i in active:
            moves[i] = ask(i)
            if isinstance(moves[i], Conversation):
                waiting.setdefault(id(moves[i].agent), []).append(i)
        for idx in waiting.values():
            for i, text in zip(idx, generate_replies(moves[idx[0]].agent, [moves[i] for i in idx])):
                moves[i] = text
        active = [i for i in active if moves[i] is not None]
        for i in active:
            answer(i, moves[i])


def _play_streaming(agent: LLMAgent, episodes: int, turn: Callable[[int], Move],
                    answer: Callable[[int, str], None]) -> None:
    jobs: dict[int, ReplyJob] = {}

    def next_request(i: int) -> Request | None:
        while True:
            move = turn(i)
            if move is None:
                return None
            if isinstance(move, str):
                answer(i, move)
                continue
            jobs[i] = ReplyJob(agent, move)
            return Request(i, *jobs[i].request())

    def on_done(i: int, completion: Completion) -> Request | None:
        job = jobs[i]
        job.feed(completion)
        nxt = job.request()
        if nxt is not None:
            return Request(i, *nxt)
        answer(i, job.finish())
        return next_request(i)

    agent.backend.stream([r for r in map(next_request, range(episodes)) if r is not None], on_done)


def _generate(backend, jobs: Sequence[ReplyJob]) -> list[Completion]:
    """One lockstep call per distinct token budget (each row keeps its own), reusing and refreshing
    each conversation's prefix cache when the backend keeps one."""
    asks = [j.request() for j in jobs]
    out = [Completion([], [], False)] * len(jobs)
    groups: dict[tuple, list[int]] = {}
    for i, (_, room, stops) in enumerate(asks):
        if room > 0:
            groups.setdefault((room, stops), []).append(i)
    for (budget, stops), ok in sorted(groups.items(), reverse=True):
        batch = [asks[i][0] for i in ok]
        convs = [jobs[i].conv for i in ok]
        if getattr(backend, "prefix_cache", False):
            comps = backend.generate_ids(batch, budget, list(stops), caches=[c.kv for c in convs])
            for conv, kv in zip(convs, backend.last_caches):
                conv.kv = kv
        else:
            comps = backend.generate_ids(batch, budget, list(stops))
        for i, c in zip(ok, comps):
            out[i] = Completion(c.ids, c.logprobs if c.logprobs is not None else [0.0] * len(c.ids), c.stopped)
    return out


@dataclass
class Teacher:
    """A scripted player writing into a model's conversation format: supervised data, or (``handover``) the first
    replies of an episode the model then plays on."""

    player: object  # the game's scripted player: a name, or a factory
    agent: LLMAgent
    handover: int | None = None  # as ``Conversation.handover``
    untrained: int = 0  # as ``Conversation.untrained``


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
    handover: int = 0  # replies a teacher wrote before the model played on (a late start; 0: the model's whole game)
    guided: bool = False  # a scripted player wrote the trained replies (off-policy guidance), not the model


def token_fields(conv) -> dict:
    """The trained seat's token stream after its first prompt, mask, log-probs, turns and messages
    (empty for a scripted seat or a chat-only backend)."""
    tokens = isinstance(conv, Conversation) and not conv.agent.chat_only
    p = conv.prompt_len if tokens else 0
    return dict(prompt_ids=conv.ids[:p] if tokens else [], completion_ids=conv.ids[p:] if tokens else [],
                env_mask=conv.mask[p:] if tokens else [], logprobs=conv.logprobs[p:] if tokens else [],
                turns=conv.turns if tokens else [], messages=conv.messages if isinstance(conv, Conversation) else [])


