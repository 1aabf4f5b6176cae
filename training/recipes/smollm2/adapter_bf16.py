"""A LoRA adapter's weights in bf16, for a lent GPU machine's calls (16 MiB per returned file, 64 MiB per call).

    python training/recipes/smollm2/adapter_bf16.py SRC_DIR DST_DIR   # the adapter folder, its other files copied
    python training/recipes/smollm2/adapter_bf16.py SRC_DIR DST.safetensors   # the weights alone
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

WEIGHTS = "adapter_model.safetensors"


def to_bf16(src: Path, dst: Path) -> None:
    """``src``'s adapter weights in bf16 at ``dst``: a ``.safetensors`` file, or a folder that also gets the
    adapter's other files (config, lineage, tokenizer)."""
    if dst.suffix != ".safetensors":
        dst.mkdir(parents=True, exist_ok=True)
        for f in src.iterdir():
            if f.is_file() and f.name != WEIGHTS:
                shutil.copy(f, dst / f.name)
        dst = dst / WEIGHTS
    save_file({k: v.to(torch.bfloat16) for k, v in load_file(src / WEIGHTS).items()}, dst, metadata={"format": "pt"})


if __name__ == "__main__":
    to_bf16(Path(sys.argv[1]), Path(sys.argv[2]))
