"""Continuous batching for ``TransformersBackend``: rows that finish a reply never wait on the longest one.

``model.generate`` advances a batch in lockstep: a turn lasts as long as its longest reply, and rows
whose reply ended keep being computed. Here every running conversation owns one row (a *slot*) of a
``SlotCache`` and keeps it across its turns: each row writes its keys and values at its own
positions, so rows can be at different lengths and a row whose reply ends is handed straight back to
its caller (the game steps, a scripted opponent answers) and continues with its next turn's new tokens
while the other rows keep decoding. No left padding: a row's positions are its own.

Each decoding step is one forward over the running rows (one token each); rows that join or continue
are prefilled first in one forward over just those rows. Prefill and decoding can run in different
precisions (``prefill_dtype`` / ``decode_dtype``, bf16 through ``torch.autocast``): on a CPU with bf16
matrix units prefill is compute-bound and twice as fast in bf16, while single-token decoding is bound
by memory traffic and Python overhead, where fp32 weights measured faster
(``benchmarks/rl_speed.py``).

Sampling is the same as ``TransformersBackend.generate_ids``: the logits processors of transformers
(temperature, top-k, top-p) over the raw logits, and the log-prob of the sampled token under
``softmax(logits / temperature)``.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Hashable, NamedTuple

import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper



class Completion(NamedTuple):
    """Generated ids up to and including the first stop id; ``stopped`` is False at the length cap."""

    ids: list[int]
    logprobs: list[float] | None
    stopped: bool


class Request(NamedTuple):
    """Generate for ``key`` (a conversation) after ``prompt``: at most ``max_new`` tokens, up to and
    including the first of ``stops``. A later request for the same key whose prompt extends what its
    row holds only feeds the new tokens."""

    key: Hashable
    prompt: list[int]
    max_new: int
    stops: tuple[int, ...]


class SlotCache:
    """Key/value buffers with one row per running conversation, each row at its own length.

    Passed to the model as ``past_key_values``: its ``update`` (called by every attention layer)
    writes the new keys and values of the rows in the current forward at their own positions and
    returns the keys and values the forward attends to (masked per row by the caller)."""

    def __init__(self, config, rows: int, capacity: int, dtype: torch.dtype, device):
        heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.layers_n, self.rows, self.dtype, self.device = config.num_hidden_layers, rows, dtype, device
        self.capacity = 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.grow(capacity)
        # set by the caller before each forward
        self.batch: torch.Tensor | None = None  # slot of each row of the forward (None: slots 0..n-1)
        self.starts: torch.Tensor | None = None  # where each row's new tokens go
        self.lengths: list[int] = []  # how many new tokens each row of a prefill has
        self.width = 0  # positions the forward attends to

    def grow(self, capacity: int) -> None:
        """Room for ``capacity`` positions a slot, the held keys and values copied over one buffer at a time (each
        old buffer freed before the next is made: growing a full cache at once holds it twice, 2 x 9.7 GB in fp32
        for 25 market games near 8k positions)."""
        if capacity <= self.capacity:
            return
        shape = (self.rows, self.kv_heads, capacity, self.head_dim)
        for store in (self.keys, self.values):
            for i in range(self.layers_n):
                new = torch.zeros(shape, dtype=self.dtype, device=self.device)
                if i < len(store):
                    new[:, :, : self.capacity] = store[i]
                    store[i] = new
                else:
                    store.append(new)
        self.capacity = capacity

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy slot ``src``'s first ``length`` positions into slot ``dst``."""
        for t in self.keys + self.values:
            t[dst, :, :length] = t[src, :, :length]

    def update(self, key_states, value_states, layer_idx: int, cache_kwargs=None):
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        n, q = key_states.shape[0], key_states.shape[2]
        if self.batch is None and q == 1:  # decoding: every running row (slots 0..n-1), one token each
            rows = torch.arange(n, device=keys.device)
            keys[rows, :, self.starts] = key_states[:, :, 0].to(keys.dtype)
            values[rows, :, self.starts] = value_states[:, :, 0].to(values.dtype)
            k, v = keys[:n, :, : self.width], values[:n, :, : self.width]
        else:  # prefill of some rows: each writes its own new tokens (not the padding after them)
            for i, (slot, start, m) in enumerate(zip(self.batch.tolist(), self.starts.tolist(), self.lengths)):
                keys[slot, :, start: start + m] = key_states[i, :, :m].to(keys.dtype)
                values[slot, :, start: start + m] = value_states[i, :, :m].to(values.dtype)
            k, v = keys[self.batch, :, : self.width], values[self.batch, :, : self.width]
        if k.dtype != key_states.dtype:  # a forward in another precision than the cache (autocast prefill)
            k, v = k.to(key_states.dtype), v.to(value_states.dtype)
        return k, v

    # what transformers' mask and generation helpers may ask a cache
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0


