"""The text protocol of the bilateral negotiation (the RLVR negotiation paper's), as pure functions.

A reply has a private part and a public part:

* option_a (explicit fields)::

      Thought: my budget is $80, the ask is $95: too high.
      Talk: That is more than I can pay. Would you take $60?
      Action: [BUY] $60

* option_b (native reasoning)::

      <think>my budget is $80 ...</think>
      Talk: That is more than I can pay. Would you take $60?
      Action: [BUY] $60

The private part (Thought field or ``<think>`` blocks) never reaches the opponent.
Exactly one action tag must appear in the public part: ``[BUY] $X`` (buyer),
``[SELL] $X`` (seller), ``[DEAL] $X`` (accept the opponent's standing offer),
``[REJECT]`` or ``[QUIT]``. Prices may carry commas, cents and may omit ``$``.
``parse_reply`` never raises: a reply it cannot read comes back with a reason code.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import NamedTuple

from env.text import valid_text

BUY, SELL, DEAL, REJECT, QUIT = "BUY", "SELL", "DEAL", "REJECT", "QUIT"
ACTION_KINDS = (BUY, SELL, DEAL, REJECT, QUIT)
PRICED_KINDS = frozenset({BUY, SELL, DEAL})
REASONING_MODES = ("option_a", "option_b")

# Longest reply the environment reads; a negotiation message never needs more.
MAX_REPLY_CHARS = 16_000
# Longest Talk forwarded to the opponent (keeps prompts bounded).
MAX_TALK_CHARS = 1_500
# Prices above this are treated as unreadable (no product here costs a billion).
MAX_PRICE = 1e9

# Format error reason codes (the reply could not be read as one protocol move).
E_NOT_TEXT = "not_text"
E_EMPTY = "empty"
E_TOO_LONG = "too_long"
E_UNCLOSED_THINK = "unclosed_think"
E_NO_ACTION = "no_action"
E_MULTIPLE_ACTIONS = "multiple_actions"
E_MISSING_PRICE = "missing_price"
E_BAD_PRICE = "bad_price"
FORMAT_ERRORS = (E_NOT_TEXT, E_EMPTY, E_TOO_LONG, E_UNCLOSED_THINK, E_NO_ACTION,
                 E_MULTIPLE_ACTIONS, E_MISSING_PRICE, E_BAD_PRICE)

_THINK_TAG = re.compile(r"<(/?)think>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FIELD = re.compile(r"^[ \t>*#_-]*(thought|talk|action)[ \t*_]*:[ \t]*", re.IGNORECASE | re.MULTILINE)
_ACTION_TAG = re.compile(r"\[\s*(BUY|SELL|DEAL|REJECT|QUIT)\s*\]", re.IGNORECASE)
# What may follow a priced tag: optional colon, optional currency, then the number. Each run of
# blanks follows a literal (tag, colon or currency), so no two runs can compete for the same
# characters: one match attempt is linear in the text (adjacent optional runs backtrack cubically).
_PRICE = re.compile(
    r"[ \t]*(?::[ \t]*)?(?:(?:\$|usd)[ \t]*)?"
    r"(?P<num>(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?)"
    r"(?![.,]?[0-9A-Za-z])",
    re.IGNORECASE,
)
# Characters that group digits in some locale ("1 000", "1_000", "1'000", "1\u00a0000"): a price
# followed by these and then another digit-like character is ambiguous, never a shorter number.
# Characters that render blank without being spaces (Unicode calls them letters or symbols).
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u17b4\u17b5")
_GROUPING = frozenset(" \t_'\u2019.,\u00a0\u202f\u2009\u2007\u2008\u200a\u2002\u2003\u2004\u2005\u2006\u00b7\u066b\u066c")
# The canonical layout that scripted players and trained models write, read in one match.
# Anything else (or anything this does not settle) goes through the general parser.
_CANONICAL = re.compile(
    r"(?:Thought: ([^\n<]*)\n|<think>([^<]*)</think>\n)?Talk: ([^\n\[<]*)\n"
    r"Action: \[(BUY|SELL|DEAL|REJECT|QUIT)\](?: \$((?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?))?"
)
# Something that looks like an attempt at a price (so it is "bad", not "missing").
_PRICE_ATTEMPT = re.compile(r"[ \t]*(?::[ \t]*)?(?:\$|usd|[-+.,]|\d)", re.IGNORECASE)


class Action(NamedTuple):
    """One protocol move. ``price`` is set for BUY, SELL and DEAL, in dollars."""

    kind: str
    price: float | None = None

    def render(self) -> str:
        return f"[{self.kind}]" if self.price is None else f"[{self.kind}] {format_price(self.price)}"


class ParsedReply(NamedTuple):
    """A reply split into its private and public parts.

    ``error`` is None when exactly one well-formed action was found, else a reason code
    from ``FORMAT_ERRORS`` with a human-readable ``detail``.
    """

    thought: str
    talk: str
    action: Action | None
    error: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


def format_price(price: float) -> str:
    """``1299.5 -> '$1,299.50'``: the one way prices are written by the environment."""
    return f"${price:,.2f}"


def compose_reply(thought: str, talk: str, action: Action, mode: str = "option_a") -> str:
    """Write a reply in the protocol (what scripted players and expert data use)."""
    if mode == "option_b":
        return f"<think>{thought}</think>\nTalk: {talk}\nAction: {action.render()}"
    return f"Thought: {thought}\nTalk: {talk}\nAction: {action.render()}"


def parse_price(text: str) -> float | None:
    """Read a price such as ``$1,299.99``, ``1299.99``, ``$ 45`` or ``USD 45``; None if unreadable,
    and None when what follows changes the amount (``$1 000``, ``$5-10``, ``$5 thousand``, ``50 cents``,
    ``45€``: see ``_digits_follow``), never a shorter number."""
    if not isinstance(text, str):
        return None
    m = _PRICE.match(text)
    if m is None or _digits_follow(text, m.end()):
        return None
    return _to_price(m.group("num"))


def _digits_follow(text: str, end: int) -> bool:
    """Whether what follows the number ending at ``end`` makes it a different amount than the digits
    read so far, so that reading it would misread the price:

    * more digits after grouping marks, punctuation, symbols or combining marks (``$1 000``,
      ``$1，000``, ``$1·000``, ``$5-10``, ``$1/2``, ``$10^3``, ``$12 $13``), also after one joining word
      (``$5 to $10``, ``$5 or 10``);
    * a unit word or sign that scales it (``$5 thousand``, ``$1.5 million``, ``$2 grand``, ``$5 k``,
      ``50 cents``, ``50¢``, ``$5%``);
    * another currency (``45€``, ``45 EUR``)."""
    n = len(text)
    i = _skip(text, end, _is_gap)
    if i < n and (text[i] in _SCALING_SIGNS or unicodedata.category(text[i]) in ("Sc", "Mn", "Mc", "Me")):
        return True
    if _SCALING_WORD.match(text, i):
        return True
    i = _skip(text, i, _is_joiner)
    if i < n and text[i].isnumeric():
        return True
    word = _JOINING_WORD.match(text, i)
    if word is not None:
        i = _skip(text, word.end(), _is_joiner)
        return i < n and text[i].isnumeric()
    return False


def _skip(text: str, i: int, what) -> int:
    """The first index from ``i`` (at most ``_LOOKAHEAD`` characters on) where ``what`` is false."""
    stop = min(len(text), i + _LOOKAHEAD)
    while i < stop and what(text[i]):
        i += 1
    return i


def _is_gap(char: str) -> bool:
    """A character that may sit between the digits of one number as written or as rendered: a
    grouping mark, any Unicode space (Zs), a format character (Cf: zero-width joiners, BOM) or a
    blank-rendering filler (Hangul, Braille, Khmer)."""
    return char in _GROUPING or char in _FILLERS or unicodedata.category(char) in ("Zs", "Cf")


def _is_joiner(char: str) -> bool:
    """A gap, punctuation, a symbol, a combining or modifier mark: what may join two numbers into a
    range, a fraction, a power or a longer number (``-``, ``/``, ``^``, ``，``, ``ʼ``, ``・``, a second ``$``)."""
    return _is_gap(char) or unicodedata.category(char)[0] in "PSM" or unicodedata.category(char) == "Lm"


# Within a few characters after a price, these change the amount it means (ranges, units, currencies).
_LOOKAHEAD = 12
_SCALING_SIGNS = frozenset("%‰‱")  # a markdown "**" after a price is not one: only digits after it count
_SCALING_WORD = re.compile(
    r"(?:cents?|pence|pennies|penny|k|thousands?|thou|grand|m|mm|mn|mil|mio|millions?|b|bn|billions?|t|tn|trillions?"
    r"|eur|euros?|gbp|pounds?|yen|jpy|cny|rmb|yuan|inr|rupees?|chf|cad|aud|percent|pct)(?![A-Za-z])",
    re.IGNORECASE)
_JOINING_WORD = re.compile(r"(?:to|or|and|through|thru|till|til|until|upto|x|times|plus|minus|over|by)(?![A-Za-z])",
                           re.IGNORECASE)


def _to_price(num: str) -> float | None:
    if len(num) > 16:  # more digits than any price below MAX_PRICE needs, cents included
        return None
    value = float(num.replace(",", ""))
    if not math.isfinite(value) or value > MAX_PRICE:
        return None
    return round(value, 2)


# Characters that end or break a line for ``str.splitlines`` and tokenizers, other control
# characters, and bidirectional overrides: none of them may reach the opponent inside Talk, so
# a player's Talk is always one line and can never start a line of the environment's own text.
_LINE_BREAKERS = {c: " " for c in (*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)}
_INVISIBLE = dict.fromkeys((0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)))
_ONE_LINE = str.maketrans({**_LINE_BREAKERS, **_INVISIBLE})


def one_line(text: str) -> str:
    """``text`` as a single line: line breaks and control characters become spaces, bidirectional
    overrides are dropped (what an opponent's Talk looks like wherever it is shown)."""
    return text.translate(_ONE_LINE).strip()


def _tag_spans(text: str) -> list[tuple[bool, int, int]]:
    """``(is_open, start, end)`` of every ``<think>`` and ``</think>`` in ``text``, in order."""
    return [(m.group(1) == "", m.start(), m.end()) for m in _THINK_TAG.finditer(text)]


def split_private(text: str) -> tuple[str, str, str | None]:
    """Split a reply into ``(private, public, error)``.

    ``<think>`` blocks and a ``Thought:`` field are private. A ``</think>`` with no
    opening tag (templates that open the block in the prompt) makes everything before
    it private. An unclosed ``<think>`` makes the rest private and is an error.
    Linear in the length of ``text``: the tags are found in one scan and paired in one pass.
    """
    private: list[str] = []
    error = None
    if "<" in text:
        # 1. <think>...</think> blocks, leftmost first, each closed by the first </think> after it
        kept, pos = [], 0
        tags = _tag_spans(text)
        i = 0
        while i < len(tags):
            if not tags[i][0]:
                i += 1
                continue
            j = i + 1
            while j < len(tags) and tags[j][0]:
                j += 1
            if j == len(tags):
                break
            private.append(text[tags[i][2]: tags[j][1]].strip())
            kept.append(text[pos: tags[i][1]])
            pos, i = tags[j][2], j + 1
        kept.append(text[pos:])
        text = "\n".join(kept)
        # 2. a close without an open: the chat template opened the block, the model closed it
        tags = _tag_spans(text)
        close = next((t for t in tags if not t[0]), None)
        if close is not None:
            private.append(text[: close[1]].strip())
            text = _THINK_CLOSE.sub("\n", text[close[2]:])
        # 3. an open without a close
        opened = _THINK_OPEN.search(text)
        if opened is not None:
            private.append(text[opened.end():].strip())
            text = text[: opened.start()]
            error = E_UNCLOSED_THINK
    fields = list(_FIELD.finditer(text))
    if not fields:
        return "\n".join(p for p in private if p), text.strip(), error
    public = [text[: fields[0].start()].strip()]
    for i, m in enumerate(fields):
        end = fields[i + 1].start() if i + 1 < len(fields) else len(text)
        body = text[m.end(): end].strip()
        (private if m.group(1).lower() == "thought" else public).append(body)
    return "\n".join(p for p in private if p), "\n".join(p for p in public if p), error


def parse_reply(reply: object) -> ParsedReply:
    """Parse any input into a ``ParsedReply``; never raises. Lone surrogates (valid JSON, not
    encodable text) are read as U+FFFD, so what is kept of the reply always serialises."""
    if type(reply) is str:
        reply = valid_text(reply)
    if type(reply) is str and len(reply) <= MAX_REPLY_CHARS:
        m = _CANONICAL.fullmatch(reply)
        if m is not None:
            thought, think, talk, kind, num = m.groups()
            if (num is not None) == (kind in PRICED_KINDS) and "\x00" not in reply:
                price = _to_price(num) if num is not None else None
                if num is None or price is not None:
                    return ParsedReply((think if think is not None else thought or "").strip(), _clip(talk.strip()),
                                       Action(kind, price))
    return parse_reply_general(reply)


def parse_reply_general(reply: object) -> ParsedReply:
    """The general parser (any layout, any input); ``parse_reply`` tries a fast path first."""
    if isinstance(reply, (bytes, bytearray)):
        reply = bytes(reply).decode("utf-8", errors="replace")
    if not isinstance(reply, str):
        return ParsedReply("", "", None, E_NOT_TEXT, f"expected text, got {type(reply).__name__}")
    reply = valid_text(reply)
    if len(reply) > MAX_REPLY_CHARS:
        return ParsedReply("", "", None, E_TOO_LONG, f"{len(reply)} characters > {MAX_REPLY_CHARS}")
    if "\x00" in reply:
        reply = reply.replace("\x00", "")
    if not reply.strip():
        return ParsedReply("", "", None, E_EMPTY, "empty reply")
    thought, public, error = split_private(reply)
    if error is not None:
        return ParsedReply(thought, "", None, error, "a <think> block was never closed")
    tags = list(_ACTION_TAG.finditer(public))
    if not tags:
        return ParsedReply(thought, _clip(public), None, E_NO_ACTION, "no [BUY]/[SELL]/[DEAL]/[REJECT]/[QUIT] tag")
    if len(tags) > 1:
        kinds = ", ".join(t.group(1).upper() for t in tags[:5])
        return ParsedReply(thought, _clip(public), None, E_MULTIPLE_ACTIONS, f"{len(tags)} action tags ({kinds})")
    tag = tags[0]
    kind = tag.group(1).upper()
    end = tag.end()
    price = None
    if kind in PRICED_KINDS:
        m = _PRICE.match(public, end)
        if m is None:
            code = E_BAD_PRICE if _PRICE_ATTEMPT.match(public, end) else E_MISSING_PRICE
            return ParsedReply(thought, _clip(public), None, code, f"[{kind}] needs a price like $1,234.50")
        if _digits_follow(public, m.end()):
            return ParsedReply(thought, _clip(public), None, E_BAD_PRICE,
                               f"[{kind}] price is followed by more digits, a unit or a range: write one amount in "
                               "dollars, as $1,000.50")
        price = _to_price(m.group("num"))
        if price is None:
            return ParsedReply(thought, _clip(public), None, E_BAD_PRICE, f"price out of range (max {MAX_PRICE:.0e})")
        end = m.end()
    talk = _clip(_strip_action(public, tag.start(), end))
    return ParsedReply(thought, talk, Action(kind, price))


def _strip_action(public: str, start: int, end: int) -> str:
    """The public text without the action itself (the action travels separately)."""
    return (public[:start] + public[end:]).strip()


def _clip(talk: str) -> str:
    """The public Talk as the opponent receives it: one line, at most ``MAX_TALK_CHARS``."""
    talk = one_line(talk)
    return talk if len(talk) <= MAX_TALK_CHARS else talk[: MAX_TALK_CHARS - 1] + "…"
