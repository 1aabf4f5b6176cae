"""The command-line convention every training script shares: dataclass arguments parsed by TRL's
parser (``--config recipe.yaml`` sets defaults from a YAML file, as in TRL's own scripts), and
``--smoke`` as the script's smoke recipe (``training/recipes/smoke/<script>.yaml``) placed first, so
explicit flags still win; a value a config refuses is answered with the parser's one-line usage error."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


def recipe_flags(path: str | Path, section: str | None = None) -> list[str]:
    """A YAML recipe (a mapping of option to value, or of sections to such mappings) as command-line
    flags: ``{max_steps: 2, use_cpu: true}`` -> ``["--max_steps", "2", "--use_cpu", "true"]``."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    if section is not None:
        data = data.get(section) or {}
    flags = []
    for key, value in data.items():
        flags += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return flags


def parse(parser, argv: list[str] | None, script: str | None = None):
    """``(parsed dataclasses, argv as used)``; ``parser`` is a ``TrlParser`` over the script's
    dataclasses (``HfArgumentParser`` works too); ``script`` names the smoke recipe."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--smoke" in argv and script is not None:
        argv = [*recipe_flags(RECIPES / "smoke" / f"{script}.yaml"), *argv]
    try:
        parsed = (parser.parse_args_and_config(args=argv) if hasattr(parser, "parse_args_and_config")
                  else parser.parse_args_into_dataclasses(args=argv))
    except ValueError as exc:
        parser.error(str(exc))
    return parsed, argv
