"""A LoRA adapter generating as PEFT layers vs folded into its base's weights (``load_model(merge=True)``).

Both runs play the same ``--episodes`` held-out buyer episodes (builtin test split, the seller personas in turn,
greedy) through the same batched engine with the same adapter, loaded the two ways, in alternating order so
a machine that slows down mid-run slows both; each way's best of ``--repeats`` is kept. ``same_transcripts``
says how many games came out identical (a merge changes float rounding, which can flip a near-tie).
Evaluation, the Space's model seat and the frozen seller of RL load adapters merged; training keeps the
PEFT layers (their weights are what trains).

    python benchmarks/adapter_merge.py          # SmolLM2's SFT adapter -> artifacts/benchmarks/adapter_merge.json
"""

from __future__ import annotations

import argparse
import json
import time

from env.bargain.evaluation import episode_seed
from env.bargain.sources import get_split
from training.common.provenance import provenance, write_json
from training.engine.backends import SamplingConfig, TransformersBackend
from training.engine.models import load_model
from training.engine.rollout import LLMAgent
from training.games.bargain.rollout import play_episodes

SELLERS = ("neutral", "boulware", "conceder", "begging", "insulting", "unyielding", "tit_for_tat")


def _play(agent, backend, episodes) -> tuple[list, float, float, int]:
    backend.forward_seconds = 0.0
    start = time.perf_counter()
    sellers = [SELLERS[i % len(SELLERS)] for i in range(len(episodes))]
    records = play_episodes(episodes, agent, sellers, trained_role="buyer")
    wall = time.perf_counter() - start
    return records, wall, backend.forward_seconds, sum(sum(r.env_mask) for r in records)


def run(adapter: str, episodes: int, repeats: int, out: str | None) -> dict:
    t0 = time.perf_counter()
    scenarios = get_split("builtin", "test")
    eps = [(scenarios[i % len(scenarios)], episode_seed(i, 0, 1)) for i in range(episodes)]
    sampling = SamplingConfig(temperature=0.0)  # the evaluation's sampling (greedy, its reply length)
    ways = {}
    for merge in (False, True):
        model, tok = load_model(adapter, device="cpu", dtype="float32", merge=merge)
        backend = TransformersBackend(model, tok, sampling)
        ways["merged" if merge else "peft_layers"] = (LLMAgent(backend, "option_a"), backend)
    for agent, backend in ways.values():
        _play(agent, backend, eps[:2])  # warm-up (allocations, first-call costs)
    best: dict[str, dict] = {}
    records = {}
    for rep in range(repeats):
        for name, (agent, backend) in ways.items():
            recs, wall, fwd, tokens = _play(agent, backend, eps)
            records[name] = recs
            if name not in best or wall < best[name]["wall_s"]:
                best[name] = {"wall_s": wall, "forward_s": fwd, "generated_tokens": tokens,
                              "tokens_per_s": tokens / wall, "episodes_per_s": episodes / wall}
            print(f"repeat {rep + 1}: {name:11s} {wall:7.1f} s, {tokens / wall:6.1f} generated tokens/s", flush=True)
    same = sum(json.dumps(a.transcript) == json.dumps(b.transcript)
               for a, b in zip(records["peft_layers"], records["merged"]))
    results = {**best, "speedup": best["peft_layers"]["wall_s"] / best["merged"]["wall_s"], "same_transcripts": same,
               "episodes": episodes}
    config = {"adapter": adapter, "episodes": episodes, "repeats": repeats, "decoding": "greedy",
              "max_new_tokens": sampling.max_new_tokens, "dtype": "float32", "device": "cpu", "role": "buyer",
              "sellers": list(SELLERS), "scenarios": "builtin test split", "batch": "all episodes in lockstep"}
    seeds = {"episode_seeds": [episode_seed(i, 0, 1) for i in range(episodes)], "rule": "episode i: product i"}
    artifact = {"provenance": provenance(config, seeds, time.perf_counter() - t0), "results": results}
    if out:
        write_json(out, artifact)
    return artifact


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adapter", default="artifacts/checkpoints/sft-smollm2", help="a LoRA adapter folder")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="artifacts/benchmarks/adapter_merge.json")
    a = ap.parse_args()
    if a.episodes < 1 or a.repeats < 1:
        ap.error("--episodes and --repeats must be at least 1")
    r = run(a.adapter, a.episodes, a.repeats, a.out or None)["results"]
    print(f"merged {r['merged']['tokens_per_s']:.1f} vs PEFT layers {r['peft_layers']['tokens_per_s']:.1f} generated "
          f"tokens/s: {r['speedup']:.2f}x; {r['same_transcripts']}/{r['episodes']} identical games")
    if a.out:
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
