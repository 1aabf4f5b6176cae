"""Language-model players and the batched multi-turn generation they share across games.

``LLMAgent`` is a model player: a backend, a reasoning format and sampling settings. In an
episode each model seat is a ``Conversation``: its system prompt, what the game shows it as user
turns, and its own replies, private reasoning included. With a token backend the conversation is
kept as one token stream that only ever grows (never re-rendered), so what the model saw while
generating is exactly what training scores: each generated token has mask 1 and its sampling
log-prob; template, opponent and environment tokens have mask 0.

``generate_replies`` makes one batched generation for every conversation waiting on an agent;
each game's rollout (``training.games.<game>.rollout``) runs its episodes in lockstep around it.
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
from training.engine.backends import Completion, OpenAIChatBackend, SamplingConfig
from training.engine.untrusted import TextGuard

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

    def write(self, text: str) -> str:
        """``text`` as this seat's reply, as if the model had generated it (mask 1)."""
        if not self.agent.chat_only:
            tok = self.agent.tokenizer
            ids = tok(text, add_special_tokens=False)["input_ids"] + [self.agent.eos_id]
            self.add_reply(len(self.ids), ids, [0.0] * len(ids), [1] * len(ids), text)
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

    player: object  # the game's scripted player: a name, or a factory
    agent: LLMAgent


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


