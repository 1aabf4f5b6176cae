"""The evaluation harness: play buyer x seller cells over scenarios and seeds, summarise them.

Pure Python (no torch): ``training/evaluate.py`` is its command line, and the Space calls
it for live evaluations. Row keys follow the artifact contract (the keys the Space and the checks read).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Callable, Iterable, Sequence

from env.bargain.env import DEFAULT_MAX_TURNS, BargainEnv, EpisodeMetrics
from env.bargain.play import play_episode
from env.bargain.players.base import Player
from env.bargain.sources import Scenario

# Evaluation seeds live far from training seeds (training uses seeds below this).
EVAL_SEED_BASE = 1_000_000
SEEDS_PER_PRODUCT = 4  # the paper's 4 rollouts per test product
Z95 = 1.959964  # normal approximation for the 95% interval of a mean


def episode_seed(product_index: int, k: int, seeds_per_product: int, base: int = EVAL_SEED_BASE) -> int:
    return base + product_index * seeds_per_product + k


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(metrics: Sequence[EpisodeMetrics]) -> dict:
    """Aggregate episodes into the contract's row fields (without the buyer/seller labels)."""
    n = len(metrics)
    if n == 0:
        return {"episodes": 0, "reward_mean": None, "reward_std": None, "reward_ci95": None, "deal_rate": None,
                "bargained_ratio": None, "first_offer_ratio": None, "overshoot_rate": None,
                "format_error_rate": None, "invalid_move_rate": None, "turns_mean": None, "end_reasons": {},
                "thought_claims": 0, "thought_consistency": None}
    rewards = [m.reward for m in metrics]
    mean = sum(rewards) / n
    std = statistics.stdev(rewards) if n > 1 else 0.0
    half = Z95 * std / math.sqrt(n)
    return {
        "episodes": n,
        "reward_mean": mean,
        "reward_std": std,
        "reward_ci95": [mean - half, mean + half],
        "deal_rate": sum(m.deal for m in metrics) / n,
        "bargained_ratio": _mean([m.bargained_ratio for m in metrics if m.deal]),
        "first_offer_ratio": _mean([m.first_offer_ratio for m in metrics if m.first_offer_ratio is not None]),
        "overshoot_rate": sum(m.overshoot for m in metrics) / n,
        "format_error_rate": sum(m.format_errors > 0 for m in metrics) / n,
        "invalid_move_rate": sum(m.invalid_moves > 0 for m in metrics) / n,
        "turns_mean": sum(m.turns for m in metrics) / n,
        "end_reasons": dict(sorted(Counter(m.end_reason for m in metrics).items())),
        **thought_consistency(metrics),
    }


def thought_consistency(metrics: Sequence[EpisodeMetrics]) -> dict:
    """``thought_claims``: the ask/offer-vs-budget comparisons the buyer's Thoughts stated in these episodes;
    ``thought_consistency``: the share of them that were true (None when none was stated)."""
    claims = sum(m.thought_claims for m in metrics)
    return {"thought_claims": claims,
            "thought_consistency": sum(m.thought_claims_true for m in metrics) / claims if claims else None}


def summarize_row(metrics: Sequence[EpisodeMetrics], **labels) -> dict:
    """A contract row: labels, the overall summary, and the mutual/conflicting split."""
    row = {**labels, **summarize(metrics)}
    row["by_interest"] = {
        "mutual": summarize([m for m in metrics if m.mutual_interest]),
        "conflicting": summarize([m for m in metrics if not m.mutual_interest]),
    }
    return row


def play_cell(scenarios: Sequence[Scenario], make_buyer: Callable[[], Player], make_seller: Callable[[], Player],
              seeds_per_product: int, max_turns: int = DEFAULT_MAX_TURNS, seed_base: int = EVAL_SEED_BASE,
              keep_transcripts: int = 0, on_product: Callable[[], None] | None = None
              ) -> tuple[list[EpisodeMetrics], list[dict]]:
    """Play every scenario ``seeds_per_product`` times with fresh players; same seeds in every cell."""
    env = BargainEnv(max_turns)
    buyer, seller = make_buyer(), make_seller()
    if hasattr(buyer, "watch"):  # the oracle (an upper bound) is told the seller's private floor
        buyer.watch(seller)
    metrics: list[EpisodeMetrics] = []
    transcripts: list[dict] = []
    for i, scenario in enumerate(scenarios):
        for k in range(seeds_per_product):
            seed = episode_seed(i, k, seeds_per_product, seed_base)
            play_episode(scenario, buyer, seller, seed, max_turns, env)
            metrics.append(env.metrics())
            if len(transcripts) < keep_transcripts:
                transcripts.append(env.transcript())
        if on_product is not None:
            on_product()
    return metrics, transcripts


def mix_rows(cells: dict[tuple[str, str], list[EpisodeMetrics]], split: str, dataset: str) -> list[dict]:
    """One ``seller: "mix"`` row per buyer: its episodes against every seller, pooled."""
    buyers: dict[str, list[EpisodeMetrics]] = {}
    for (buyer, _seller), metrics in cells.items():
        buyers.setdefault(buyer, []).extend(metrics)
    return [summarize_row(m, buyer=b, seller="mix", split=split, dataset=dataset) for b, m in buyers.items()]


def format_table(rows: Iterable[dict], value: str = "reward_mean") -> str:
    """A buyers x sellers text table of ``value`` (reward and deal rate by default)."""
    rows = list(rows)
    buyers = list(dict.fromkeys(r["buyer"] for r in rows))
    sellers = list(dict.fromkeys(r["seller"] for r in rows))
    cell = {(r["buyer"], r["seller"]): r for r in rows}
    width = max(12, *(len(s) + 2 for s in sellers))
    lines = [f"{value} / deal_rate".ljust(18) + "".join(s.rjust(width) for s in sellers)]
    for b in buyers:
        parts = []
        for s in sellers:
            r = cell.get((b, s))
            parts.append("—".rjust(width) if r is None or r[value] is None else
                         f"{r[value]:+.3f}/{r['deal_rate']:.2f}".rjust(width))
        lines.append(b.ljust(18) + "".join(parts))
    return "\n".join(lines)
