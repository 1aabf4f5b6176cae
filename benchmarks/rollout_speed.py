"""Batched rollout engine vs one-episode-at-a-time generation, same model, same episodes.

Both runs play the same ``--episodes`` (scenario, seed) pairs with the same model through the
same engine code; the sequential run calls it with one episode at a time (batch 1), the
engine run with all of them in lockstep. Decoding is greedy so both runs face the same
games; ``same_transcripts`` says how many came out identical (left padding can flip a
near-tie in float arithmetic). ``forward_fraction`` is the share of the engine's wall time
spent inside the model's forward passes (timed by forward hooks); the rest is overhead we own
(generate's bookkeeping, tokenisation, the environment, scripted players).

Each dtype is measured both ways (bfloat16 too where the CPU has AMX/AVX512-BF16 kernels: it
speeds up batched work but slows batch-1 decoding). The headline ``speedup`` compares each mode
at its own fastest dtype, so the baseline is never handicapped; ``by_dtype`` has every pair.

By default the model plays the seller against the scripted expert buyer: an untrained model
writes no valid move, and as a seller its invalid moves are blocked by the regulator, so every
episode still runs all its rounds (as a buyer it would lose on its first reply).

    python benchmarks/rollout_speed.py                     # tiny model -> artifacts/benchmarks/rollout.json
    python benchmarks/rollout_speed.py --model runs/sft --role buyer --out /tmp/rollout.json
"""

from __future__ import annotations

import argparse
import json
import time

from env.bargain.evaluation import episode_seed
from env.bargain.sources import get_split
from training.engine.backends import SamplingConfig, TransformersBackend
from training.engine.models import load_model
from training.common.provenance import provenance, write_json
from training.engine.rollout import LLMAgent
from training.games.bargain.rollout import play_episodes


def _run(agent, backend, episodes, role, opponent):
    backend.forward_seconds = 0.0
    start = time.perf_counter()
    buyer, seller = (agent, opponent) if role == "buyer" else (opponent, agent)
    records = play_episodes(episodes, buyer, seller, trained_role=role)
    wall = time.perf_counter() - start
    tokens = sum(sum(r.env_mask) for r in records)
    return records, wall, backend.forward_seconds, tokens


def measure(model: str, episodes: int, role: str, opponent: str, max_new_tokens: int, reasoning_mode: str,
            dtype: str) -> dict:
    """Sequential (batch 1) then engine (all episodes in lockstep) on one model and dtype."""
    m, tok = load_model(model, device="cpu", dtype=dtype)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens, think_tokens=max_new_tokens)
    backend = TransformersBackend(m, tok, sampling)
    agent = LLMAgent(backend, reasoning_mode)
    scenarios = get_split("builtin", "test")
    eps = [(scenarios[i % len(scenarios)], episode_seed(i, 0, 1)) for i in range(episodes)]
    _run(agent, backend, eps[:2], role, opponent)  # warm-up (allocations, first-call costs)
    seq_records, seq_wall, seq_fwd, seq_tokens = [], 0.0, 0.0, 0
    for ep in eps:
        r, w, f, n = _run(agent, backend, [ep], role, opponent)
        seq_records += r
        seq_wall, seq_fwd, seq_tokens = seq_wall + w, seq_fwd + f, seq_tokens + n
    eng_records, eng_wall, eng_fwd, eng_tokens = _run(agent, backend, eps, role, opponent)
    same = sum(json.dumps(a.transcript) == json.dumps(b.transcript) for a, b in zip(seq_records, eng_records))
    return {
        "dtype": dtype, "speedup": seq_wall / eng_wall, "forward_fraction": eng_fwd / eng_wall,
        "episodes_per_s": episodes / eng_wall, "sequential_episodes_per_s": episodes / seq_wall,
        "engine_wall_s": eng_wall, "sequential_wall_s": seq_wall, "engine_forward_s": eng_fwd,
        "sequential_forward_fraction": seq_fwd / seq_wall,
        "generated_tokens_engine": eng_tokens, "generated_tokens_sequential": seq_tokens,
        "tokens_per_s_engine": eng_tokens / eng_wall, "tokens_per_s_sequential": seq_tokens / seq_wall,
        "same_transcripts": same, "replies_per_episode": sum(r.metrics["replies"] for r in eng_records) / episodes,
        "parameters": sum(p.numel() for p in m.parameters()),
    }


