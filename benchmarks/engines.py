"""Generation engines on this CPU, in one run: which one the model seat, the evaluations and the RL
rollouts should use, measured on the game's real contexts.

The contexts are the model seat's situation in builtin test games (the buyer's whole conversation so far, its
replies written by the rule expert through the model's own chat template, every seller of the mix in turn), for
``--model`` with its adapter merged (the shipped SmolLM2 GRPO buyer by default). For each engine:

* **batch 1, cold**: one reply of exactly ``--new`` tokens (no stop token: every engine writes the same length)
  after the context at turn ``--turn``, nothing of it cached; median and spread over ``--repeats`` games;
* **batch 1, seat**: the same reply as the Space's seat meets it: the engine has just answered the same game's
  previous turn, so an engine that keeps a conversation's state (transformers' prefix cache, llama.cpp's kept
  KV states) feeds only the previous reply and the seller's message; an engine without one (CTranslate2) feeds
  the whole context again;
* **batch 32**: ``--batch`` contexts at once, ``--new`` tokens each, cold: generated tokens per second;
* **tokens**: greedy replies (with the stop token) of each engine against transformers fp32 on ``--check``
  contexts from every turn of the games: how many rows are identical token for token.

Engines: transformers ``generate`` fp32 (the reference and fallback, as the rollout engine calls it), llama.cpp
fp32 and bf16 (``training/engine/llamacpp.py``, GGUF from llama.cpp's own converter), each one row at a time and
``batched`` (32 conversations decoded together), CTranslate2 fp32 and int8
(``training/engine/ct2.py``, its own converter), with ``--ct2-threads`` and ``--ct2-chunks`` variants; an engine
not installed is skipped and said. Engines are interleaved (round-robin per repeat) so a busier moment hurts all
alike.

    python benchmarks/engines.py                          # -> artifacts/benchmarks/engines.json
    python benchmarks/engines.py --model artifacts/checkpoints/grpo-tiny --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

SELLERS = ("neutral", "boulware", "conceder", "tit_for_tat", "begging", "insulting", "unyielding")


def games(tokenizer, n: int, turns: int = 6) -> list[list[list[int]]]:
    """The buyer seat's token stream before each of its replies (up to ``turns``) in ``n`` builtin test games
    (expert replies, the seller mix in turn); games that end before turn 2 are skipped."""
    from env.bargain.play import Match  # noqa: PLC0415
    from env.bargain.players import make_player  # noqa: PLC0415
    from env.bargain.sources import get_split  # noqa: PLC0415
    from training.engine.backends import SamplingConfig  # noqa: PLC0415
    from training.engine.rollout import LLMAgent  # noqa: PLC0415
    from training.games.bargain.rollout import BargainSeat  # noqa: PLC0415

    class Stub:  # a backend stand-in: building a seat's stream needs the tokenizer only
        def __init__(self, tok):
            self.tokenizer, self.sampling = tok, SamplingConfig(temperature=0.0)

    agent = LLMAgent(Stub(tokenizer), "option_a")
    out, scenarios, k = [], get_split("builtin", "test"), 0
    while len(out) < n and k < 20 * n:
        seat = BargainSeat(agent, "buyer", None, teacher=make_player("buyer", "expert"))
        seen: list[list[int]] = []

        class Recorder:
            name, role = "recorder", "buyer"

            def reset(self, obs, rng=None):
                seat.teacher.reset(obs, rng)

            def act(self, obs):
                seat.observe(obs)
                if len(seen) < turns:
                    seen.append(list(seat.ids))
                return seat.teach(obs)

        match = Match(scenarios[k % len(scenarios)], Recorder(), make_player("seller", SELLERS[k % len(SELLERS)]),
                      1_000_000 + k, 6)
        match.advance()
        if len(seen) >= 2:
            out.append(seen)
        k += 1
    return out


def contexts(tokenizer, n: int, turn: int) -> list[list[int]]:
    """The buyer seat's stream at ``turn`` (or the game's last turn before it) of ``n`` builtin test games."""
    return [g[min(turn, len(g)) - 1] for g in games(tokenizer, n)]


def engines(model, tok, threads: list[int], chunks: list[int]) -> dict:
    from training.engine.backends import SamplingConfig, TransformersBackend  # noqa: PLC0415
    from training.engine.export import EngineUnavailable  # noqa: PLC0415

    greedy = SamplingConfig(temperature=0.0)
    made = {"transformers fp32": TransformersBackend(model, tok, greedy)}
    try:
        from training.engine.llamacpp import LlamaCppBackend  # noqa: PLC0415
        for precision in ("float32", "bfloat16"):
            made[f"llamacpp {precision}"] = LlamaCppBackend(model, tok, greedy, precision)
            made[f"llamacpp {precision} batched"] = LlamaCppBackend(model, tok, greedy, precision, slots=32,
                                                                    batched=True)
    except EngineUnavailable as exc:
        print(f"skipped llama.cpp: {exc}")
    from training.engine.ct2 import CTranslate2Backend  # noqa: PLC0415
    for compute in ("float32", "int8"):
        for t in threads:
            for chunk in chunks:
                name = f"ctranslate2 {compute} threads={t}" + (f" chunks of {chunk}" if chunk else "")
                try:
                    made[name] = CTranslate2Backend(model, tok, greedy, compute, t, max_batch_size=chunk)
                except EngineUnavailable as exc:
                    print(f"skipped ctranslate2: {exc}")
                    return made
    return made


def seat_reply(backend, previous: list[int], context: list[int], new: int, never: list[int]) -> float:
    """Seconds for the reply at ``context`` right after the engine answered ``previous`` (the game's last turn)."""
    import time  # noqa: PLC0415

    if getattr(backend, "prefix_cache", False):  # transformers: the conversation's cache, as the rollout keeps it
        backend.generate_ids([previous], 1, never, caches=[None])
        kept = backend.last_caches
        t0 = time.perf_counter()
        backend.generate_ids([context], new, never, caches=kept)
    else:  # llama.cpp keeps its own states; CTranslate2 keeps none
        backend.generate_ids([previous], 1, never)
        t0 = time.perf_counter()
        backend.generate_ids([context], new, never)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="artifacts/checkpoints/grpo-smollm2")
    ap.add_argument("--turn", type=int, default=5)
    ap.add_argument("--new", type=int, default=64, help="tokens each reply writes")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5, help="batch-1 replies per engine")
    ap.add_argument("--batch-repeats", type=int, default=1, help="batch runs per engine")
    ap.add_argument("--check", type=int, default=48, help="contexts (every turn of the games) whose greedy tokens "
                                                         "are compared")
    ap.add_argument("--ct2-threads", default="2", help="CTranslate2 intra_threads values to try")
    ap.add_argument("--ct2-chunks", default="8", help="CTranslate2 max_batch_size values to try (0: one batch)")
    ap.add_argument("--out", default="artifacts/benchmarks/engines.json")
    args = ap.parse_args(argv)

    import torch  # noqa: PLC0415

    from training.common.provenance import benchmark_artifact  # noqa: PLC0415
    from training.engine.models import load_model  # noqa: PLC0415

    start = time.perf_counter()
    torch.manual_seed(0)
    model, tok = load_model(args.model, device="cpu", dtype="float32", merge=True)
    played = games(tok, max(args.batch, args.repeats, args.check // 2))
    at = [min(args.turn, len(g)) - 1 for g in played]
    ctx = [g[i] for g, i in zip(played, at)]
    previous = [g[i - 1] for g, i in zip(played, at)]
    checked = [c for g in played for c in g][: args.check]
    lengths = [len(c) for c in ctx]
    made = engines(model, tok, [int(t) for t in args.ct2_threads.split(",")],
                   [int(c) for c in args.ct2_chunks.split(",")])
    never = [tok.vocab_size + 10]  # a stop id no engine can write: every reply is exactly --new tokens
    for backend in made.values():  # warm up (first-call allocations, lazy loading)
        backend.generate_ids([ctx[-1]], 4, never)
    one = {name: [] for name in made}
    seat = {name: [] for name in made}
    for r in range(args.repeats):
        for name, backend in made.items():
            t0 = time.perf_counter()
            c = backend.generate_ids([ctx[r]], args.new, never)[0]
            one[name].append(time.perf_counter() - t0)
            assert len(c.ids) == args.new, (name, len(c.ids))
            seat[name].append(seat_reply(backend, previous[r], ctx[r], args.new, never))
    many = {name: [] for name in made}
    for _ in range(args.batch_repeats):
        for name, backend in made.items():
            t0 = time.perf_counter()
            out = backend.generate_ids(ctx[: args.batch], args.new, never)
            many[name].append(sum(len(c.ids) for c in out) / (time.perf_counter() - t0))
    stop = [tok.eos_token_id]
    reference = made["transformers fp32"].generate_ids(checked, args.new, stop)
    results = []
    for name, backend in made.items():
        replies = backend.generate_ids(checked, args.new, stop)
        same = sum(a.ids == b.ids for a, b in zip(replies, reference))
        results.append({"engine": name, "batch1_seat_reply_s_median": statistics.median(seat[name]),
                        "batch1_seat_reply_s": [round(x, 3) for x in seat[name]],
                        "batch1_reply_s_median": statistics.median(one[name]),
                        "batch1_reply_s": [round(x, 3) for x in one[name]],
                        f"batch{args.batch}_tokens_per_s_median": statistics.median(many[name]),
                        f"batch{args.batch}_tokens_per_s": [round(x, 1) for x in many[name]],
                        "greedy_rows_equal_to_transformers_fp32": same, "rows_compared": len(reference),
                        # its tokens can depend on which rows share a call (several-row kernels add in another order)
                        "batch_invariant": not getattr(backend, "batched", False)})
        print(f"{name:34s} batch 1: seat {statistics.median(seat[name]):.2f} s, cold "
              f"{statistics.median(one[name]):.2f} s / {args.new} tokens; batch {args.batch}: "
              f"{statistics.median(many[name]):.0f} tokens/s; greedy rows equal: {same}/{len(reference)}", flush=True)
    base = results[0]
    for r in results:
        for key in ("batch1_seat_reply_s_median", "batch1_reply_s_median"):
            r[key.replace("_s_median", "_speedup_vs_transformers")] = base[key] / r[key]
        r[f"batch{args.batch}_speedup_vs_transformers"] = (r[f"batch{args.batch}_tokens_per_s_median"]
                                                          / base[f"batch{args.batch}_tokens_per_s_median"])
    return benchmark_artifact(args.out, vars(args), {"contexts": "builtin test products, seeds 1,000,000 + k, "
                                                                  "the seller mix in turn"}, start,
                              {"context_tokens": {"min": min(lengths), "median": statistics.median(lengths),
                                                  "max": max(lengths)},
                               "seat_new_tokens_median": statistics.median(len(c) - len(p)
                                                                           for c, p in zip(ctx, previous)),
                               "checked_context_tokens": {"min": min(map(len, checked)), "max": max(map(len, checked))},
                               "engines": results, "torch_threads": torch.get_num_threads(),
                               "cpu": cpu_name()})


def cpu_name() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


if __name__ == "__main__":
    main()
