"""A comparison drill: the ask-versus-budget verdict on its own, many times over (``sft.py --teach comparisons``).

SmolLM2's buyer writes "Ask $105.00 vs budget $115.19: over budget." and copies both prices right, but writes "over"
whatever they are: the verdict word is where its Thoughts go false. A game states about four verdicts and costs
seconds to play; here each example is the one reply prefix that matters, in the chat format the buyer reads in its
games: its budget, the seller's turn as the environment renders it, then its Thought through the verdict. The budgets
are the products' own, the asks are drawn around them (half above, half within, many within a few percent, whole
dollars or cents, as sellers ask), so the two words are equally often right and only the comparison tells them apart.
The loss is on the whole Thought: with it on the verdict word alone (125 steps at 5e-4), SmolLM2 learned the
comparison (99.8% on held-out examples) and began its game Thoughts with "within the first 2.00.", every game lost.
``verdict_accuracy`` scores a model on such examples by which of the two words it ranks higher.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from types import SimpleNamespace

import torch

from env.bargain.env import Message
from env.bargain.players.sellers import SELLERS
from env.bargain.prompts import opponent_message, system_prompt
from env.bargain.protocol import SELL, Action, format_price
from env.bargain.rules import BUYER, SELLER

WORDS = ("over", "within")  # the two verdicts the buyer's Thought writes, in this order of ``verdict_over``
_LINES = sorted({line for cls in SELLERS.values() for key in ("counter", "hold") for line in cls.talk_lines.get(key, ())})


def draw_ask(rng: random.Random, budget: float, over: bool) -> float:
    """An ask above ``budget`` (``over``) or at most it: a ratio to the budget whose distance from 1 is under 5% two
    times in five, 5-30% two in five, else 30-70%; a whole-dollar price seven times in ten, else cents."""
    for _ in range(100):
        band = rng.random()
        gap = rng.uniform(0.0, 0.05) if band < 0.4 else rng.uniform(0.05, 0.3) if band < 0.8 else rng.uniform(0.3, 0.7)
        ratio = 1 + gap if over else 1 - gap * 0.7
        ask = budget * ratio
        ask = float(round(ask)) if rng.random() < 0.7 else round(ask, 2)
        if ask >= 0.01 and (ask > budget) == over:
            return ask
    return round(budget + 0.01, 2) if over else budget  # a budget so small that no drawn price landed on its side


def comparison_examples(tokenizer, products: Sequence, n: int, seed: int, max_turns: int = 6, loss: str = "thought"):
    """``n`` drill examples as a dataset of ``input_ids``, ``completion_mask``, ``verdict_at`` (where the verdict
    word's first token stands), ``verdict_over`` (the true word) and the ``ask`` and ``budget`` each compares. Each is
    a chat: the system prompt's last two lines (the product and the budget, as the buyer's prompt ends), the seller's
    turn (a persona's line and its ``[SELL]`` action, as the environment renders them), and the buyer's Thought
    "Ask $A vs budget $B: <verdict> budget." with the loss on all of it (every word but the verdict is copied from the
    context, which holds the reply's form in place while the verdict is learned); no end of turn follows. Example
    ``i`` takes product ``i mod len(products)`` (its budget and title), and its true word alternates (even: over), so
    the two are balanced. ``loss="verdict"``: the loss on the verdict word's first token alone (for a drill mixed into
    whole games, whose own tokens hold the reply's form)."""
    from datasets import Dataset  # noqa: PLC0415

    if loss not in ("thought", "verdict"):
        raise ValueError(f"the drill's loss is on the thought or the verdict, got {loss!r}")
    if n < 1 or not products:
        raise ValueError(f"a drill needs at least one example and one product (got {n} and {len(products)})")
    rng = random.Random(seed)
    word_ids = _word_ids(tokenizer)
    period = tokenizer(" budget.", add_special_tokens=False)["input_ids"]
    rows = {"input_ids": [], "completion_mask": [], "verdict_at": [], "verdict_over": [], "ask": [], "budget": []}
    for i in range(n):
        product, over = products[i % len(products)], i % 2 == 0
        budget = float(product.budget)
        ask = draw_ask(rng, budget, over)
        view = SimpleNamespace(role=BUYER, turn=rng.randint(1, max_turns), max_turns=max_turns, title=product.title,
                               description="", category=product.category, list_price=product.list_price,
                               private_value=budget)
        talk = rng.choice(_LINES).format(price=format_price(ask), item=product.title)
        chat = [{"role": "system", "content": "\n".join(system_prompt(view).splitlines()[-2:])},
                {"role": "user", "content": opponent_message(Message(SELLER, talk, Action(SELL, ask)), view)}]
        prompt = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        head = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        thought = tokenizer(f"Thought: Ask {format_price(ask)} vs budget {format_price(budget)}:",
                            add_special_tokens=False)["input_ids"]
        tail = word_ids[0 if over else 1] + period
        rows["input_ids"].append(head + thought + tail)
        rows["completion_mask"].append([0] * len(head) + [1] * (len(thought) + len(tail)) if loss == "thought" else
                                       [0] * (len(head) + len(thought)) + [1] + [0] * (len(tail) - 1))
        rows["verdict_at"].append(len(head) + len(thought))
        rows["verdict_over"].append(over)
        rows["ask"].append(ask)
        rows["budget"].append(budget)
    return Dataset.from_dict(rows)


def _word_ids(tokenizer) -> list[list[int]]:
    """Each verdict word's tokens after a space; their first tokens must differ (the one the drill trains)."""
    ids = [tokenizer(" " + w, add_special_tokens=False)["input_ids"] for w in WORDS]
    if ids[0][0] == ids[1][0]:
        raise ValueError(f"the tokenizer starts {' and '.join(repr(' ' + w) for w in WORDS)} with the same token: no "
                         "one token tells the verdicts apart")
    return ids


@torch.no_grad()
def verdict_accuracy(model, tokenizer, examples, batch_size: int = 32) -> dict:
    """How often ``model`` ranks the true verdict word above the other at each example's verdict position: overall,
    on the asks above the budget and on those within it (a model that always writes one word scores 100% on its
    class, 0% on the other, 50% overall)."""
    (over_id, *_), (within_id, *_) = _word_ids(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    was_training = model.training
    model.eval()
    hits = {True: [], False: []}
    try:
        for s in range(0, len(examples), batch_size):
            chunk = examples[s: s + batch_size]
            prompts = [ids[:at] for ids, at in zip(chunk["input_ids"], chunk["verdict_at"])]
            width = max(map(len, prompts))
            ids = torch.tensor([p + [pad] * (width - len(p)) for p in prompts])
            mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in prompts])
            logits = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device)).logits
            last = torch.tensor([len(p) - 1 for p in prompts], device=logits.device)
            rows = logits[torch.arange(len(prompts), device=logits.device), last]
            says_over = (rows[:, over_id] > rows[:, within_id]).tolist()
            for truth, said in zip(chunk["verdict_over"], says_over):
                hits[truth].append(said == truth)
    finally:
        model.train(was_training)
    return _scores(hits)


