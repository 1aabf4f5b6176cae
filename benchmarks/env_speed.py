"""Scripted-episode throughput of the bilateral game, side by side with TextArena.

What it measures, in one run on one machine:

* ``bargain_simple``: Haggle's ``BargainEnv`` played by two constant-string players (a buyer
  that always writes ``[BUY] $1``, a seller that always writes ``[SELL] $99,999``), i.e. the
  environment's own cost: parsing, rules, observations. Episodes run to the turn limit.
* ``bargain_expert_mix``: the rule-based expert against the neutral seller and every persona,
  the realistic workload (players compose their Thought and Talk text).
* ``market_<task>``: the GPU market, the rule expert in seat 0 and the world's archetypes in the
  other seats (every player's action is one step; target 20,000 steps/s).
* ``textarena_*``: TextArena 0.7.4 ``SimpleNegotiation-v0`` played by equally simple
  constant-string players (``[Offer: 1 Wheat -> 1 Wood]`` / ``[Accept]``):
  ``fresh`` builds the registered env (with its default wrappers) for every episode,
  ``reused`` resets one env between episodes as a Gym user would (its wrappers keep the
  history across resets, so per-step cost grows), ``raw`` is the unwrapped env.

Each configuration runs ``--repeats`` times; the best run counts. The headline ratio is
``bargain_simple`` steps/s over the faster of TextArena's ``fresh`` and ``reused`` (target 2x).

    python benchmarks/env_speed.py                # writes artifacts/benchmarks/env.json
    python benchmarks/env_speed.py --episodes 200 --out /tmp/env.json
"""

from __future__ import annotations

import argparse
import time

from env.bargain.env import BargainEnv
from env.bargain.play import play_episode
from env.bargain.players import SELLERS, make_player
from env.bargain.sources import get_split
from training.common.provenance import provenance, write_json

TARGET_SPEEDUP = 2.0
TARGET_MARKET_STEPS_PER_S = 20_000


class ConstantPlayer:
    """As simple as a player can be: the same protocol text every time."""

    def __init__(self, role: str, text: str):
        self.role, self.name, self.text = role, f"constant_{role}", text

    def reset(self, obs, rng) -> None:
        pass

    def act(self, obs) -> str:
        return self.text


def bench_bargain_simple(episodes: int) -> tuple[int, int, float]:
    scenarios = get_split("builtin", "all")
    buyer = ConstantPlayer("buyer", "Talk: How about this?\nAction: [BUY] $1")
    seller = ConstantPlayer("seller", "Talk: Too low.\nAction: [SELL] $99,999")
    env = BargainEnv()
    steps = 0
    start = time.perf_counter()
    for i in range(episodes):
        play_episode(scenarios[i % len(scenarios)], buyer, seller, i, env=env)
        steps += env.replies
    return episodes, steps, time.perf_counter() - start


def bench_bargain_expert_mix(episodes: int) -> tuple[int, int, float]:
    scenarios = get_split("builtin", "all")
    buyer = make_player("buyer", "expert")
    sellers = [make_player("seller", name) for name in SELLERS]
    env = BargainEnv()
    steps = 0
    start = time.perf_counter()
    for i in range(episodes):
        play_episode(scenarios[i % len(scenarios)], buyer, sellers[i % len(sellers)], i, env=env)
        steps += env.replies
    return episodes, steps, time.perf_counter() - start


def bench_market(episodes: int, task: str) -> tuple[int, int, float]:
    from env.market import MarketEnv, make_policy, play_market  # noqa: PLC0415

    env, steps = MarketEnv(), 0
    start = time.perf_counter()
    for i in range(episodes):
        play_market(task, i, make_policy("expert"), env=env)
        steps += len(env.transcript)
    return episodes, steps, time.perf_counter() - start


def _textarena_players():
    offer, accept = "I propose a trade. [Offer: 1 Wheat -> 1 Wood]", "Sounds fair. [Accept]"
    return lambda k: offer if k % 2 == 0 else accept


