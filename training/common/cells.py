"""Finished evaluation cells kept on disk, so a long evaluation resumes instead of starting over.

A model cell (one buyer at one temperature against one seller, on every product x seed of the
split) takes minutes to an hour on a CPU; a real LLM's whole evaluation takes longer than one
session. ``CellCache`` appends each finished cell to a JSONL file, keyed by everything that decides
its episodes: the players (a model by its path and a fingerprint of its weights, so a retrained
checkpoint at the same path is never mistaken for the old one), the sampling, and the evaluation's
settings (products, seeds, turns, budget factor...). A rerun with the same key reads the cell back
instead of playing it; each line records the commit and date it was played at, and the artifact
lists every cell it read back (``cells_resumed``). A line cut short by a kill is skipped.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import sys
from pathlib import Path

from training.common.provenance import git_commit

# what decides a local model's replies: weights, configs, tokenizer and chat template
WEIGHT_FILES = ("*.safetensors", "*.bin", "*config.json", "tokenizer*", "chat_template*", "*.jinja")


def model_fingerprint(model: str) -> str:
    """A short hash of a local model's weight, config and tokenizer files (their names and bytes); a
    name that is not a local folder (a Hub id, ``tiny``, ``smollm2-135m`` before it is built) is its
    own fingerprint, resolved to the folder the loader uses when that exists here."""
    from training.engine.models import resolve_model_path  # noqa: PLC0415

    try:
        folder = Path(resolve_model_path(model))
    except Exception:  # noqa: BLE001 - an unknown name: the name is all there is to key on
        return f"name:{model}"
    files = sorted({f for pattern in WEIGHT_FILES for f in folder.glob(pattern) if f.is_file()}) \
        if folder.is_dir() else []
    if not files:
        return f"name:{model}"
    # hashed once per version of the files (a model of hundreds of MB is read once per process)
    return _hash_files(tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


@functools.lru_cache(maxsize=64)
def _hash_files(files: tuple[tuple[str, int, int], ...]) -> str:
    h = hashlib.sha256()
    for name, _size, _mtime in files:
        h.update(Path(name).name.encode() + b"\0")
        with open(name, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
    return f"sha256:{h.hexdigest()[:16]}"


def cell_key(cell: dict, settings: dict) -> str:
    return hashlib.sha256(json.dumps({"cell": cell, "settings": settings}, sort_keys=True,
                                     default=str).encode()).hexdigest()[:24]


class CellCache:
    """Finished cells in a JSONL file (``path``); ``settings`` is what every cell of this evaluation
    shares (any change to it is a different key)."""

    def __init__(self, path: str | Path, settings: dict):
        self.path, self.settings = Path(path), settings
        self.cells: dict[str, dict] = {}
        self.resumed: list[dict] = []
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                    self.cells[entry["key"]] = entry
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a kill mid-write, or not one of ours

    def get(self, cell: dict) -> dict | None:
        """The stored ``data`` of ``cell`` (None when it was never finished with these settings)."""
        entry = self.cells.get(cell_key(cell, self.settings))
        if entry is None:
            return None
        if entry.get("commit") != git_commit():
            print(f"[cells] {cell}: read back from commit {entry.get('commit')} ({entry.get('date')}); the "
                  "code now is another (the artifact lists it under cells_resumed)", file=sys.stderr)
        self.resumed.append({**cell, "commit": entry.get("commit"), "date": entry.get("date")})
        return entry["data"]

    def put(self, cell: dict, data: dict) -> None:
        key = cell_key(cell, self.settings)
        entry = {"key": key, "cell": cell, "commit": git_commit(),
                 "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "data": data}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        cut = False
        if self.path.exists() and self.path.stat().st_size:
            with self.path.open("rb") as fh:
                fh.seek(-1, 2)
                cut = fh.read(1) != b"\n"
        with self.path.open("a") as fh:  # one line per cell, flushed: a kill loses at most the cell being played
            fh.write(("\n" if cut else "") + json.dumps(entry) + "\n")  # a line a kill cut short stays apart
        self.cells[key] = entry
