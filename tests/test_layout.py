"""The code's layout holds: ``training/``'s runnable scripts sit at its top and import only the library
(its subpackages), never each other; the library runs no script."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAINING = ROOT / "training"


def scripts() -> set[str]:
    return {p.stem for p in TRAINING.glob("*.py") if 'if __name__ == "__main__":' in p.read_text()}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_no_file_under_training_imports_a_runnable_script():
    runnable = {f"training.{s}" for s in scripts()}
    assert {"training.grpo", "training.sft", "training.evaluate", "training.pipeline"} <= runnable
    for path in TRAINING.rglob("*.py"):
        bad = imported_modules(path) & runnable
        assert not bad, f"{path.relative_to(ROOT)} imports the script(s) {sorted(bad)}"


def test_the_library_lives_in_subpackages_and_has_no_entry_points():
    top = {p.stem for p in TRAINING.glob("*.py")} - {"__init__"}
    assert top == scripts(), f"library modules at training/'s top: {sorted(top - scripts())}"
    for path in TRAINING.glob("*/**/*.py"):
        assert 'if __name__ == "__main__":' not in path.read_text(), path.relative_to(ROOT)


def test_rl_without_a_policy_to_start_from_says_what_to_run_first(tmp_path):
    """``python training/grpo.py`` on a fresh clone (no runs/sft/final): one line naming the fix, not a
    transformers traceback about repo ids."""
    import pytest

    from training import grpo
    missing = tmp_path / "runs" / "sft" / "final"
    with pytest.raises(SystemExit) as exc:
        grpo.main(["--smoke", "--model_name_or_path", str(missing), "--output_dir", str(tmp_path / "out"),
                   "--curve", ""])
    message = str(exc.value)
    assert message.startswith("error: no model at") and "training/sft.py" in message and "\n" not in message