def bench_textarena(episodes: int, mode: str) -> tuple[int, int, float]:
    import textarena as ta  # noqa: PLC0415  (benchmark-only dependency)

    player = _textarena_players()
    reused = ta.make("SimpleNegotiation-v0") if mode == "reused" else None
    steps = 0
    start = time.perf_counter()
    for i in range(episodes):
        if mode == "fresh":
            env = ta.make("SimpleNegotiation-v0")
        elif mode == "raw":
            env = ta.make("SimpleNegotiation-v0").env.env
        else:
            env = reused
        env.reset(num_players=2, seed=i)
        done, k = False, 0
        while not done:
            _pid, _obs = env.get_observation()
            done, _info = env.step(player(k))
            k += 1
        env.close()
        steps += k
    return episodes, steps, time.perf_counter() - start


def measure(fn, episodes: int, repeats: int, *args) -> dict:
    best = None
    for _ in range(repeats):
        n, steps, seconds = fn(episodes, *args)
        if best is None or seconds < best[2]:
            best = (n, steps, seconds)
    n, steps, seconds = best
    return {"episodes": n, "steps": steps, "seconds": round(seconds, 4), "episodes_per_s": n / seconds,
            "steps_per_s": steps / seconds, "us_per_step": 1e6 * seconds / steps}


def run(episodes: int = 2000, repeats: int = 3, out: str | None = "artifacts/benchmarks/env.json") -> dict:
    start = time.perf_counter()
    games = {
        "bargain_simple": measure(bench_bargain_simple, episodes, repeats),
        "bargain_expert_mix": measure(bench_bargain_expert_mix, episodes, repeats),
    }
    from env.market import TASKS  # noqa: PLC0415
    for task in TASKS:
        games[f"market_{task}"] = measure(bench_market, episodes, repeats, task)
    try:
        import textarena  # noqa: F401, PLC0415
    except ImportError:
        print("textarena is not installed (pip install -r requirements-dev.txt): skipping the comparison")
    else:
        for mode in ("fresh", "reused", "raw"):
            games[f"textarena_simple_negotiation_{mode}"] = measure(bench_textarena, episodes, repeats, mode)
    results = {
        "episodes_per_s": {k: v["episodes_per_s"] for k, v in games.items()},
        "steps_per_s": {k: v["steps_per_s"] for k, v in games.items()},
        "games": games,
        "target_speedup": TARGET_SPEEDUP,
        "market_target_steps_per_s": TARGET_MARKET_STEPS_PER_S,
        "market_target_met": all(v["steps_per_s"] >= TARGET_MARKET_STEPS_PER_S
                                 for k, v in games.items() if k.startswith("market_")),
    }
    ta_modes = [games[k]["steps_per_s"] for k in games if k.endswith(("_fresh", "_reused"))]
    if ta_modes:
        results["speedup_vs_textarena"] = games["bargain_simple"]["steps_per_s"] / max(ta_modes)
        results["speedup_vs_textarena_raw"] = (games["bargain_simple"]["steps_per_s"]
                                               / games["textarena_simple_negotiation_raw"]["steps_per_s"])
        results["target_met"] = results["speedup_vs_textarena"] >= TARGET_SPEEDUP
    artifact = {"provenance": provenance({"episodes": episodes, "repeats": repeats}, {"episode_seeds": f"0..{episodes - 1}", "textarena_seeds": f"0..{episodes - 1}"},
                                         time.perf_counter() - start), "results": results}
    if out:
        write_json(out, artifact)
    return artifact


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=2000, help="episodes per configuration and repeat")
    ap.add_argument("--repeats", type=int, default=3, help="repeats per configuration (best counts)")
    ap.add_argument("--out", default="artifacts/benchmarks/env.json", help="artifact path ('' to skip)")
    args = ap.parse_args()
    if args.episodes < 1 or args.repeats < 1:
        ap.error("--episodes and --repeats must be at least 1")
    artifact = run(args.episodes, args.repeats, args.out or None)
    r = artifact["results"]
    print(f"{'game':42s}{'episodes/s':>12s}{'steps/s':>12s}{'us/step':>10s}")
    for name, g in r["games"].items():
        print(f"{name:42s}{g['episodes_per_s']:12.0f}{g['steps_per_s']:12.0f}{g['us_per_step']:10.1f}")
    if "speedup_vs_textarena" in r:
        print(f"\nspeed-up over TextArena (best of fresh/reused): {r['speedup_vs_textarena']:.2f}x "
              f"(target {TARGET_SPEEDUP}x: {'met' if r['target_met'] else 'NOT met'}); "
              f"over its raw unwrapped env: {r['speedup_vs_textarena_raw']:.2f}x")
    if args.out:
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
