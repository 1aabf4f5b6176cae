"""Verdict labels on the policy's own games: the training data of ``sft.py --teach verdicts``.

A buyer's Thought states comparisons ("Ask $105.00 vs budget $115.19: over budget."), and the word that judges each is
checkable against the turn's truth (``env.bargain.consistency``). RL's reward is one number an episode, so a false
"over budget" gets only an episode's diluted credit. Here each verdict word the policy wrote in its own sampled games
becomes one supervised label: the token that starts it keeps its id when the verdict is true, takes the true word's
("over" or "within") when it is false, and the loss falls on those tokens alone. Everything else in the stream is the
policy's own text, so the stage teaches the judgement and nothing of the expert's style; later turns read the
corrected words (their context is the truth, as a consistent buyer's would be).
"""

from __future__ import annotations

from env.bargain.consistency import standing_prices, verdicts


def verdict_example(record, tokenizer) -> tuple[list[int], list[int], int, int]:
    """``(input_ids, completion_mask, true, false)`` for one episode record (a model buyer's token stream): the mask
    is 1 on the first token of each checkable verdict word, whose id is the true word's; the stream ends at the last
    labelled token (nothing after it is trained). ``true`` and ``false`` count the verdicts as the policy wrote them.
    An episode with no checkable verdict gives empty lists."""
    ids = list(record.prompt_ids) + list(record.completion_ids)
    mask = [0] * len(ids)
    turns, budget = record.transcript["turns"], record.transcript["scenario"]["budget"]
    counts = [0, 0]
    for turn, (i, ask, own) in zip(record.turns, standing_prices(turns)):  # one model reply a buyer entry, in order
        thought = turns[i]["thought"]
        pieces = [tokenizer.decode([t]) for t in turn.completion_ids]
        text = "".join(pieces)
        start = text.find(thought) if thought else -1
        if start < 0:  # a reply whose Thought is not its text as decoded (not seen): nothing to label
            continue
        ends, n = [], 0
        for p in pieces:
            n += len(p)
            ends.append(n)
        for at, true, want in verdicts(thought, ask, budget, own):
            c = start + at
            k = next(j for j, e in enumerate(ends) if e > c)
            piece = pieces[k]
            lead = piece[: len(piece) - len(piece.lstrip())]
            if ends[k] - len(piece) + len(lead) != c:  # the token does not start the word: no clean label
                continue
            position = len(turn.prompt_ids) + k
            ids[position] = tokenizer(lead + want, add_special_tokens=False)["input_ids"][0] if not true \
                else ids[position]
            mask[position] = 1
            counts[not true] += 1
    if not any(mask):
        return [], [], 0, 0
    last = max(j for j, m in enumerate(mask) if m) + 1
    return ids[:last], mask[:last], counts[0], counts[1]
