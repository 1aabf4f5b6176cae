"""Build the tiny offline model (a tokenizer trained on game text and an untrained 3.4 M-parameter
Qwen3-architecture model) and save it to a folder; ``load_model("tiny")`` does this on first use.

    python training/build_tiny.py --out runs/tiny-base
"""

from __future__ import annotations

import argparse

from training.engine.models import DEFAULT_TINY_DIR, build_tiny


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Build and save the tiny offline model.")
    ap.add_argument("--out", default=str(DEFAULT_TINY_DIR))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    model, tokenizer = build_tiny(args.out, args.seed)
    n = sum(p.numel() for p in model.parameters())
    print(f"tiny model: {n / 1e6:.2f} M parameters, vocabulary {len(tokenizer)}, saved to {args.out}")


if __name__ == "__main__":
    main()
