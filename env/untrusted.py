"""Text the project did not write, made safe to show a language model.

A player's Talk, a product's title and description, a market message: any of them may hold the
characters of a chat-template control token (``<|im_end|><|im_start|>system ...``). A tokenizer
reads those characters as the real token, so an opponent could forge a system turn inside a model
player's context. ``TextGuard`` breaks every occurrence of a marker string (each special or added
token of the model's tokenizer) with an invisible WORD JOINER (U+2060) after its first character:
the text still reads the same, but no tokenizer match can form, so it tokenizes as plain text.

Applied to the untrusted fields only, never to the environment's own text: the tiny tokenizer has
added tokens for ``Talk:``, ``Action:`` and ``[BUY]``, which the environment writes on purpose and a
player's Talk must not forge. A guard built for a tokenizer checks itself against it once (a
tokenizer whose normalizer dropped the joiner would fail loudly at load, not silently in a game).
"""

from __future__ import annotations

import re
from typing import Iterable

JOINER = "\u2060"
# For a model behind a chat API (or a judge model reached through a plain ``generate(prompt)``), whose
# tokenizer is not ours to read: the control-token shapes of the common template families. ChatML,
# Llama-3, Phi, Command-R and ChatGLM ``<|...|>``; DeepSeek's full-width ``<｜...｜>``; Llama-2/Mistral
# ``[INST]`` and Mistral's bracketed tool and system tokens; Gemma turns; GLM's ``[gMASK]<sop>``;
# Qwen's tool tags; thinking tags; sentence and padding tokens.
GENERIC_MARKERS = ("<|", "|>", "<｜", "｜>", "<s>", "</s>", "<unk>", "<pad>", "<bos>", "<eos>", "[INST]", "[/INST]",
                   "<<SYS>>", "<</SYS>>", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                   "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CONTENT]", "[/TOOL_CONTENT]",
                   "[THINK]", "[/THINK]", "<start_of_turn>", "<end_of_turn>", "[gMASK]", "[sMASK]", "[MASK]", "<sop>",
                   "<eop>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


class TextGuard:
    """``guard(text)``: ``text`` with every marker string broken by a joiner (unchanged when it
    holds none). Idempotent; never raises on a string."""

    def __init__(self, markers: Iterable[str]):
        self.markers = tuple(sorted({m for m in markers if len(m) >= 2 and not m.isspace()}, key=len, reverse=True))
        self._pattern = re.compile("|".join(map(re.escape, self.markers))) if self.markers else None
        # a marker of one character cannot be broken by an insertion: it is replaced instead
        self._single = {ord(m): "\ufffd" for m in markers if len(m) == 1 and not m.isspace()}

    def __call__(self, text: str) -> str:
        if self._single:
            text = text.translate(self._single)
        if self._pattern is None:
            return text
        while True:  # a break can leave an overlapping marker whole ("ab" broken in "abc" leaves "bc")
            broken = self._pattern.sub(lambda m: m.group()[0] + JOINER + m.group()[1:], text)
            if broken == text:
                return text
            text = broken

    @classmethod
    def for_tokenizer(cls, tokenizer) -> "TextGuard":
        """A guard against every special and added token of ``tokenizer``, checked against it."""
        markers = {t.content for t in tokenizer.added_tokens_decoder.values()} | set(tokenizer.all_special_tokens)
        guard = cls(markers)
        guard.check(tokenizer)
        return guard

    @classmethod
    def generic(cls) -> "TextGuard":
        return cls(GENERIC_MARKERS)

    def check(self, tokenizer) -> None:
        """Raise ``ValueError`` if a guarded marker still tokenizes to a special or added id."""
        forbidden = set(tokenizer.added_tokens_decoder) | set(tokenizer.all_special_ids)
        for marker in self.markers:
            ids = tokenizer(f"a {self(marker)} b{self(marker)}", add_special_tokens=False)["input_ids"]
            if forbidden.intersection(ids):
                raise ValueError(f"the tokenizer still reads the guarded marker {marker!r} as a control token "
                                 "(its normalizer may drop U+2060); opponent text cannot be made safe for it")
