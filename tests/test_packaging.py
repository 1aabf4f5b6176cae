"""The project's shape: what the games may import, no import circles, the pinned openenv-core
the server's adapter was written for, and a wheel that carries and imports every package."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = find_packages(ROOT, include=["env*", "serving*", "training*", "space*"])  # pyproject's rule
FORBIDDEN_IN_ENV = {"fastapi", "pydantic", "pydantic_core", "openenv", "torch", "transformers", "trl", "uvicorn",
                    "gradio", "datasets", "peft"}


def _imports(path: Path, module_level_only: bool = False) -> set[str]:
    """Modules a file imports (every import, or only those at module level)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def test_the_games_import_nothing_but_the_standard_library_and_each_other():
    for path in sorted((ROOT / "env").rglob("*.py")):
        outside = {m for m in _imports(path) if m.split(".")[0] in FORBIDDEN_IN_ENV}
        assert not outside, f"{path.relative_to(ROOT)} imports {sorted(outside)}"
    # and importing them loads none of those, directly or through anything else
    code = ("import sys, env, env.bargain, env.market, env.bargain.play, env.market.play, env.bargain.evaluation, "
            "env.market.evaluation; print(sorted({m.split('.')[0] for m in sys.modules}))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                                           check=True).stdout.replace("'", '"')))
    assert not loaded & FORBIDDEN_IN_ENV, loaded & FORBIDDEN_IN_ENV


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def test_module_level_imports_have_no_circle():
    files = [p for pkg in PACKAGES for p in (ROOT / pkg.replace(".", "/")).glob("*.py")] + [ROOT / "app.py"]
    graph = {_module_name(p): {m for m in _imports(p, module_level_only=True)} for p in files}
    known = set(graph)
    graph = {m: {d for d in deps if d in known and d != m} for m, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(m: str, trail: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                circle = trail[trail.index(d):] + [d] if d in trail else [m, d]
                pytest.fail(f"import circle: {' -> '.join(circle)}")
            if d not in state:
                visit(d, trail + [d])
        state[m] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_openenv_version_the_server_adapter_was_written_for():
    """``serving/openenv_adapter.py`` uses openenv-core's private session calls; an upgrade must
    revisit them (and this pin) before it can land."""
    from serving.openenv_adapter import OPENENV_VERSION

    assert importlib.metadata.version("openenv-core") == OPENENV_VERSION
    pinned = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("openenv-core")]
    assert pinned == [f"openenv-core=={OPENENV_VERSION}"]


@pytest.mark.slow
def test_a_wheel_carries_every_package_and_imports_the_games(tmp_path):
    src, dist = tmp_path / "src", tmp_path / "dist"  # built from a copy: the build leaves nothing in the repo
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in {p.split(".")[0] for p in PACKAGES}:
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(src)], check=True, capture_output=True, timeout=600)
    (wheel,) = dist.glob("haggle-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in PACKAGES:
        assert f"{package.replace('.', '/')}/__init__.py" in names, f"the wheel lacks {package}"
    assert {"env/market/env.py", "env/bargain/env.py", "serving/app.py"} <= names
    # a fresh environment with only the wheel: the pure games import and play from it
    venv.create(tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=600)
    code = ("import env, env.market, env.bargain; from env.market import play_market, make_policy; "
            "e = play_market('single_trade', 1, make_policy('expert')); print(env.market.__file__, e.done)")
    out = subprocess.run([str(python), "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert str(tmp_path / "venv") in out and out.strip().endswith("True")


def test_provenance_calls_code_changes_dirty_but_not_artifacts_written_by_earlier_stages(tmp_path, monkeypatch):
    import subprocess

    from training.common import provenance
    repo = tmp_path / "repo"
    (repo / "artifacts").mkdir(parents=True)
    (repo / "runs" / "grpo").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1\n")
    (repo / "artifacts" / "curve.json").write_text("{}\n")
    (repo / "runs" / "grpo" / "pipeline_command.txt").write_text("python grpo.py\n")  # a committed resume mark
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run(git + cmd, cwd=repo, check=True)
    monkeypatch.setattr(provenance, "REPO_ROOT", repo)
    clean = provenance.git_commit()
    assert len(clean) == 40
    (repo / "artifacts" / "curve.json").write_text('{"points": []}\n')
    (repo / "runs" / "grpo" / "pipeline_command.txt").write_text("python grpo.py\ncode abc\n")
    assert provenance.git_commit() == clean, "a stage's own outputs and resume marks are not code"
    (repo / "code.py").write_text("x = 2\n")
    assert provenance.git_commit() == clean + "-dirty"
