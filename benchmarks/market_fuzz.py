"""The market's action reader and ``step`` over arbitrary JSON, at scale: the long run of the hostile-input
property that the test suite runs small (``tests/test_hardening.py``: 400 examples, and 2,000 in its ``slow`` test).

Each example is a list of up to 8 hostile actions (real action names with arbitrary values, arbitrary objects,
text that is not JSON, duplicated keys, huge and negative numbers, floats for ints, unicode ids, nesting) played
into a fresh market (any task, seeds 0-50). Every action must be read and stepped without an exception, a refused
action must cost exactly the invalid-move penalty, every accepted one must validate against the action schema, and
the money and GPU-hour ledger must balance after each step. Hypothesis is derandomised, so a run is reproducible.

    python benchmarks/market_fuzz.py                      # 20,000 examples (~10 min on 2 cores); writes
                                                          # artifacts/benchmarks/market_fuzz.json
    python benchmarks/market_fuzz.py --examples 500 --out /tmp/fuzz.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's tests/, where the property lives

from tests.test_hardening import market_fuzz  # noqa: E402
from training.common.provenance import benchmark_artifact  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=20_000, help="generated examples (default 20,000)")
    parser.add_argument("--out", default="artifacts/benchmarks/market_fuzz.json", help="artifact path ('' = none)")
    args = parser.parse_args(argv)
    if args.examples < 1:
        parser.error(f"--examples must be at least 1, got {args.examples}")
    start = time.perf_counter()
    seen = market_fuzz(args.examples)  # raises (with hypothesis's shrunk example) on any failure
    wall = time.perf_counter() - start
    results = {**seen, "accepted": seen["actions"] - seen["refused"], "exceptions": 0,
               "examples_per_s": round(seen["examples"] / wall, 2)}
    print(f"market fuzz: {results}")
    return benchmark_artifact(args.out, {"examples": args.examples, "derandomize": True}, "hypothesis derandomize",
                              start, results)


if __name__ == "__main__":
    main()
