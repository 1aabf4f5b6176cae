"""The market's action language: a documented JSON schema an LLM can emit, a tolerant reader
for model text, and strict validation with reason codes.

One action per step, one JSON object, e.g. ``{"action": "offer", "to": "lab2", "side": "buy",
"block": "b3", "hours": 40, "price": 70}``. Scripted players may hand ``step`` the same dict.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from env.text import valid_text

MAX_TEXT = 600  # characters of free text in a pitch
MAX_ACTION_CHARS = 4000  # a longer reply is refused before parsing
MAX_NUMBER = 1e9  # hours and dollars above this are refused (no market here comes near it)
LAB_ID = re.compile(r"lab(?:0|[1-9][0-9]{0,2})", re.ASCII)  # canonical: lab0, lab12; never lab03, lab٣, lab²

ACTION_DOCS = {
    "offer": "propose a trade to another lab: side 'buy' (you get `hours` of their `block` for `price` dollars) "
             "or 'sell' (you give `hours` of your `block` for `price`)",
    "counter": "answer an offer made to you with another `price` (and optionally `hours`)",
    "accept": "accept an offer made to you (`offer` id); the trade executes at once",
    "reject": "reject an offer made to you",
    "pitch": "a buy offer with an argument: free `text` plus a structured `ask` {job, block, hours, price}; "
             "the judge scores the ask against your real need and the other lab sees the verdict",
    "buy_spot": "buy `hours` from the provider's spot stock at the spot price",
    "propose_coalition": "propose buying a volume `lot` together with the invited `members` (you included); "
                         "your own share is `hours` of the lot; everyone pays the lot's price per GPU-hour; a lot "
                         "is sold only to a coalition of at least two paying members, so a share must leave "
                         "GPU-hours of the lot for the others",
    "join": "join a coalition you are invited to, with your share: `hours` of the lot (less than the whole lot)",
    "commit": "bind yourself: your share's cost is escrowed; the lot is bought as soon as committed shares cover "
              "it (the last committer's share is trimmed to fit; the split is the shares)",
    "leave": "leave a coalition; after committing this costs a fine (25% of your contribution, paid to the "
             "other members) and reputation",
    "allocate": "run `hours` of your `block` on your `job` (the block must have started, the job not expired); "
                "energy is billed now",
    "wait": "end your turn for this round",
    "finish": "stop acting for the rest of the episode",
}

EXAMPLES = {  # one well-formed instance of every action (ids are made up: real ones come from a lab's view)
    "offer": {"action": "offer", "to": "lab1", "side": "buy", "block": "b2", "hours": 20, "price": 40},
    "counter": {"action": "counter", "offer": "o1", "price": 50},
    "accept": {"action": "accept", "offer": "o1"},
    "reject": {"action": "reject", "offer": "o1"},
    "pitch": {"action": "pitch", "to": "lab1", "text": "Our job j0.0 lacks 20 GPU-hours before its deadline.",
              "ask": {"job": "j0.0", "block": "b2", "hours": 20, "price": 40}},
    "buy_spot": {"action": "buy_spot", "hours": 20},
    "propose_coalition": {"action": "propose_coalition", "lot": "lot1", "members": ["lab0", "lab1"], "hours": 50},
    "join": {"action": "join", "coalition": "c1", "hours": 40},
    "commit": {"action": "commit", "coalition": "c1"},
    "leave": {"action": "leave", "coalition": "c1"},
    "allocate": {"action": "allocate", "block": "b1", "job": "j0.0", "hours": 20},
    "wait": {"action": "wait"},
    "finish": {"action": "finish"},
}

# Numbers are rounded to the cent (hours and dollars) before they are checked: 0.004 GPU-hours is 0.
_NUM = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_NUMBER}
_PRICE = {"type": "number", "minimum": 0, "maximum": MAX_NUMBER}
_ID = {"type": "string", "maxLength": 32}
_LAB = {"type": "string", "pattern": f"^{LAB_ID.pattern}$"}
FIELDS: dict[str, dict[str, dict]] = {
    "offer": {"to": _LAB, "side": {"enum": ["buy", "sell"]}, "block": _ID, "hours": _NUM,
              "price": _PRICE},
    "counter": {"offer": _ID, "price": _PRICE},
    "accept": {"offer": _ID},
    "reject": {"offer": _ID},
    "pitch": {"to": _LAB, "text": {"type": "string", "maxLength": MAX_TEXT},
              "ask": {"type": "object", "properties": {"job": _ID, "block": _ID, "hours": _NUM,
                                                       "price": _PRICE},
                      "required": ["job", "block", "hours", "price"]}},
    "buy_spot": {"hours": _NUM},
    "propose_coalition": {"lot": _ID, "members": {"type": "array", "items": _LAB, "minItems": 2}, "hours": _NUM},
    "join": {"coalition": _ID, "hours": _NUM},
    "commit": {"coalition": _ID},
    "leave": {"coalition": _ID},
    "allocate": {"block": _ID, "job": _ID, "hours": _NUM},
    "wait": {},
    "finish": {},
}
OPTIONAL = {"counter": {"hours": _NUM}}

ACTION_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Haggle GPU-market action",
    "oneOf": [{"type": "object", "description": ACTION_DOCS[name],
               "properties": {"action": {"const": name}, **fields, **OPTIONAL.get(name, {})},
               "required": ["action", *fields], "additionalProperties": False}
              for name, fields in FIELDS.items()],
}


@dataclass(frozen=True, slots=True)
class Invalid:
    """Why an action was refused: a reason code and a sentence for the player."""

    code: str
    detail: str


def parse_action(text: str) -> dict | Invalid:
    """The first JSON object in a model's reply (code fences and prose around it are allowed),
    validated. Never raises on any input."""
    if not isinstance(text, str):
        return Invalid("not_text", "the reply must be text")
    if len(text) > MAX_ACTION_CHARS:
        return Invalid("too_long", f"the reply is over {MAX_ACTION_CHARS} characters")
    start = text.find("{")
    if start < 0:
        return Invalid("no_json", "no JSON object in the reply")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    except (json.JSONDecodeError, RecursionError, ValueError):
        end = text.rfind("}")  # the first "{" to the last "}": prose after a broken first try
        try:
            obj = json.loads(text[start: end + 1]) if end > start else None
        except (json.JSONDecodeError, RecursionError, ValueError):
            obj = None
        if obj is None:
            return Invalid("bad_json", "the JSON object could not be read")
    return validate(obj)


def _check(value, rule: dict) -> bool:
    if "const" in rule:
        return value == rule["const"]
    if "enum" in rule:
        return value in rule["enum"]
    kind = rule.get("type")
    if kind == "string":
        if not isinstance(value, str) or len(value) > rule.get("maxLength", 10**9):
            return False
        return "pattern" not in rule or LAB_ID.fullmatch(value) is not None
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, int) and not -MAX_NUMBER <= value <= MAX_NUMBER:
            return False  # a huge JSON integer would overflow float
        if not math.isfinite(value) or value > rule.get("maximum", math.inf):
            return False
        return value > rule["exclusiveMinimum"] if "exclusiveMinimum" in rule else value >= rule.get("minimum", -math.inf)
    if kind == "array":
        return (isinstance(value, list) and len(value) >= rule.get("minItems", 0) and len(value) <= 16
                and all(_check(v, rule["items"]) for v in value))
    if kind == "object":
        props = rule["properties"]
        return (isinstance(value, dict) and set(value) == set(rule["required"])
                and all(_check(value[k], props[k]) for k in props))
    return False


def _cents(value):
    """Hours and dollars are kept to the cent; anything else is returned as it is."""
    return round(value, 2) if type(value) is float and math.isfinite(value) else value


def validate(obj) -> dict | Invalid:
    """Check one action object against the schema; the object itself (a new dict, hours and
    dollars rounded to the cent first) or ``Invalid``. Never raises."""
    if not isinstance(obj, dict):
        return Invalid("not_object", "the action must be a JSON object")
    name = obj.get("action")
    if not isinstance(name, str) or name not in FIELDS:
        return Invalid("unknown_action", f"'action' must be one of {', '.join(FIELDS)}")
    fields, optional = FIELDS[name], OPTIONAL.get(name, {})
    missing = [k for k in fields if k not in obj]
    if missing:
        return Invalid("missing_field", f"{name} needs {', '.join(missing)}")
    extra = [k for k in obj if k != "action" and k not in fields and k not in optional]
    if extra:
        return Invalid("unknown_field", valid_text(f"{name} takes no {', '.join(map(str, extra))}"[:200]))
    out = {}
    for k, v in obj.items():
        v = {**v, **{f: _cents(v[f]) for f in ("hours", "price") if f in v}} if k == "ask" and isinstance(v, dict) \
            else _cents(v) if k in ("hours", "price") else v
        if k != "action" and not _check(v, fields.get(k) or optional[k]):
            return Invalid("bad_value", f"{name}: bad value for {valid_text(repr(k))}")
        out[k] = _text(v)
    return out


def _text(value):
    """Strings of a checked action (at any depth) as valid text: a lone surrogate reads as U+FFFD."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        return {k: _text(v) for k, v in value.items()}
    return [_text(v) for v in value] if isinstance(value, list) else value
