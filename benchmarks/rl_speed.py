"""RL on SmolLM2 at this machine's limits: rollouts and one GRPO step, phase by phase, against rooflines.

In one run, for the SmolLM2 SFT buyer (``--model``) against the scripted seller mix:

* **rooflines** measured here: matmul FLOP/s in float32 and bfloat16 (a 2048 x 2048 product, best of
  10) and memory bandwidth (a 512 MiB copy, bytes read plus written, best of 5);
* **raw generate**: ``model.generate`` on ``--batch`` rows of ``--prompt`` random tokens, prefill
  (one new token) and decoding (``--new`` more tokens) timed apart, in float32 and under bfloat16
  autocast, and decoding at several batch sizes;
* **engine**: ``--episodes`` builtin test episodes, greedy, through the rollout engine in lockstep
  (``model.generate`` per turn, as commit 034fe2e did) and with continuous batching: generated tokens/s,
  episodes/s, decoding steps and rows per step;
* **GRPO step**: one step of ``training/grpo.py`` on ``--episodes`` episodes (8 per group, ``--beta``
  0.04, LoRA from the SFT adapter, as the SmolLM2 recipe trains), split by hooks on TRL's trainer
  into generation (the rollout function), reference forward, policy forward+backward and optimizer;
* **training precision**: one LoRA forward+backward of the policy on a batch of episodes' length in
  float32 and under bfloat16 autocast.

Every phase is reported with its fraction of the roofline that bounds it: prefill and training FLOPs
(2 N per token forward, 4 N forward+backward with LoRA, N = parameters) against the matmul peak;
decoding's bytes per step (the weights, once per step) against the copy bandwidth.

``--compare PATH`` runs the engine and the GRPO step of another checkout (``git worktree add /tmp/base
034fe2e``) in the same run, each in a child process importing that checkout's code.

    python benchmarks/rl_speed.py --compare /tmp/base          # -> artifacts/benchmarks/rl.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from training.engine.precision import matmul_flops  # the same measurement --precision auto uses

ROOT = Path(__file__).resolve().parents[1]

SELLERS = ["neutral", "boulware", "conceder", "tit_for_tat"]
# micro-batches of 4 episodes: 8 whole SmolLM2 episodes (up to ~1,500 tokens each) in one forward and backward
# without gradient checkpointing outgrew this machine's 24 GiB
GRPO_FLAGS = ["--max_steps", "1", "--per_device_train_batch_size", "4", "--num_generations", "8", "--beta", "0.04",
              "--save_strategy", "no", "--logging_steps", "1"]


def copy_bandwidth(mib: int = 512, repeats: int = 5) -> float:
    import torch  # noqa: PLC0415

    src = torch.ones(mib * 2 ** 18)  # float32
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(_timed(lambda: dst.copy_(src)) for _ in range(repeats))
    return 2 * src.numel() * 4 / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class _Clock:
    """A ``generate`` streamer that only notes when each step's tokens arrive (the first call is the prompt)."""

    def __init__(self):
        self.times: list[float] = []

    def put(self, value) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def raw_generate(model, tok, batch: int, prompt: int, new: int, rooflines: dict) -> dict:
    """Prefill and decoding of ``model.generate`` in each precision (timed apart by a streamer within
    one call), and decoding at other batch sizes."""
    import torch  # noqa: PLC0415

    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    gen = torch.Generator().manual_seed(0)

    def run(rows: int, tokens: int, dtype: str) -> tuple[float, float]:
        """(prefill seconds, decoding seconds per step) of one call."""
        ids = torch.randint(100, len(tok) - 1, (rows, prompt), generator=gen)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16" else torch.inference_mode()
        clock = _Clock()
        with torch.inference_mode(), ctx:
            start = time.perf_counter()
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=tokens,
                           min_new_tokens=tokens, pad_token_id=0, streamer=clock)
        t = clock.times  # [prompt, token 1 (after prefill), token 2, ...]
        return t[1] - start, (t[-1] - t[1]) / (len(t) - 2)

    out = {"batch": batch, "prompt_tokens": prompt, "new_tokens": new}
    for dtype in ("float32", "bfloat16"):
        run(2, 3, dtype)  # warm-up
        prefill, decode = run(batch, new + 1, dtype)
        peak = rooflines[f"matmul_{dtype}_flops"]
        out[dtype] = {"prefill_s": prefill, "prefill_tokens_per_s": batch * prompt / prefill,
                      "prefill_fraction_of_matmul_peak": 2 * params * batch * prompt / prefill / peak,
                      "decode_ms_per_step": 1000 * decode, "decode_tokens_per_s": batch / decode,
                      "decode_fraction_of_bandwidth": weight_bytes / decode / rooflines["copy_bytes_per_s"]}
        print(f"generate {dtype}: {out[dtype]}", file=sys.stderr)
    out["decode_by_batch_float32"] = {}
    for rows in (8, 16, 32, 64):
        _, decode = run(rows, new // 2 + 1, "float32")
        out["decode_by_batch_float32"][rows] = {"ms_per_step": 1000 * decode, "tokens_per_s": rows / decode}
        print(f"decode batch {rows}: {1000 * decode:.0f} ms/step", file=sys.stderr)
    return out


def training_precision(model, tok, rows: int, length: int, rooflines: dict) -> dict:
    """One LoRA forward+backward on ``rows`` x ``length`` tokens in float32 and under bf16 autocast."""
    import torch  # noqa: PLC0415
    from peft import LoraConfig, get_peft_model  # noqa: PLC0415

    params = sum(p.numel() for p in model.parameters())
    lora = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    lora.train()
    ids = torch.randint(100, len(tok) - 1, (rows, length), generator=torch.Generator().manual_seed(1))
    out = {"rows": rows, "tokens_per_row": length}

    def step(dtype):
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16" else torch.enable_grad()
        with ctx:
            loss = lora(input_ids=ids, labels=ids).loss
        loss.backward()
        lora.zero_grad()

    for dtype in ("float32", "bfloat16"):
        step(dtype)
        seconds = min(_timed(lambda: step(dtype)) for _ in range(2))
        out[dtype] = {"seconds": seconds, "tokens_per_s": rows * length / seconds,
                      "fraction_of_matmul_peak": 4 * params * rows * length / seconds /
                      rooflines[f"matmul_{dtype}_flops"]}
        print(f"training {dtype}: {out[dtype]}", file=sys.stderr)
    lora.unload()
    return out


# ---- children: run inside a checkout (this one or --compare's), importing its code ----

def child_engine(model_path: str, episodes: int, continuous: bool) -> dict:
    try:
        from training.engine.backends import SamplingConfig, TransformersBackend  # noqa: PLC0415
        from training.engine.models import load_model  # noqa: PLC0415
        from training.engine.rollout import LLMAgent  # noqa: PLC0415
        from training.games.bargain.rollout import play_episodes  # noqa: PLC0415
    except ImportError:  # the layout before the redesign (commit 034fe2e)
        from training.backends import SamplingConfig, TransformersBackend  # noqa: PLC0415
        from training.models import load_model  # noqa: PLC0415
        from training.rollout import LLMAgent, play_episodes  # noqa: PLC0415
    from env.bargain.evaluation import episode_seed  # noqa: PLC0415
    try:
        from env.bargain.sources import get_split  # noqa: PLC0415
    except ImportError:
        from env.bargain.scenarios import get_split  # noqa: PLC0415

    model, tok = load_model(model_path, device="cpu")
    backend = TransformersBackend(model, tok, SamplingConfig(temperature=0.0))
    backend.continuous = continuous  # the checkout before continuous batching has no such switch: lockstep
    agent = LLMAgent(backend, "option_a")
    scenarios = get_split("builtin", "test")
    eps = [(scenarios[i % len(scenarios)], episode_seed(i, 0, 1)) for i in range(episodes)]
    sellers = [SELLERS[i % len(SELLERS)] for i in range(episodes)]
    play_episodes(eps[:2], agent, sellers[:2])  # warm-up
    backend.forward_seconds = 0.0
    steps0 = getattr(backend, "decode_steps", 0)
    start = time.perf_counter()
    records = play_episodes(eps, agent, sellers)
    wall = time.perf_counter() - start
    tokens = sum(sum(r.env_mask) for r in records)
    return {"wall_s": wall, "episodes": episodes, "episodes_per_s": episodes / wall, "generated_tokens": tokens,
            "tokens_per_s": tokens / wall, "replies_per_episode": sum(r.metrics["replies"] for r in records) / episodes,
            "decode_steps": getattr(backend, "decode_steps", 0) - steps0 or None,
            "mean_reward": sum(r.reward for r in records) / episodes, "weights_dtype": str(next(model.parameters()).dtype)}


def child_grpo(model_path: str, episodes: int, workdir: str, extra: list[str] | None = None) -> dict:
    """One GRPO step of this checkout's training/grpo.py, timed phase by phase with hooks on TRL."""
    from torch import is_grad_enabled as torch_grad  # noqa: PLC0415
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook  # noqa: PLC0415
    from trl import GRPOTrainer  # noqa: PLC0415

    t = {"generation": 0.0, "reference": 0.0, "policy": 0.0, "optimizer": 0.0, "score": 0.0, "start": None,
         "end": None, "tokens": 0, "trained_tokens": 0}
    init = GRPOTrainer.__init__

    def timed_init(self, *a, **k):
        init(self, *a, **k)
        rollout = self.rollout_func
        # the trainer's own log-prob method (a subclass's override included), timed once per call: a no-grad call is
        # the reference forward (or the old policy's), whatever path the subclass takes inside it
        logps = self._get_per_token_logps_and_entropies

        def timed_logps(*a, **k):
            start = time.perf_counter()
            out = logps(*a, **k)
            if not torch_grad():
                t["reference"] += time.perf_counter() - start
            return out
        self._get_per_token_logps_and_entropies = timed_logps

        def timed_rollout(prompts, trainer):
            t["start"] = t["start"] or time.perf_counter()
            start = time.perf_counter()
            out = rollout(prompts, trainer)
            t["generation"] += time.perf_counter() - start
            t["tokens"] += sum(sum(m) for m in out["env_mask"])
            t["trained_tokens"] += sum(len(p) + len(c) for p, c in zip(out["prompt_ids"], out["completion_ids"]))
            return out
        self.rollout_func = timed_rollout

    score = GRPOTrainer._generate_and_score_completions

    def timed_score(self, *a, **k):
        start = time.perf_counter()
        out = score(self, *a, **k)
        t["score"] += time.perf_counter() - start
        return out

    step = GRPOTrainer.training_step

    def timed_step(self, *a, **k):
        start = time.perf_counter()
        out = step(self, *a, **k)
        t["policy"] += time.perf_counter() - start
        return out

    marks = {}
    register_optimizer_step_pre_hook(lambda *_: marks.update(opt=time.perf_counter()))

    def after_opt(*_):
        t["optimizer"] += time.perf_counter() - marks["opt"]
        t["end"] = time.perf_counter()
    register_optimizer_step_post_hook(after_opt)
    GRPOTrainer.__init__ = timed_init
    GRPOTrainer._generate_and_score_completions, GRPOTrainer.training_step = timed_score, timed_step
    sys.path.insert(0, str(Path.cwd() / "training"))
    import grpo  # noqa: PLC0415  (the checkout's script, as the pipeline runs it)

    argv = ["--model_name_or_path", model_path, "--output_dir", f"{workdir}/grpo", "--curve", f"{workdir}/curve.json",
            "--gradient_accumulation_steps", str(episodes // 4), *GRPO_FLAGS, *(extra or [])]
    grpo.main(argv)
    wall = t["end"] - t["start"]
    policy = t["policy"] - t["score"]  # training_step includes the generation batch's scoring (first micro-batch)
    other = wall - t["generation"] - t["reference"] - policy - t["optimizer"]
    return {"step_wall_s": wall, "generation_s": t["generation"], "reference_s": t["reference"],
            "policy_forward_backward_s": policy, "optimizer_s": t["optimizer"], "other_s": other,
            "episodes": episodes, "generated_tokens": t["tokens"], "sequence_tokens": t["trained_tokens"],
            "argv": argv}


def run_child(root: Path, kind: str, args, continuous: bool = False, flags: str = "") -> dict:
    """This script as a child process in ``root``, importing that checkout's code, running ``child_<kind>``."""
    model = str((ROOT / args.model).resolve()) if (ROOT / args.model).exists() else args.model
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--model", model, "--episodes",
               str(args.episodes), "--child-out", str(out)] + (["--continuous"] if continuous else []) + \
            ([f"--grpo-flags={flags}"] if flags else [])
        subprocess.run(cmd, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, check=True)
        return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="artifacts/checkpoints/sft-smollm2")
    ap.add_argument("--episodes", type=int, default=32, help="episodes of the engine run and of the GRPO step")
    ap.add_argument("--batch", type=int, default=32, help="rows of the raw generate measurement")
    ap.add_argument("--prompt", type=int, default=600, help="prompt tokens of the raw generate measurement")
    ap.add_argument("--new", type=int, default=64, help="decoded tokens of the raw generate measurement")
    ap.add_argument("--compare", default="", help="another checkout (e.g. `git worktree add /tmp/base 034fe2e`) whose "
                    "engine and GRPO step are measured in the same run")
    ap.add_argument("--grpo-variants", default="", help="GRPO steps of this checkout measured side by side, each with "
                    "its own flags on top of the step's: 'name=flags;name=flags' (e.g. 'transformers=;llamacpp="
                    "--rollout_backend llamacpp'), each also against the first in `variant_speedups`; empty: one step "
                    "of each checkout as it is (a --compare checkout is measured as it is either way)")
    ap.add_argument("--skip", default="", help="comma-separated parts to leave out: generate,training,engine,grpo")
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "benchmarks" / "rl.json"))
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default="", help=argparse.SUPPRESS)
    ap.add_argument("--continuous", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--grpo-flags", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # inside a checkout: its own code
        with tempfile.TemporaryDirectory() as tmp:
            result = child_engine(args.model, args.episodes, args.continuous) if args.child == "engine" else \
                child_grpo(args.model, args.episodes, tmp, args.grpo_flags.split())
        Path(args.child_out).write_text(json.dumps(result))
        return
    skip = set(filter(None, args.skip.split(",")))
    from training.common.provenance import benchmark_artifact  # noqa: PLC0415
    from training.engine.models import load_model  # noqa: PLC0415

    start = time.perf_counter()
    rooflines = {"matmul_float32_flops": matmul_flops("float32"), "matmul_bfloat16_flops": matmul_flops("bfloat16"),
                 "copy_bytes_per_s": copy_bandwidth()}
    print(f"rooflines: {rooflines}", file=sys.stderr)
    results: dict = {"rooflines": rooflines, "complete": False}
    config = vars(args) | {"sellers": SELLERS, "grpo_flags": GRPO_FLAGS, "decoding": "greedy (engine), T=0.7 (GRPO)"}
    seeds = {"episodes": "builtin test split, episode_seed(i, 0, 1)"}

    def save():  # after every part, so a run cut short keeps what it measured
        benchmark_artifact(args.out, config, seeds, start, results)
    roots = {"this": ROOT} | ({"compare": Path(args.compare).resolve()} if args.compare else {})
    variants = {}
    if "grpo" not in skip:  # first, while this process holds no model: a SmolLM2 GRPO step needs most of 24 GiB
        for v in filter(str.strip, args.grpo_variants.split(";")):
            if "=" not in v:
                ap.error(f"--grpo-variants: {v!r} is not name=flags")
            name, flags = v.split("=", 1)
            variants[name.strip()] = flags.strip()
        results["grpo_step"] = {}
        for name, flags in variants.items():  # this checkout, each variant in turn
            results["grpo_step"][name] = run_child(ROOT, "grpo", args, flags=flags)
            save()
        for name, root in roots.items():
            if not (variants and name == "this"):
                results["grpo_step"][name] = run_child(root, "grpo", args)
        save()
    model, tok = load_model(args.model, device="cpu")
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = sum(p.numel() for p in base.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in base.parameters())
    results["model"] = {"path": args.model, "parameters": params, "weight_bytes": weight_bytes}
    if "generate" not in skip:
        results["raw_generate"] = raw_generate(base, tok, args.batch, args.prompt, args.new, rooflines)
        save()
    if "training" not in skip:
        results["training_precision"] = training_precision(base, tok, 4, 1024, rooflines)
        save()
    del model, base
    if "engine" not in skip:
        results["engine"] = {"this_continuous": run_child(ROOT, "engine", args, continuous=True),
                             "this_lockstep": run_child(ROOT, "engine", args, continuous=False)}
        if args.compare:
            results["engine"]["compare"] = run_child(roots["compare"], "engine", args, continuous=False)
        for k, v in results["engine"].items():
            # decoding bound: the weights are read once per step, for every row of the step
            v["tokens_per_s_at_bandwidth_bound"] = rooflines["copy_bytes_per_s"] / weight_bytes * \
                (v["generated_tokens"] / v["decode_steps"] if v.get("decode_steps") else args.episodes)
            v["fraction_of_bandwidth_bound"] = v["tokens_per_s"] / v["tokens_per_s_at_bandwidth_bound"]
            print(f"engine {k}: {v}", file=sys.stderr)
        save()
    if "grpo_step" in results:
        for k, v in results["grpo_step"].items():
            fwd = 2 * params * v["sequence_tokens"]
            v["reference_fraction_of_matmul_peak"] = fwd / v["reference_s"] / rooflines["matmul_float32_flops"] \
                if v["reference_s"] else None
            v["policy_fraction_of_matmul_peak"] = 2 * fwd / v["policy_forward_backward_s"] / \
                rooflines["matmul_float32_flops"]
            v["generation_tokens_per_s"] = v["generated_tokens"] / v["generation_s"]
            print(f"grpo {k}: {v}", file=sys.stderr)
        if variants:  # each variant's step against the first's, phase by phase (the same run, the same machine)
            first = results["grpo_step"][next(iter(variants))]
            results["variant_speedups"] = {
                k: {p: first[p] / v[p] for p in ("step_wall_s", "generation_s", "reference_s",
                                                  "policy_forward_backward_s") if v[p] and first[p]}
                for k, v in results["grpo_step"].items()}
        save()
    if args.compare:
        ratios = {}
        if "engine" in results:
            new, old = results["engine"]["this_continuous"], results["engine"]["compare"]
            ratios["engine_tokens_per_s"] = new["tokens_per_s"] / old["tokens_per_s"]
            ratios["engine_episodes_per_s"] = new["episodes_per_s"] / old["episodes_per_s"]
        if "this" in results.get("grpo_step", {}):
            new, old = results["grpo_step"]["this"], results["grpo_step"]["compare"]
            ratios["grpo_step_speedup"] = old["step_wall_s"] / new["step_wall_s"]
            ratios.update({f"{p}_speedup": old[p] / new[p] for p in ("generation_s", "reference_s",
                                                                      "policy_forward_backward_s") if new[p]})
        results["compared_with"] = {"checkout": str(roots["compare"]), "commit": _commit(roots["compare"]),
                                    "ratios_new_over_old": ratios}
        print(f"ratios: {ratios}", file=sys.stderr)
    results["complete"] = True
    save()
    print(json.dumps(results.get("compared_with", {}), indent=1))


def _commit(root: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


if __name__ == "__main__":
    main()
