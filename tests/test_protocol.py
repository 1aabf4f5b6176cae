"""The reply parser: table-driven cases, then property-based fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from env.bargain.protocol import (ACTION_KINDS, FORMAT_ERRORS, MAX_REPLY_CHARS, Action, ParsedReply, compose_reply,
                          format_price, parse_price, parse_reply, parse_reply_general)

CASES = [
    # (reply, expected action or error code, comment)
    ("Thought: hi\nTalk: hello\nAction: [BUY] $120", Action("BUY", 120.0), "canonical option_a"),
    ("<think>budget 80</think>\nTalk: hello\nAction: [SELL] $1,299.99", Action("SELL", 1299.99), "option_b with comma"),
    ("Talk: fine\nAction: [DEAL] 45.5", Action("DEAL", 45.5), "missing $ and one decimal"),
    ("Action: [buy] $ 1,000", Action("BUY", 1000.0), "lower-case tag, space after $"),
    ("Action: [BUY]: USD 75.00", Action("BUY", 75.0), "colon and USD"),
    ("I'll offer [BUY] $50 for it.", Action("BUY", 50.0), "no fields: the action inside free text"),
    ("[REJECT]", Action("REJECT"), "bare reject"),
    ("Talk: bye\nAction: [QUIT] now", Action("QUIT"), "trailing words after a priceless tag"),
    ("Action: [ DEAL ] $12.345", Action("DEAL", 12.35), "spaces in tag; cents rounded"),
    ("thinking aloud</think>\nTalk: hi\nAction: [BUY] $9", Action("BUY", 9.0), "template opened <think>, model closed it"),
    ("Thought: [SELL] $1 is silly\nTalk: hm\nAction: [BUY] $20", Action("BUY", 20.0), "tags in the Thought are private"),
    ("", "empty", "empty reply"),
    ("   \n ", "empty", "whitespace only"),
    ("Talk: hello there", "no_action", "no tag"),
    ("Talk: [BUY] $5 or [DEAL] $6\nAction: [BUY] $5", "multiple_actions", "two tags"),
    ("Action: [BUY]", "missing_price", "priced tag without price"),
    ("Action: [BUY] $1,2x9", "bad_price", "malformed number"),
    ("Action: [BUY] $-5", "bad_price", "negative price"),
    ("Action: [SELL] $12k", "bad_price", "suffix on the number"),
    ("Action: [BUY] $1,29", "bad_price", "bad comma grouping"),
    ("Action: [BUY] $99999999999", "bad_price", "beyond any product's price"),
    ("<think>never closed [BUY] $5", "unclosed_think", "unclosed think block"),
    ("Action: [OFFER] $5", "no_action", "unknown tag"),
]


@pytest.mark.parametrize("text,expected,comment", CASES, ids=[c[2] for c in CASES])
def test_parse_cases(text, expected, comment):
    parsed = parse_reply(text)
    if isinstance(expected, Action):
        assert parsed.ok, (comment, parsed)
        assert parsed.action == expected
    else:
        assert parsed.error == expected, (comment, parsed)
        assert parsed.action is None


def test_private_parts_are_split_from_talk():
    parsed = parse_reply("<think>SECRET budget 80</think>\nTalk: I like it.\nAction: [BUY] $50")
    assert "SECRET" in parsed.thought and "SECRET" not in parsed.talk
    parsed = parse_reply("Thought: SECRET\nTalk: I like it.\nAction: [BUY] $50")
    assert parsed.thought == "SECRET" and parsed.talk == "I like it."


def test_non_text_and_oversized_inputs():
    assert parse_reply(None).error == "not_text"
    assert parse_reply(12).error == "not_text"
    assert parse_reply(b"Action: [BUY] $5").action == Action("BUY", 5.0)
    assert parse_reply(b"\xff\xfe[QUIT]").action == Action("QUIT")
    assert parse_reply("x" * (MAX_REPLY_CHARS + 1)).error == "too_long"


def test_price_helpers():
    assert format_price(1299.5) == "$1,299.50"
    assert parse_price("$1,299.50") == 1299.5
    assert parse_price("abc") is None


def _check(parsed: ParsedReply):
    assert isinstance(parsed, ParsedReply)
    if parsed.ok:
        assert parsed.action.kind in ACTION_KINDS
        if parsed.action.price is not None:
            assert 0 <= parsed.action.price <= 1e9
    else:
        assert parsed.error in FORMAT_ERRORS and parsed.action is None


protocol_text = st.lists(st.sampled_from([
    "Thought: ", "Talk: ", "Action: ", "[BUY]", "[SELL]", "[DEAL]", "[REJECT]", "[QUIT]", "$", "1,299.99",
    "12", ".5", ",", "<think>", "</think>", "\n", " ", "USD", "-", "k", "Ä", "\x00",
]) | st.text(max_size=8), max_size=25).map("".join)


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.one_of(st.text(max_size=300), protocol_text, st.binary(max_size=200)))
def test_fuzz_parse_never_raises(text):
    _check(parse_reply(text))


@settings(max_examples=1500, deadline=None)
@given(protocol_text)
def test_fuzz_fast_path_agrees_with_general_parser(text):
    assert parse_reply(text) == parse_reply_general(text)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(ACTION_KINDS), st.floats(0, 1e8, allow_nan=False), st.sampled_from(["option_a", "option_b"]),
       st.text(alphabet=st.characters(blacklist_characters="[]<>\n\r", blacklist_categories=("Cs",)), max_size=40))
def test_fuzz_compose_parse_round_trip(kind, price, mode, talk):
    action = Action(kind, round(price, 2) if kind in ("BUY", "SELL", "DEAL") else None)
    parsed = parse_reply(compose_reply("PRIVATE-THOUGHT", talk, action, mode))
    assert parsed.ok and parsed.action == action
    assert "PRIVATE-THOUGHT" not in parsed.talk and parsed.thought == "PRIVATE-THOUGHT"
