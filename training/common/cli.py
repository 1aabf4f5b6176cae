"""The command-line convention every training script shares: dataclass arguments parsed by TRL's
parser, ``--smoke`` as small defaults placed first (so explicit flags still win), and a config
that refuses a value answered with the parser's one-line usage error."""

from __future__ import annotations

import sys


def parse(parser, argv: list[str] | None, smoke_args: list[str] = ()):
    """``(parsed dataclasses, argv as used)``; ``parser`` is a ``TrlParser`` over the script's
    dataclasses (``HfArgumentParser`` works too)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--smoke" in argv:
        argv = [*smoke_args, *argv]
    try:
        parsed = (parser.parse_args_and_config(args=argv) if hasattr(parser, "parse_args_and_config")
                  else parser.parse_args_into_dataclasses(args=argv))
    except ValueError as exc:
        parser.error(str(exc))
    return parsed, argv
