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
from dataclasses import replace
from pathlib import Path
from typing import Iterable, NamedTuple

from env.bargain.catalog import builtin_catalog
from env.bargain.synthetic import synthetic_catalog
from env.bargain.scenario import (  # noqa: F401  (the scenario type, re-exported for callers that load scenarios)
    BUDGET_FACTOR, TEXT_LIMITS, Scenario, ScenarioDataError, check_budget_factor, make_scenario)

# The paper holds out 128 of the 930 AmazonHistoryPrice products; other sets keep that share.
PAPER_TEST_PRODUCTS, PAPER_PRODUCTS = 128, 930
REPO_ROOT = Path(__file__).resolve().parents[2]
AMAZON_DEFAULT = REPO_ROOT.parent / "shared" / "data" / "amazon_history_price"
SOURCES = ("builtin", "amazon")  # the evaluation sources (``synthetic`` is for training)


class Split(NamedTuple):
    train: list[Scenario]
    test: list[Scenario]


# ---------------------------------------------------------------- AmazonHistoryPrice format

_MONEY = re.compile(r"^\$?\s*(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?$")


def parse_money(value: object, where: str) -> float:
    """``"$1,299.99" -> 1299.99``; anything else raises ``ScenarioDataError`` naming ``where``."""
    if value is None or value == "":
        raise ScenarioDataError(f"{where}: missing price")
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
        raise ScenarioDataError(f"{where}: price must be positive and finite, got {value!r}")
    return number


def _product_to_scenario(item: object, index: int, path: Path, source: str, budget_factor: float) -> Scenario:
    if not isinstance(item, dict):
        raise ScenarioDataError(f"{path}: product #{index}: expected an object, got {type(item).__name__}")
    title = item.get("title")
    if not isinstance(title, str) or not title.strip():
        raise ScenarioDataError(f"{path}: product #{index}: field 'title' is missing or empty")
    label = f"{path}: product #{index} ({title.strip()[:60]!r})"
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
    category = item.get("category")
    if not isinstance(category, str) or not category.strip():
        category = path.stem
    try:
        return make_scenario(title.strip(), description.strip(), category.strip(), list_price, cost, source,
                             budget_factor, budget)
    except ScenarioDataError as exc:
        raise ScenarioDataError(f"{label}: {exc}") from None


def load_json_products(path: str | os.PathLike, source: str | None = None,
                       budget_factor: float = BUDGET_FACTOR) -> list[Scenario]:
    """Load a JSON file, or every ``*.json`` in a folder, in the AmazonHistoryPrice format."""
    path = Path(path)
    if not path.exists():
        raise ScenarioDataError(f"{path}: no such file or folder")
    files = sorted(f for f in path.glob("*.json") if f.is_file()) if path.is_dir() else [path]
    if not files:
        raise ScenarioDataError(f"{path}: folder holds no .json files")
    source = source or path.stem
    scenarios: list[Scenario] = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:  # unreadable: permissions, a special file
            raise ScenarioDataError(f"{file}: cannot be read ({exc.strerror or exc})") from None
        if not text.strip():
            raise ScenarioDataError(f"{file}: file is empty")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScenarioDataError(f"{file}: not valid JSON ({exc})") from None
        except RecursionError:
            raise ScenarioDataError(f"{file}: nested too deeply to be a list of products") from None
        if not isinstance(data, list):
            raise ScenarioDataError(f"{file}: expected a JSON list of products, got {type(data).__name__}")
        if not data:
            raise ScenarioDataError(f"{file}: the list of products is empty")
        scenarios.extend(_product_to_scenario(item, i, file, source, budget_factor) for i, item in enumerate(data))
    seen: dict[str, Scenario] = {}
    for s in scenarios:
        if s.id in seen:
            raise ScenarioDataError(f"{path}: product {s.title[:60]!r} appears twice in category {s.category!r}")
        seen[s.id] = s
    return scenarios


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
    key = (str(path.resolve()), _mtime(path), budget_factor)
    if key not in _CACHE:
        _CACHE[key] = load_json_products(path, source="amazon" if source == "amazon" else None,
                                         budget_factor=budget_factor)
    return _CACHE[key]


def _mtime(path: Path) -> float:
    if path.is_dir():
        return max((f.stat().st_mtime for f in path.glob("*.json")), default=0.0)
    return path.stat().st_mtime if path.exists() else 0.0


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
    key = (resolved, budget_factor) if path is None else (resolved, str(path.resolve()), _mtime(path), budget_factor)
    if key not in _SPLITS:
        _SPLITS[key] = split_scenarios(load_scenarios(source, budget_factor))
    return list(getattr(_SPLITS[key], split))
