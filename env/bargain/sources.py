"""Where scenarios come from (sources) and how each is split into train and test products.

Sources:

* ``builtin``: the catalog in ``env/bargain/catalog.py``, written for this project (offline default).
* ``amazon``: the AmazonHistoryPrice benchmark (Xia et al. 2024) read from
  ``../shared/data/amazon_history_price`` or ``$HAGGLE_AMAZON_DATA``.
* ``synthetic``: generated products (``env/bargain/synthetic.py``), a training source: invented names,
  prices over four orders of magnitude, costs anywhere around the budget.
* any path to a JSON file or a folder of JSON files in that format.
* several of these joined by ``+`` (``builtin+synthetic``): their union; a union's train and test
  splits are the union of each source's own, so no source's test product is ever trained on.

Derivation (the benchmark's): list price ``L = max(list_price, highest_price)``, seller cost
``C = lowest_price``, buyer budget ``B = 0.8 L`` (``budget_factor``). A product may instead give
its own ``budget`` and ``cost`` (data with real buyer targets, such as CraigslistBargain's); then
only ``list_price`` is needed besides them. Mutual interest when ``B > C``.

The scenario type itself (money in cents, text limits) is ``env.bargain.scenario``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from dataclasses import replace
from pathlib import Path
from typing import Iterable, NamedTuple

from env.bargain.catalog import builtin_catalog
from env.bargain.protocol import MAX_PRICE, format_price
from env.text import valid_text
from env.bargain.synthetic import synthetic_catalog
from env.bargain.scenario import (  # noqa: F401  (the scenario type, re-exported for callers that load scenarios)
    BUDGET_FACTOR, TEXT_LIMITS, Scenario, ScenarioDataError, check_budget_factor, make_scenario)

# The paper holds out 128 of the 930 AmazonHistoryPrice products; other sets keep that share.
PAPER_TEST_PRODUCTS, PAPER_PRODUCTS = 128, 930
REPO_ROOT = Path(__file__).resolve().parents[2]
AMAZON_DEFAULT = REPO_ROOT.parent / "shared" / "data" / "amazon_history_price"
SOURCES = ("builtin", "amazon")  # the evaluation sources (``synthetic`` is for training)
MAX_FILE_BYTES = 64 * 2**20  # a product file larger than this is refused before it is read


class Split(NamedTuple):
    train: list[Scenario]
    test: list[Scenario]


# ---------------------------------------------------------------- AmazonHistoryPrice format

_MONEY = re.compile(r"^\$?\s*(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?$")


def parse_money(value: object, where: str) -> float:
    """``"$1,299.99" -> 1299.99``; anything else raises ``ScenarioDataError`` naming ``where``."""
    if value is None or value == "":
        raise ScenarioDataError(f"{where}: missing price")
    if isinstance(value, _LongNumber):
        raise ScenarioDataError(f"{where}: a number of {len(value.lstrip('-')):,} digits is over the game's limit of "
                                f"{format_price(MAX_PRICE)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if not _MONEY.match(text):
            raise ScenarioDataError(f"{where}: unreadable price {value!r} (expected like \"$1,299.99\")")
        number = float(text.lstrip("$").replace(",", "").strip())
    else:
        raise ScenarioDataError(f"{where}: price must be a string or number, got {type(value).__name__}")
    if not math.isfinite(number) or number <= 0:
        raise ScenarioDataError(f"{where}: price must be positive and finite, got {_short(value)}")
    if number > MAX_PRICE:  # no offer above it can be written: every reply in the game would be refused
        raise ScenarioDataError(f"{where}: price {_short(value)} is over the game's limit of {format_price(MAX_PRICE)}")
    return number


class _LongNumber(str):
    """A JSON integer of more digits than any price has, kept as its digits (never converted: 5,000
    digits would overflow a float or take Python's integer limit)."""


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text):,} characters)"


def _check_text(label: str, key: str, value: str) -> None:
    if valid_text(value) != value:  # a lone surrogate was replaced
        raise ScenarioDataError(f"{label}: field '{key}' holds a lone surrogate (an escape such as \\ud800 that "
                                "is no character); write the text as UTF-8")


