"""Verdict labels on the policy's own games: the training data of ``sft.py --teach verdicts``.

A buyer's Thought states comparisons ("Ask $105.00 vs budget $115.19: over budget."), and the word that judges each is
checkable against the turn's truth (``env.bargain.consistency``). RL's reward is one number an episode, so a false
"over budget" gets only an episode's diluted credit. Here each verdict word the policy wrote in its own sampled games
becomes a supervised label: the token that starts it keeps its id when the verdict is true and takes the true word's
("over" or "within") when it is false. The loss falls on all the policy's own tokens, the corrected ones among them:
the rest is its own text, which anchors what it already writes (a loss on the verdict words alone, 40 steps at 5e-4,
made SmolLM2 write "over budget." again and again until its replies lost their action). Nothing of the expert's style
enters; later turns read the corrected words (their context is the truth, as a consistent buyer's would be).
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import NamedTuple

from env.bargain.consistency import standing_prices, verdicts

# the policy's games are played this many at a time, each in its own llama.cpp slot (more games than slots would feed
# each game's whole stream again at every turn; 64 rows a call were no faster per game than 32 here,
# artifacts/benchmarks/rl.json, and hold twice the KV memory)
GAMES_A_BATCH = 32


class VerdictExample(NamedTuple):
    """One episode's stream with its false verdicts corrected: ``input_ids``, ``completion_mask`` (1 on the policy's
    own tokens), ``verdicts`` (the positions of the labelled verdict tokens), ``over`` (for each, whether the true word
    is "over") and the ``true`` and ``false`` counts of the verdicts as the policy wrote them."""

    input_ids: list[int]
    completion_mask: list[int]
    verdicts: list[int]
    over: list[bool]
    true: int
    false: int


def verdict_example(record, tokenizer) -> VerdictExample:
    """One episode record (a model buyer's token stream) as training data: each checkable verdict word's first
    token takes the true word's id; the mask is the policy's own tokens (the record's ``env_mask``)."""
    ids = list(record.prompt_ids) + list(record.completion_ids)
    mask = [0] * len(record.prompt_ids) + list(record.env_mask)
    positions, over = [], []
    turns, budget = record.transcript["turns"], record.transcript["scenario"]["budget"]
    counts = [0, 0]
    for turn, (i, ask, own) in zip(record.turns, standing_prices(turns)):  # one model reply a buyer entry, in order
        for k, true, want, lead in verdict_tokens(turn, turns[i]["thought"], ask, budget, own, tokenizer):
            position = len(turn.prompt_ids) + k
            if not true:
                ids[position] = tokenizer(lead + want, add_special_tokens=False)["input_ids"][0]
            positions.append(position)
            over.append(want == "over")
            counts[not true] += 1
    return VerdictExample(ids, mask, positions, over, counts[0], counts[1])


def verdict_tokens(turn, thought: str | None, ask, budget: float, own, tokenizer,
                   symbols: bool = False) -> list[tuple[int, bool, str, str]]:
    """The checkable verdict words of one reply (``turn``: its ``completion_ids``; ``thought`` as the transcript
    holds it; ``ask``/``own``: the standing prices it is checked against): for each word whose first token starts
    it, that token's index in the completion, whether the word is true, the true word and the token's leading
    space. A reply whose Thought is not its text as decoded has none. ``symbols``: also each sign ("<", "=", ">")
    of the digit-by-digit comparison written just before a verdict ("1=1, 5<7: within"), with that verdict's
    truth and word: the step a small model gets wrong first, after which the word follows."""
    pieces = [tokenizer.decode([t]) for t in turn.completion_ids]
    text = "".join(pieces)
    start = text.find(thought) if thought else -1
    if start < 0:
        return []
    ends = list(accumulate(len(p) for p in pieces))

    def token_at(c):  # the index of the token that starts at character c of the Thought, with its leading space
        k = next(j for j, e in enumerate(ends) if e > start + c)
        lead = pieces[k][: len(pieces[k]) - len(pieces[k].lstrip())]
        return (k, lead) if ends[k] - len(pieces[k]) + len(lead) == start + c else (None, lead)

    out = []
    for at, true, want in verdicts(thought, ask, budget, own):
        if symbols and (m := _COMPARISON.search(thought[:at])):
            for sign in re.finditer(r"[<=>]", m.group(1)):
                k, lead = token_at(m.start(1) + sign.start())
                if k is not None:
                    out.append((k, true, want, lead))
        k, lead = token_at(at)
        if k is not None:  # else the token does not start the word: no clean label
            out.append((k, true, want, lead))
    return out


# the digit-by-digit comparison that ends just before a verdict word ("1=1, 5<7: within")
_COMPARISON = re.compile(r"((?:\d[<=>]\d, )*\d[<=>]\d): $")


def flip_history(ids: list[int], positions: list[int], over: list[bool], tokenizer, rng, share: float):
    """A verdict stream whose history lies: each verdict word at ``positions`` (``over``: whether it is "over") turns
    to the other word with probability ``share`` (its whole word re-tokenized after the same leading space, so the
    stream stays well formed) and leaves the loss; the others stay true and trained. A later verdict then cannot be
    copied from the earlier ones, it has to be read off the ask and the budget, as in a buyer's own games, where an
    earlier verdict may be wrong. Returns ``(ids, positions, over, flipped)``: the new stream, the positions and words
    of the verdicts still trained, and how many were turned. A word whose tokens are not the stream's is left alone."""
    from training.games.bargain.comparisons import WORDS  # noqa: PLC0415

    out, kept, kept_over, flipped, last = [], [], [], 0, 0
    for at, is_over in sorted(zip(positions, over)):
        if at < last:  # a position inside a word already rewritten (not expected): skip it
            continue
        out.extend(ids[last:at])
        piece = tokenizer.decode([ids[at]])
        lead = piece[: len(piece) - len(piece.lstrip())]
        word = tokenizer(lead + WORDS[0 if is_over else 1], add_special_tokens=False)["input_ids"]
        if rng.random() < share and ids[at: at + len(word)] == word:
            out.extend(tokenizer(lead + WORDS[1 if is_over else 0], add_special_tokens=False)["input_ids"])
            last = at + len(word)
            flipped += 1
            continue
        kept.append(len(out))
        kept_over.append(is_over)
        last = at
    out.extend(ids[last:])
    return out, kept, kept_over, flipped
