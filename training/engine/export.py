"""What the engine backends share: the content hash their exports are cached by, and their one error."""

from __future__ import annotations

import hashlib
import json


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
