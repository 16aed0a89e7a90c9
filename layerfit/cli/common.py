"""Exit codes, help texts and the result-to-exit-code rule shared by the subcommands.

Nothing here imports pydantic, OR-Tools or numpy: ``--help`` and argument errors stay fast.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from layerfit.domain.plan import Status

EXIT_PLACED = 0
EXIT_NO_FIT = 1
EXIT_BAD_INPUT = 2


def terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``, which argparse asks for at every option it adds,
    without importing ``shutil``: that loads zlib, bz2 and lzma, a few ms of every start-up."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):  # no stdout, or not a terminal
        return 80


class HelpFormat(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written, at the terminal's width (found as argparse does)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, terminal_columns() - 2 if width is None else width)


HELP_FORMAT = HelpFormat

SUBCOMMANDS = {
    "plan": ("plan", "place one deployment"),
    "explain": ("plan", "why a deployment does not fit, and the smallest change that would"),
    "estimate": ("estimate", "memory of a GGUF model, per layer and in total"),
    "replan": ("replan", "re-plan a whole fleet and list the moves"),
    "examples": ("examples", "write the bundled example inputs (cluster, deployments, layout, fleet) to a folder"),
    "schema": ("schema", "print the JSON Schema of an output: plan, fleet or estimate"),
    "cache": ("cache", "the header cache of remote models: info, or clear it"),
}
"""Each subcommand's module in ``layerfit.cli`` and its line in ``layerfit --help``, in that order."""

EXAMPLES = """\
examples (`layerfit examples examples` writes the bundled examples/ folder):
  layerfit plan --cluster examples/cluster.yaml --deployment examples/deployment.yaml
  layerfit plan --cluster examples/cluster.yaml --model model.gguf --ctx-size 32768 -ngl 99 --distributed
  layerfit plan --cluster examples/cluster.yaml --deployment examples/deployment.yaml --plot plan.png
  layerfit explain --cluster examples/cluster.yaml --deployment examples/too-big.yaml
  layerfit estimate model.gguf --ctx-size 16384 --cache-type-k q8_0 --flash-attn on
  layerfit replan examples/fleet.yaml --json

exit codes: 0 placed, 1 nothing fits, 2 bad input
"""


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """``--offload-order`` and ``--llama-cpp-build``: the llama.cpp the commands are written for."""
    from layerfit.domain.choices import OffloadOrder

    parser.add_argument(
        "--offload-order",
        choices=[o.value for o in OffloadOrder],
        help="-ngl's order (default: the build's; output-last for builds older than December 2025)",
    )
    parser.add_argument(
        "--llama-cpp-build",
        metavar="BUILD",
        help="the llama.cpp the commands are for: its build number (b6500 or 6500, as llama-server --version "
        "prints it), current (b11434: output-first -ngl, --fit off emitted) or legacy (b6457: output-last -ngl, "
        "no --fit); the flags emitted follow it, and one the build lacks is refused; default: what "
        "--offload-order implies, else current",
    )


def exit_code(status: Status) -> int:
    """0 for a placed result (optimal or feasible), 1 otherwise."""
    from layerfit.domain.plan import Status

    return EXIT_PLACED if status in (Status.OPTIMAL, Status.FEASIBLE) else EXIT_NO_FIT


def seconds(text: str) -> float:
    """An argparse type: a time limit in seconds, above zero and at most ``MAX_TIME_LIMIT_S``."""
    from layerfit.domain.limits import MAX_TIME_LIMIT_S  # no imports of its own: start-up stays fast

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0, got {text!r}")
    if value > MAX_TIME_LIMIT_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_TIME_LIMIT_S:,.0f} seconds, got {text!r}")
    return value