@dataclass
class _Row:
    key: Hashable
    tokens: list[int]  # what the slot holds (prompt and generated tokens fed so far)
    request: Request | None = None
    pending: list[int] = field(default_factory=list)  # tokens still to feed
    generated: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    last: int | None = None  # the sampled token not yet fed


def _autocast(dtype: torch.dtype | None, device):
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


class ContinuousBatcher:
    """Runs requests through a model with continuous batching (at most ``max_rows`` at a time)."""

    def __init__(self, model, sampling, pad_id: int, max_rows: int = 32, prefill_dtype: torch.dtype | None = None,
                 decode_dtype: torch.dtype | None = None, max_len: int | None = None, join_fraction: float = 0.0):
        self.model, self.sampling, self.pad_id, self.max_rows = model, sampling, pad_id, max_rows
        self.join_fraction = join_fraction
        self.prefill_dtype, self.decode_dtype, self.max_len = prefill_dtype, decode_dtype, max_len
        self.greedy = sampling.temperature == 0
        self.warpers = logits_warpers(sampling)
        self.steps = self.prefills = self.slots = 0  # decoding steps, prefills, slots of the last run's cache

    def run(self, requests: list[Request], on_done: Callable[[Hashable, Completion], Request | None],
            seed: int = 0) -> None:
        """Serve ``requests``; ``on_done(key, completion)`` for each finished reply may return the next
        request (of the same conversation, or another one): it joins the running batch at once. A
        conversation keeps its slot (and its cache) while its next request follows its last reply."""
        device = self.model.device
        cache_dtype = self.decode_dtype or next(self.model.parameters()).dtype
        gen = torch.Generator(device="cpu").manual_seed(seed)
        queue = deque(requests)
        rows: list[_Row] = []  # slot i holds rows[i]; every row is running after admission
        need = max([len(r.prompt) + r.max_new for r in requests] or [1])
        # a slot per conversation there is, up to max_rows (not max_rows of them: 64 slots x 8k positions are 24 GB of
        # buffers in fp32, for 25 market games); a conversation that joins later takes a freed slot
        slots = min(self.max_rows, len({r.key for r in requests}) or 1)
        cache = SlotCache(self.model.config, slots, self._cap(need), cache_dtype, device)

        while queue or rows:
            waiting = deque()
            while queue:
                req = queue.popleft()
                if req.max_new <= 0:  # no room left in the context: nothing to generate
                    nxt = on_done(req.key, Completion([], [], False))
                    if nxt is not None:
                        queue.append(nxt)
                elif not self._admit(req, rows, cache):
                    waiting.append(req)
            queue = waiting
            for row in rows:  # a kept row whose conversation asked for nothing more (no room left): freed
                if row.request is None:
                    row.key = _FREE
            self._compact(rows, cache)
            if not rows:
                continue
            joining = [i for i, r in enumerate(rows) if r.pending]
            # rows join in groups (one prefill forward each): at least ``join_fraction`` of the batch,
            # or whatever waits when nothing else is decoding (a forward costs the same few rows or many)
            if joining and (len(joining) >= self.join_fraction * len(rows) or len(joining) == len(rows)):
                for group in self._prefill_groups(rows, joining):
                    self._prefill(rows, group, cache, gen)
            done = [i for i, r in enumerate(rows) if self._finished(r)]
            if not done:
                self._decode(rows, cache, gen)
                continue
            for i in done:  # complete replies go back before the next decoding step
                row = rows[i]
                req, row.request = row.request, None
                stopped = row.generated[-1] in req.stops
                nxt = on_done(row.key, Completion(row.generated, row.logprobs, stopped))
                if nxt is not None:
                    queue.append(nxt)
                if nxt is None or nxt.key != row.key:
                    row.key = _FREE
            self._compact(rows, cache)
        self.slots = cache.rows

    def _admit(self, req: Request, rows: list[_Row], cache: SlotCache) -> bool:
        """Give ``req`` its conversation's slot (only its new tokens to feed) or a new one; False when
        every slot is taken."""
        slot = next((i for i, r in enumerate(rows) if r.key == req.key and r.request is None), None)
        if slot is None:
            if len(rows) >= cache.rows:
                return False
            rows.append(_Row(req.key, []))
            slot = len(rows) - 1
        row = rows[slot]
        held = row.tokens
        if len(req.prompt) > len(held) and req.prompt[: len(held)] == held:
            row.pending = req.prompt[len(held):]
        else:  # not a continuation of what the slot holds: start it over
            row.tokens, row.pending = [], list(req.prompt)
        row.request, row.generated, row.logprobs, row.last = req, [], [], None
        cache.grow(self._cap(len(req.prompt) + req.max_new))
        return True

    def _cap(self, need: int) -> int:
        cap = -(-need // 256) * 256  # grown in steps of 256 positions
        return min(cap, self.max_len) if self.max_len else cap

    @staticmethod
    def _finished(row: _Row) -> bool:
        req = row.request
        return bool(row.generated) and (row.generated[-1] in req.stops or len(row.generated) >= req.max_new)

    @staticmethod
    def _compact(rows: list[_Row], cache: SlotCache) -> None:
        """Drop freed rows, keeping the others in slots 0..n-1 (decoding reads them as one view, no
        copy): a freed slot takes the last row, whose cache moves with it."""
        i = 0
        while i < len(rows):
            if rows[i].key is not _FREE:
                i += 1
                continue
            last = rows.pop()
            if i < len(rows):
                cache.move(len(rows), i, len(last.tokens))
                rows[i] = last

    # attention scores one prefill forward may hold (rows x heads x new tokens x positions, fp32): by that arithmetic,
    # 25 market games' views near 8k positions prefilled in one forward would hold ~7 GB of them
    PREFILL_SCORES_BYTES = 1 << 30

    def _prefill_groups(self, rows: list[_Row], joining: list[int]) -> list[list[int]]:
        """The joining rows in groups (in order) whose prefill's attention scores stay under
        ``PREFILL_SCORES_BYTES``; a row alone is a group whatever its size."""
        heads = self.model.config.num_attention_heads
        groups: list[list[int]] = [[]]
        q = width = 0  # the current group's longest new tokens and widest span
        for i in joining:
            n, w = len(rows[i].pending), len(rows[i].tokens) + len(rows[i].pending)
            if groups[-1] and (len(groups[-1]) + 1) * heads * max(q, n) * max(width, w) * 4 > self.PREFILL_SCORES_BYTES:
                groups.append([])
                q = width = 0
            groups[-1].append(i)
            q, width = max(q, n), max(width, w)
        return groups

    def _prefill(self, rows: list[_Row], joining: list[int], cache: SlotCache, gen) -> None:
        """Feed the joining rows' new tokens (right-padded to the longest) in one forward; sample each
        row's first token from its last real position."""
        self.prefills += 1
        q = max(len(rows[i].pending) for i in joining)
        starts = [len(rows[i].tokens) for i in joining]
        ids = torch.full((len(joining), q), self.pad_id, dtype=torch.long)
        for j, i in enumerate(joining):
            ids[j, : len(rows[i].pending)] = torch.tensor(rows[i].pending, dtype=torch.long)
        start_t = torch.tensor(starts, dtype=torch.long)
        positions = start_t[:, None] + torch.arange(q)[None, :]
        width = max(starts) + q
        cache.grow(-(-width // 256) * 256)  # the padding after a short row's tokens may reach past its need
        cache.batch, cache.starts, cache.width = torch.tensor(joining), start_t, width
        cache.lengths = [len(rows[i].pending) for i in joining]
        # query t of a row sees keys 0..start+t of its own slot (causal, own positions)
        mask = torch.arange(width)[None, None, :] <= positions[:, :, None]
        last = torch.tensor([len(rows[i].pending) - 1 for i in joining])
        logits = self._forward(ids, positions, mask, cache, self.prefill_dtype, last)
        for j, i in enumerate(joining):
            rows[i].tokens = rows[i].tokens + rows[i].pending
            rows[i].pending = []
        self._sample(rows, joining, logits, gen)

    def _decode(self, rows: list[_Row], cache: SlotCache, gen) -> None:
        """One token for every running row (they are slots 0..n-1)."""
        self.steps += 1
        # a row waiting to join feeds a placeholder at its next position (its prefill overwrites it)
        running = [i for i, r in enumerate(rows) if not r.pending]
        ids = torch.tensor([[r.last if not r.pending else self.pad_id] for r in rows], dtype=torch.long)
        starts = torch.tensor([len(r.tokens) for r in rows], dtype=torch.long)
        width = int(starts.max()) + 1
        cache.batch, cache.starts, cache.width = None, starts, width
        mask = (torch.arange(width)[None, :] <= starts[:, None])[:, None, :]
        logits = self._forward(ids, starts[:, None], mask, cache, self.decode_dtype, None)
        for i in running:
            rows[i].tokens.append(rows[i].last)
        self._sample(rows, running, logits[running] if len(running) < len(rows) else logits, gen)

    def _forward(self, ids, positions, mask, cache: SlotCache, dtype, last):
        """Logits at each row's last token (``last``: its index in the row; None: one token per row)."""
        device = self.model.device
        if last is None:
            keep, pick = 1, None
        else:  # the language-model head only at the positions some row ends at
            ends = sorted(set(last.tolist()))
            keep = torch.tensor(ends, device=device)
            pick = torch.tensor([ends.index(x) for x in last.tolist()])
        with torch.inference_mode(), _autocast(dtype, device):
            out = self.model(input_ids=ids.to(device), position_ids=positions.to(device),
                             attention_mask=mask[:, None].to(device), past_key_values=cache, use_cache=True,
                             logits_to_keep=keep)
        logits = out.logits[:, -1] if pick is None else out.logits[torch.arange(len(pick)), pick.to(out.logits.device)]
        return logits.float()

    def _sample(self, rows: list[_Row], which: list[int], logits: torch.Tensor, gen) -> None:
        if self.greedy:
            tokens = logits.argmax(-1)
            logp = torch.log_softmax(logits, -1)
        else:
            ids = torch.stack([torch.tensor(rows[i].tokens[-1:] or [0]) for i in which])
            warped = self.warpers(ids, logits.clone())
            probs = torch.softmax(warped, -1)
            tokens = torch.multinomial(probs.cpu(), 1, generator=gen).squeeze(-1).to(logits.device)
            logp = torch.log_softmax(logits / self.sampling.temperature, -1)
        picked = logp.gather(-1, tokens[:, None]).squeeze(-1).tolist()
        for i, t, lp in zip(which, tokens.tolist(), picked):
            row = rows[i]
            row.generated.append(t)
            row.logprobs.append(lp)
            row.last = t


def logits_warpers(s) -> LogitsProcessorList:
    """transformers' warpers for sampling ``s`` (temperature, top-k, top-p); none when greedy."""
    if s.temperature == 0:
        return LogitsProcessorList([])
    warpers = [TemperatureLogitsWarper(s.temperature)]
    if s.top_k:
        warpers.append(TopKLogitsWarper(s.top_k))
    if s.top_p < 1.0:
        warpers.append(TopPLogitsWarper(s.top_p))
    return LogitsProcessorList(warpers)


_FREE = object()  # the key of a slot whose conversation has ended