def _product_to_scenario(item: object, index: int, path: Path, source: str, budget_factor: float) -> Scenario:
    if not isinstance(item, dict):
        raise ScenarioDataError(f"{path}: product #{index}: expected an object, got {type(item).__name__}")
    title = item.get("title")
    if not isinstance(title, str) or not title.strip():
        raise ScenarioDataError(f"{path}: product #{index}: field 'title' is missing or empty")
    label = f"{path}: product #{index} ({title.strip()[:60]!r})"
    _check_text(label, "title", title)
    money = lambda key: parse_money(item.get(key), f"{label}: field '{key}'")  # noqa: E731
    explicit_cost = item.get("cost") is not None
    list_price = money("list_price")
    if item.get("highest_price") is not None or not explicit_cost:  # the benchmark's L = max(list, highest)
        list_price = max(list_price, money("highest_price"))
    cost = money("cost") if explicit_cost else money("lowest_price")
    budget = money("budget") if item.get("budget") is not None else None
    description = item.get("description")
    if not isinstance(description, str) or not description.strip():
        features = item.get("features")
        description = " ".join(features) if isinstance(features, list) and all(isinstance(f, str) for f in features) else ""
    _check_text(label, "description", description)
    category = item.get("category")
    if not isinstance(category, str) or not category.strip():
        category = path.stem
    _check_text(label, "category", category)
    try:
        return make_scenario(title.strip(), description.strip(), category.strip(), list_price, cost, source,
                             budget_factor, budget)
    except ScenarioDataError as exc:
        raise ScenarioDataError(f"{label}: {exc}") from None


def load_json_products(path: str | os.PathLike, source: str | None = None,
                       budget_factor: float = BUDGET_FACTOR) -> list[Scenario]:
    """Load a JSON file, or every ``*.json`` in a folder, in the AmazonHistoryPrice format. Anything
    else (a FIFO, a device, a link loop, a file over ``MAX_FILE_BYTES``, a number out of range) is one
    ``ScenarioDataError`` naming the file, and the product and field where there is one."""
    path = Path(path)
    kind = _kind(path)
    if kind is None:
        raise ScenarioDataError(f"{path}: no such file or folder")
    if kind == "dir":
        try:
            files = sorted(f for f in path.glob("*.json") if _kind(f) != "dir")
        except OSError as exc:
            raise ScenarioDataError(f"{path}: the folder cannot be listed ({exc.strerror or exc})") from None
        if not files:
            raise ScenarioDataError(f"{path}: folder holds no .json files")
    else:
        files = [path]
    source = source or path.stem
    scenarios: list[Scenario] = []
    for file in files:
        data = _read_products(file)
        scenarios.extend(_product_to_scenario(item, i, file, source, budget_factor) for i, item in enumerate(data))
    seen: dict[str, Scenario] = {}
    for s in scenarios:
        if s.id in seen:
            raise ScenarioDataError(f"{path}: product {s.title[:60]!r} appears twice in category {s.category!r}")
        seen[s.id] = s
    return scenarios


def _kind(path: Path) -> str | None:
    """``dir``, ``file`` (anything else that exists, links followed), or None when nothing is there. A
    link loop is an error, not a missing file."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a link that points at itself; EACCES; a name too long
        raise ScenarioDataError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return "dir" if stat.S_ISDIR(mode) else "file"


def _read_products(file: Path) -> list:
    """The JSON list in ``file``: a regular file of at most ``MAX_FILE_BYTES``, opened without blocking
    (a FIFO or a device never makes this wait), numbers read without overflow."""
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ScenarioDataError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ScenarioDataError(f"{file}: not a regular file (a FIFO, device or socket holds no products)")
        if info.st_size > MAX_FILE_BYTES:
            raise ScenarioDataError(f"{file}: {info.st_size:,} bytes is over the limit of {MAX_FILE_BYTES:,}")
        try:
            raw = f.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise ScenarioDataError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ScenarioDataError(f"{file}: over the limit of {MAX_FILE_BYTES:,} bytes")
    text = raw.decode("utf-8", errors="replace")
    if not text.strip():
        raise ScenarioDataError(f"{file}: file is empty")
    try:
        # a long integer is kept as its digits, so the price check names the product and field
        data = json.loads(text, parse_int=lambda d: int(d) if len(d) <= 18 else _LongNumber(d))
    except json.JSONDecodeError as exc:
        raise ScenarioDataError(f"{file}: not valid JSON ({exc})") from None
    except (RecursionError, ValueError):
        raise ScenarioDataError(f"{file}: not a JSON list of products (nested too deeply or unreadable)") from None
    if not isinstance(data, list):
        raise ScenarioDataError(f"{file}: expected a JSON list of products, got {type(data).__name__}")
    if not data:
        raise ScenarioDataError(f"{file}: the list of products is empty")
    return data


# ---------------------------------------------------------------- sources and splits

_CACHE: dict[tuple, list[Scenario]] = {}
# The sources generated in code (no file): each gives its scenarios at the default budget factor.
GENERATED = {"builtin": builtin_catalog, "synthetic": synthetic_catalog}


def amazon_path() -> Path:
    return Path(os.environ.get("HAGGLE_AMAZON_DATA", AMAZON_DEFAULT))


def resolve_source(source: str = "auto") -> str:
    """``auto`` means the paper's AmazonHistoryPrice set when it is present, else ``builtin``."""
    if source == "auto":
        return "amazon" if amazon_path().is_dir() else "builtin"
    return source


def is_union(source: str) -> bool:
    """``a+b`` names a union, unless it is the path of an existing file or folder."""
    return "+" in source and not Path(source).exists()


