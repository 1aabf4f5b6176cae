"""Which precision trains faster on this machine: measured, not assumed.

CPUs differ in what bf16 buys. On one 2-core AMD EPYC host measured here, a 2048^2 matmul ran at 320 GFLOP/s in
fp32 and 167 in bf16; on another of the same name, 167 in fp32 and 401 in bf16 (``artifacts/benchmarks/rl.json``
records the rates of the run it describes). A recipe that fixes one precision is twice too slow on one of them,
so ``--precision auto`` (SFT, GRPO, SDPO) times both at the model's own shapes at start and trains in the faster."""

from __future__ import annotations

import time

BF16_MARGIN = 1.15  # bf16 autocast is chosen only when clearly faster: it also rounds


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def matmul_flops(dtype: str, m: int = 2048, k: int = 2048, n: int = 2048, repeats: int = 10) -> float:
    """The best of ``repeats`` (m x k) @ (k x n) products in ``dtype``, in FLOP/s."""
    import torch  # noqa: PLC0415

    a, b = torch.randn(m, k, dtype=getattr(torch, dtype)), torch.randn(k, n, dtype=getattr(torch, dtype))
    a @ b
    return 2 * m * k * n / min(_timed(lambda: a @ b) for _ in range(repeats))


def faster_training_precision(hidden: int, tokens: int = 2048, gpu: bool = False) -> dict:
    """Time the products a forward pass of a model of width ``hidden`` is made of (tokens x hidden @ hidden x
    4*hidden) in fp32 and bf16 on this CPU; returns both rates and the choice (``bfloat16`` when at least
    BF16_MARGIN times faster). On a GPU (``gpu``) training runs there, where bf16 is the field's default wherever
    the card supports it: no CPU timing decides it."""
    if gpu:
        import torch  # noqa: PLC0415

        choice = "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
        return {"choice": choice, "flops": {}, "shape": [], "device": "cuda"}
    rates = {d: matmul_flops(d, tokens, hidden, 4 * hidden) for d in ("float32", "bfloat16")}
    choice = "bfloat16" if rates["bfloat16"] >= BF16_MARGIN * rates["float32"] else "float32"
    return {"choice": choice, "flops": rates, "shape": [tokens, hidden, 4 * hidden]}


PRECISIONS = ("", "auto", "float32", "bfloat16")
PRECISION_HELP = ("auto: time fp32 and bf16 matmuls of the model's shapes on this machine at start and train in the "
                  "faster (bf16 through autocast; the rates and the choice go in the curve); float32 or bfloat16 to "
                  "fix it; empty: as --bf16 says")


def check_precision(choice: str) -> None:
    """Refuse a ``--precision`` value that is not one of PRECISIONS (scripts call it when their flags are parsed)."""
    if choice not in PRECISIONS:
        raise ValueError(f"--precision must be auto, float32 or bfloat16, got {choice!r}")


def set_training_precision(choice: str, cfg, hidden: int) -> dict | None:
    """Apply ``--precision`` to a TRL/transformers training config ``cfg`` before its trainer is built: ``auto``
    measures this machine (``faster_training_precision`` at width ``hidden``; on a GPU when ``cfg`` trains there),
    ``float32`` / ``bfloat16`` fix it, empty leaves ``cfg.bf16`` as given. Returns the measurement (``auto``) or
    None. Mixed precision is set beside ``bf16``: the training arguments derive it once, when they are built."""
    check_precision(choice)
    measured = None
    if choice == "auto":
        import sys  # noqa: PLC0415

        import torch  # noqa: PLC0415

        measured = faster_training_precision(hidden, gpu=torch.cuda.is_available() and not cfg.use_cpu)
        choice = measured["choice"]
        rates = ", ".join(f"{k} {v / 1e9:.0f}" for k, v in measured["flops"].items())
        print(f"--precision auto: {choice} (" + (f"matmul GFLOP/s: {rates}" if rates else "on the GPU") + ")",
              file=sys.stderr)
    if choice:
        cfg.bf16 = choice == "bfloat16"
        cfg.mixed_precision = "bf16" if cfg.bf16 else "no"
    return measured
