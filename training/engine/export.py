"""What the engine backends share: the content hash their exports are cached by, and their one error; and a LoRA
adapter's weights in bf16 (for a lent GPU machine's calls, which return 16 MiB per file and 64 MiB per call)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path


class EngineUnavailable(RuntimeError):
    """The engine is not installed, or cannot run this model; the message says which and what to do."""


def weights_hash(model) -> str:
    """A content hash of the model's weights and config: equal weights, equal hash, whatever the path."""
    import torch  # noqa: PLC0415

    digest = hashlib.sha256(json.dumps(model.config.to_dict(), sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        t = tensor.detach().to("cpu").contiguous()
        digest.update(str(t.dtype).encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def adapter_to_bf16(src: Path, dst: Path) -> None:
    """``src``'s adapter weights in bf16 at ``dst``: a ``.safetensors`` file, or a folder that also gets the
    adapter's other files (config, lineage, tokenizer).

        python3 -c 'import sys; from pathlib import Path; from training.engine.export import adapter_to_bf16; \\
                    adapter_to_bf16(*map(Path, sys.argv[1:]))' SRC_DIR DST_DIR_OR_FILE
    """
    import torch  # noqa: PLC0415
    from peft.utils import SAFETENSORS_WEIGHTS_NAME as ADAPTER_WEIGHTS  # noqa: PLC0415
    from safetensors.torch import load_file, save_file  # noqa: PLC0415

    src, dst = Path(src), Path(dst)
    if dst.suffix != ".safetensors":
        dst.mkdir(parents=True, exist_ok=True)
        for f in src.iterdir():
            if f.is_file() and f.name != ADAPTER_WEIGHTS:
                shutil.copy(f, dst / f.name)
        dst = dst / ADAPTER_WEIGHTS
    weights = load_file(src / ADAPTER_WEIGHTS)
    save_file({k: v.to(torch.bfloat16) for k, v in weights.items()}, dst, metadata={"format": "pt"})