def union_parts(source: str) -> list[str]:
    """The sources of a ``+`` union (``builtin+synthetic``), each resolved; at least two, no repeats."""
    parts = [resolve_source(p.strip()) for p in source.split("+")]
    if len(parts) < 2 or not all(parts) or len(set(parts)) < len(parts):
        raise ScenarioDataError(f"{source!r}: a union needs two or more different sources joined by '+'")
    return parts


def load_scenarios(source: str = "builtin", budget_factor: float = BUDGET_FACTOR) -> list[Scenario]:
    """Scenarios from ``builtin``, ``amazon``, ``auto`` or a path; loaded once per process.
    ``budget_factor`` sets budgets as that share of the list price (products that give their own
    budget keep it)."""
    source = resolve_source(source)
    budget_factor = check_budget_factor(budget_factor)
    if is_union(source):
        return [s for part in union_parts(source) for s in load_scenarios(part, budget_factor)]
    if source in GENERATED:
        if budget_factor == BUDGET_FACTOR:
            return GENERATED[source]()
        key = (source, budget_factor)
        if key not in _CACHE:
            _CACHE[key] = [replace(s, budget=budget_factor * s.list_price) for s in GENERATED[source]()]
        return list(_CACHE[key])
    path = amazon_path() if source == "amazon" else Path(source)
    if source == "amazon" and not path.exists():
        raise ScenarioDataError(f"{path}: AmazonHistoryPrice data not found (set HAGGLE_AMAZON_DATA)")
    key = (_resolved(path), _mtime(path), budget_factor)
    if key not in _CACHE:
        _CACHE[key] = load_json_products(path, source="amazon" if source == "amazon" else None,
                                         budget_factor=budget_factor)
    return _CACHE[key]


def _resolved(path: Path) -> str:
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):  # a link loop: the loader names it
        return str(path.absolute())


def _mtime(path: Path) -> float:
    """When the file, or the newest ``*.json`` of the folder, last changed (0 where it cannot be told:
    the loader then says why)."""
    def stamp(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0
    try:
        if path.is_dir():
            return max((stamp(f) for f in path.glob("*.json")), default=0.0)
    except OSError:
        return 0.0
    return stamp(path)


def test_count(n: int) -> int:
    """Test products for a set of ``n``: 128 for the paper's 930, the same share otherwise."""
    return max(1, round(n * PAPER_TEST_PRODUCTS / PAPER_PRODUCTS)) if n > 1 else 0


def split_scenarios(scenarios: Iterable[Scenario], n_test: int | None = None, salt: str = "haggle-split-v1") -> Split:
    """Deterministic train/test split, stratified by mutual/conflicting interest.

    Order-independent: each product is ranked by a hash of its id, so adding files or
    shuffling them does not move products between splits.
    """
    scenarios = list(scenarios)
    n_test = test_count(len(scenarios)) if n_test is None else n_test
    if not 0 <= n_test <= len(scenarios):
        raise ValueError(f"n_test={n_test} must be between 0 and {len(scenarios)}")
    rank = lambda s: hashlib.sha256(f"{salt}:{s.id}".encode()).hexdigest()  # noqa: E731
    test_ids: set[str] = set()
    strata = [[s for s in scenarios if s.mutual_interest], [s for s in scenarios if not s.mutual_interest]]
    quotas = [round(n_test * len(strata[0]) / len(scenarios))] if scenarios else [0]
    quotas.append(n_test - quotas[0])
    for group, quota in zip(strata, quotas):
        quota = min(quota, len(group))
        test_ids.update(s.id for s in sorted(group, key=rank)[:quota])
    if len(test_ids) < n_test:  # a stratum was too small: fill from the other one
        rest = sorted((s for s in scenarios if s.id not in test_ids), key=rank)
        test_ids.update(s.id for s in rest[: n_test - len(test_ids)])
    return Split([s for s in scenarios if s.id not in test_ids], [s for s in scenarios if s.id in test_ids])


_SPLITS: dict[tuple, Split] = {}


def get_split(source: str = "builtin", split: str = "test", budget_factor: float = BUDGET_FACTOR) -> list[Scenario]:
    """The ``train``, ``test`` or ``all`` scenarios of a source (the split is computed once per
    source, file version and budget factor: environments call this on every reset)."""
    if split == "all":
        return load_scenarios(source, budget_factor)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    resolved = resolve_source(source)
    if is_union(resolved):
        return [s for part in union_parts(resolved) for s in get_split(part, split, budget_factor)]
    path = None if resolved in GENERATED else amazon_path() if resolved == "amazon" else Path(resolved)
    key = (resolved, budget_factor) if path is None else (resolved, _resolved(path), _mtime(path), budget_factor)
    if key not in _SPLITS:
        _SPLITS[key] = split_scenarios(load_scenarios(source, budget_factor))
    return list(getattr(_SPLITS[key], split))
