"""The ``layerfit`` command line: one module per subcommand, text rendering in ``render``.

Subcommand modules import the heavy parts (pydantic models, OR-Tools, numpy) inside their
handlers, so that ``layerfit --help`` and argument errors answer at once.

Exit codes: 0 placed (or estimate printed), 1 nothing fits, 2 bad input.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence

from layerfit.cli import estimate, plan, replan
from layerfit.cli.common import EXAMPLES, EXIT_BAD_INPUT, EXIT_NO_FIT, EXIT_PLACED, HELP_FORMAT
from layerfit.errors import InputError, LayerfitError

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


def _own_options(parser: argparse.ArgumentParser, command: str) -> list[str]:
    """The option strings of one subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[command]
            return [option for item in sub._actions for option in item.option_strings]
    return []


def check_unknown_options(parser: argparse.ArgumentParser, command: str, rest: Sequence[str]) -> None:
    """A long option neither layerfit nor llama-server knows is a misspelling: name it, and the nearest one.

    ``parse_known_args`` leaves every option it does not know for llama.cpp, so without this a
    misspelled ``--deploymnet`` would be reported as a missing ``--model``.
    """
    from layerfit.domain.flags import LEGACY_FLAGS, closest_flag, lookup

    own = _own_options(parser, command)
    for token in rest:
        name = token.partition("=")[0]
        if not name.startswith("--") or lookup(name) is not None or name in LEGACY_FLAGS:
            continue
        mine = difflib.get_close_matches(name, own, n=1, cutoff=0.6)
        nearest = mine[0] if mine else closest_flag(name)
        hint = f"; did you mean {nearest}?" if nearest else ""
        raise InputError(name, f"unknown option of layerfit {command} (and of llama-server){hint}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    try:
        check_unknown_options(parser, args.command, rest)
        code: int = args.handler(args, rest)
    except LayerfitError as exc:
        print(f"layerfit: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return code