def default_dtypes() -> list[str]:
    import torch  # noqa: PLC0415
    return ["float32", "bfloat16"] if torch.ops.mkldnn._is_mkldnn_bf16_supported() else ["float32"]


def run(model: str = "tiny", episodes: int = 32, role: str = "seller", opponent: str = "expert",
        max_new_tokens: int = 48, reasoning_mode: str = "option_a", dtypes: list[str] | None = None,
        out: str | None = "artifacts/benchmarks/rollout.json"):
    """Measure each dtype; the headline compares each mode at its fastest dtype."""
    t0 = time.perf_counter()
    dtypes = dtypes or default_dtypes()
    per_dtype = {d: measure(model, episodes, role, opponent, max_new_tokens, reasoning_mode, d) for d in dtypes}
    best_eng = max(per_dtype.values(), key=lambda r: r["episodes_per_s"])
    best_seq = max(per_dtype.values(), key=lambda r: r["sequential_episodes_per_s"])
    results = {
        "speedup": best_eng["episodes_per_s"] / best_seq["sequential_episodes_per_s"],
        "forward_fraction": best_eng["forward_fraction"],
        "episodes_per_s": best_eng["episodes_per_s"],
        "sequential_episodes_per_s": best_seq["sequential_episodes_per_s"],
        "engine_dtype": best_eng["dtype"], "sequential_dtype": best_seq["dtype"],
        "batch_size": episodes, "by_dtype": per_dtype,
    }
    config = {"model": model, "episodes": episodes, "role": role, "opponent": opponent, "decoding": "greedy",
              "max_new_tokens": max_new_tokens, "reasoning_mode": reasoning_mode, "device": "cpu", "dtypes": dtypes,
              "scenarios": "builtin test split"}
    seeds = {"episode_seeds": [episode_seed(i, 0, 1) for i in range(episodes)]}
    artifact = {"provenance": provenance(config, seeds, time.perf_counter() - t0), "results": results}
    if out:
        write_json(out, artifact)
    return artifact


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--role", choices=["buyer", "seller"], default="seller")
    ap.add_argument("--opponent", default="expert", help="scripted opponent name")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--reasoning-mode", choices=["option_a", "option_b"], default="option_a")
    ap.add_argument("--dtypes", default="", help="comma list of float32,bfloat16 (default: bfloat16 too where "
                    "the CPU supports it)")
    ap.add_argument("--out", default="artifacts/benchmarks/rollout.json")
    a = ap.parse_args()
    if a.episodes < 1 or a.max_new_tokens < 1:
        ap.error("--episodes and --max-new-tokens must be at least 1")
    dtypes = [d for d in a.dtypes.split(",") if d] or None
    if dtypes and set(dtypes) - {"float32", "bfloat16"}:
        ap.error("--dtypes takes float32 and/or bfloat16")
    r = run(a.model, a.episodes, a.role, a.opponent, a.max_new_tokens, a.reasoning_mode, dtypes, a.out or None)["results"]
    for d, x in r["by_dtype"].items():
        print(f"{d:9s} engine {x['episodes_per_s']:6.2f} episodes/s, sequential {x['sequential_episodes_per_s']:5.2f}: "
              f"{x['speedup']:.2f}x; forward fraction {x['forward_fraction']:.1%}; "
              f"{x['same_transcripts']}/{a.episodes} identical transcripts")
    print(f"each at its fastest dtype: engine ({r['engine_dtype']}) {r['episodes_per_s']:.2f} episodes/s vs sequential "
          f"({r['sequential_dtype']}) {r['sequential_episodes_per_s']:.2f}: speed-up {r['speedup']:.2f}x (target 5x); "
          f"forward fraction {r['forward_fraction']:.1%} (target 80%)")
    if a.out:
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
