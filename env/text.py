"""Text and values a game keeps: always serialisable as UTF-8 JSON.

A JSON client may send a lone surrogate (``"\\ud800"`` is valid JSON) and an in-process caller may
hand a game any Python object; neither may make a record (transcript, log, refusal) unwritable.
"""

from __future__ import annotations

import math
import re

_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_RECORDED_CHARS = 500  # a foreign value is recorded as a short description, never in full


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate (not encodable as UTF-8) replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def json_safe(value, depth: int = 0):
    """``value`` as JSON-serialisable data (dicts with text keys, lists, finite numbers, valid text):
    anything else (NaN, a 5,000-digit integer, bytes, ``object()``) becomes a short text saying what
    it was. Never raises."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return valid_text(value[:MAX_RECORDED_CHARS * 8])
    if isinstance(value, int):
        return value if abs(value) < 10**18 else f"<integer of {value.bit_length()} bits>"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth < 16 and isinstance(value, dict):
        return {json_safe(k, 99) if isinstance(k, str) else _describe(k): json_safe(v, depth + 1)
                for k, v in list(value.items())[:64]}
    if depth < 16 and isinstance(value, (list, tuple)):
        return [json_safe(v, depth + 1) for v in value[:64]]
    return _describe(value)


def _describe(value) -> str:
    """What a foreign value was: its type, and its repr for the builtins whose repr is their value
    (an arbitrary object's repr may name a memory address, which would break replay)."""
    kind = type(value).__name__
    if type(value) in (bytes, bytearray, complex):
        return valid_text(f"<{kind}: {repr(value)[:MAX_RECORDED_CHARS]}>")
    return f"<{kind[:60]}>"
