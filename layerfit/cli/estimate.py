"""``layerfit estimate``: the memory of a GGUF model, per layer and in total."""

from __future__ import annotations

import argparse

from layerfit.cli.common import EXAMPLES, EXIT_PLACED, HELP_FORMAT


def cmd_estimate(args: argparse.Namespace, rest: list[str]) -> int:
    from layerfit import estimators
    from layerfit.domain.params import LlamaParams
    from layerfit.estimators.report import estimate_table

    params = LlamaParams.from_args(rest)
    shape = estimators.read_gguf(args.model)
    profile = estimators.estimate_profile(shape, params)
    if args.json:
        print(profile.model_dump_json(indent=2))
    else:
        print(estimate_table(shape, profile))
    return EXIT_PLACED


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``estimate`` to the subcommands."""
    estimate = commands.add_parser(
        "estimate", help="memory of a GGUF model, per layer and in total", epilog=EXAMPLES, formatter_class=HELP_FORMAT
    )
    estimate.add_argument("model", help="GGUF file; llama.cpp parameters may follow (--ctx-size, -ctk, -fa, -np ...)")
    estimate.add_argument("--json", action="store_true", help="print the MemoryProfile as JSON")
    estimate.set_defaults(handler=cmd_estimate)
