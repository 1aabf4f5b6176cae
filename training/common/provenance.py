"""Provenance and atomic writes for every artifact.

Each artifact JSON carries a top-level ``provenance`` object: the command that made it,
its configuration, its seeds, the git commit, the date, the machine and the wall time.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


# what an artifact's record of the run that made it says, where another artifact keeps it (included rows)
RECORD_KEYS = ("command", "commit", "date", "machine", "wall_time_s")


def git_commit() -> str:
    """HEAD's hash, with ``-dirty`` when tracked code differs from it; ``unknown`` outside git.
    ``artifacts/``, ``runs/`` (a long run's committed checkpoints and the pipeline's resume marks) and the
    browser tests' screenshots are not code: the pipeline's own earlier stages write there, which must not
    make a later stage look as if it ran uncommitted code."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!artifacts",
                                ":!runs", ":!assets/screenshots"],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}-dirty" if dirty else head


CODE_PATHS = ("env", "training", "pyproject.toml", "requirements.txt")  # what a training stage runs


def code_version() -> str:
    """A fingerprint of the code a stage runs (``env/``, ``training/``, the dependency pins): git's tree
    hashes at HEAD, plus a hash of any uncommitted change to them. Any change to that code changes it
    (committing a change moves it too, from the diff's hash to the new trees'); docs and artifacts
    never do. ``unknown`` outside git."""
    try:
        trees = subprocess.run(["git", "rev-parse", *(f"HEAD:{p}" for p in CODE_PATHS)], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10, check=True).stdout.split()
        diff = subprocess.run(["git", "diff", "HEAD", "--", *CODE_PATHS], cwd=REPO_ROOT, capture_output=True,
                              timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    change = f"+{hashlib.sha256(diff).hexdigest()[:12]}" if diff else ""
    return hashlib.sha256(" ".join(trees).encode()).hexdigest()[:16] + change


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        import torch  # noqa: PLC0415  (only to name the GPU when there is one)
        if "torch" in sys.modules and torch.cuda.is_available():
            cpu += f", GPU {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return f"{platform.system()} {platform.release()} {cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def command_line(script: str | None = None, argv: list[str] | None = None) -> str:
    """The command as a user would type it from the repo root; values of ``--*token*`` flags are
    replaced by ``***`` (a token passed on the command line never reaches an artifact)."""
    argv = sys.argv if argv is None else argv
    script = script or argv[0]
    try:
        script = str(Path(script).resolve().relative_to(REPO_ROOT))
    except ValueError:
        pass
    args, hide = [], False
    for a in argv[1:]:
        flag, eq, _value = a.partition("=")
        secret = re.fullmatch(r"--([\w-]*[_-])?token", flag.lower()) is not None
        args.append("***" if hide else f"{flag}=***" if secret and eq else a)
        hide = secret and not eq
    return "python " + " ".join(shlex.quote(a) for a in [script, *args])


LINEAGE = "lineage.json"


def write_lineage(folder: str | os.PathLike, parent: str, stage: str, role: str | None = None) -> None:
    """Record in a saved model folder what it was trained from: the original base model (a Hub id,
    or ``haggle-tiny`` for the locally built tiny model) and the chain of stages, each with the
    role it trained (``buyer`` or ``seller``; the Space seats a model only in its trained roles)."""
    up = read_lineage(parent)
    adapter = Path(parent) / "adapter_config.json"  # a trainer's checkpoint: an adapter with no lineage of its own
    base = up["base_model"] if up else \
        json.loads(adapter.read_text())["base_model_name_or_path"] if adapter.is_file() else parent
    entry = {"stage": stage, "from": str(parent), "commit": git_commit()}
    if role:
        entry["role"] = role
    stages = (up["stages"] if up else []) + [entry]
    write_json(Path(folder) / LINEAGE, {"base_model": base, "stages": stages})


def trained_roles(lineage: dict | None) -> list[str]:
    """The roles a model was trained to play, from its lineage: each training stage's ``role``
    (stages recorded before roles were written trained the buyer, the only role they could)."""
    stages = [s for s in (lineage or {}).get("stages", []) if s.get("stage") in ("sft", "grpo", "sdpo")]
    return sorted({s.get("role", "buyer") for s in stages})


def read_lineage(folder: str | os.PathLike) -> dict | None:
    path = Path(folder) / LINEAGE
    return json.loads(path.read_text()) if path.is_file() else None


def provenance(config: dict, seeds: Any, wall_time_s: float, command: str | None = None,
               commit: str | None = None) -> dict:
    """``commit``: the code the run loaded, when the record is written long after (HEAD may have moved since)."""
    return {
        "command": command or command_line(),
        "config": config,
        "seeds": seeds,
        "commit": commit or git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "wall_time_s": round(wall_time_s, 3),
    }


def benchmark_artifact(out: str, config: dict, seeds, start: float, results, command: str | None = None) -> dict:
    """A benchmark's artifact (``provenance`` and ``results``, the benchmark contract), written to ``out``
    unless it is empty; ``start`` is the run's ``time.perf_counter()`` at its beginning."""
    artifact = {"provenance": provenance(config, seeds, time.perf_counter() - start, command), "results": results}
    if out:
        write_json(out, artifact)
    return artifact


def _atomic_write(path: str | os.PathLike, write) -> Path:
    """Call ``write(file)`` on a temporary file in the same folder, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; artifacts are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | os.PathLike, data: Any) -> Path:
    """Write JSON atomically (readers never see half a file)."""
    return _atomic_write(path, lambda f: f.write(json.dumps(data, indent=1, ensure_ascii=False) + "\n"))


def write_jsonl(path: str | os.PathLike, rows: list[dict]) -> Path:
    """Write JSON lines atomically."""
    return _atomic_write(path, lambda f: f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


# ------------------------------------------------------------------ paths as a reader types them
REPO_DIRS = ("artifacts", "runs", "training", "env", "assets", "benchmarks", "tests", "space", "configs", "serving")
_ABSOLUTE = re.compile(r"(?<![\w.:/~-])/(?:[\w.@+=-]+/)*[\w.@+=-]*")


def _relative_path(match: re.Match) -> str:
    path = match.group(0)
    if path.startswith(f"{REPO_ROOT}/"):  # this checkout: exactly
        return path[len(str(REPO_ROOT)) + 1:]
    parts = path.strip("/").split("/")  # another checkout: from its first top-level folder of the repository
    for k, part in enumerate(parts):
        if part in REPO_DIRS:
            return "/".join(parts[k:])
    name = parts[-1] if parts and parts[-1] else "/"
    return "python" if re.fullmatch(r"python[\d.]*", name) else name


def relative(value):
    """``value`` (a string, or a list or dict of them) as a visitor reads it: every absolute path inside the
    repository relative to it (``/any/checkout/runs/sft/final`` -> ``runs/sft/final``), the interpreter as
    ``python``, any other absolute path by its last part. The files keep the full record; this is for display, and for
    comparing commands run from different checkouts."""
    if isinstance(value, str):
        return _ABSOLUTE.sub(_relative_path, value)
    if isinstance(value, list):
        return [relative(v) for v in value]
    if isinstance(value, dict):
        return {k: relative(v) for k, v in value.items()}
    return value
