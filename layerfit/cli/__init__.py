"""The ``layerfit`` command line: one module per subcommand, text rendering in ``render``.

Subcommand modules import the heavy parts (pydantic models, OR-Tools, numpy) inside their
handlers, so that ``layerfit --help`` and argument errors answer at once.

Exit codes: 0 placed (or estimate printed), 1 nothing fits, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from layerfit.cli import estimate, plan, replan
from layerfit.cli.common import EXAMPLES, EXIT_BAD_INPUT, EXIT_NO_FIT, EXIT_PLACED, HELP_FORMAT
from layerfit.errors import LayerfitError

__all__ = ["EXIT_BAD_INPUT", "EXIT_NO_FIT", "EXIT_PLACED", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="layerfit",
        description="Place GGUF models (llama.cpp) on GPU clusters, and prove the placement optimal.",
        epilog=EXAMPLES,
        formatter_class=HELP_FORMAT,
        allow_abbrev=False,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    plan.register(commands)
    estimate.register(commands)
    replan.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    try:
        code: int = args.handler(args, rest)
    except LayerfitError as exc:
        print(f"layerfit: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return code