@torch.no_grad()
def stream_verdict_accuracy(model, tokenizer, examples) -> dict:
    """``verdict_accuracy`` on whole game streams (``expert_verdict_games``): at each of an example's ``verdicts``
    positions, whether ``model`` ranks the word the stream holds there (the true one) above the other verdict word,
    reading the game's history before it. One forward an example, the logits kept at the verdict positions alone."""
    _word_ids(tokenizer)  # the two words must start with different tokens
    was_training = model.training
    model.eval()
    hits = {True: [], False: []}
    try:
        for ids, positions, overs in zip(examples["input_ids"], examples["verdicts"], examples["verdict_over"]):
            keep = [p for p in positions if 0 < p < len(ids)]
            if not keep:
                continue
            inputs = torch.tensor([ids[: max(keep)]], device=model.device)
            logits = model(input_ids=inputs, logits_to_keep=torch.tensor([p - 1 for p in keep])).logits[0]
            for row, p, over in zip(logits, keep, overs):
                true_id = ids[p]
                lead = tokenizer.decode([true_id])
                lead = lead[: len(lead) - len(lead.lstrip())]
                other = tokenizer(lead + WORDS[1 if over else 0], add_special_tokens=False)["input_ids"][0]
                hits[over].append(bool(row[true_id] > row[other]))
    finally:
        model.train(was_training)
    return _scores(hits)


def _scores(hits: dict[bool, list[bool]]) -> dict:
    """The share of verdicts ranked right: overall, on the asks above the budget (``hits[True]``) and within it."""
    everything = hits[True] + hits[False]
    share = lambda xs: sum(xs) / len(xs) if xs else math.nan  # noqa: E731
    return {"accuracy": share(everything), "accuracy_over": share(hits[True]),
            "accuracy_within": share(hits[False]), "examples": len(everything)}
