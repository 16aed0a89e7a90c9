"""``layerfit examples DIR``: write the bundled example inputs (shipped inside the package) to DIR."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from layerfit.cli.common import EXAMPLES, EXIT_PLACED, HELP_FORMAT, SUBCOMMANDS


def example_files() -> dict[str, bytes]:
    """The bundled examples by file name: a cluster, deployments, a layout and a fleet."""
    from importlib.resources import files  # here: importlib.resources is slow to import

    folder = files("layerfit") / "examples"
    return {entry.name: entry.read_bytes() for entry in folder.iterdir() if entry.name.endswith(".yaml")}


def cmd_examples(args: argparse.Namespace, rest: list[str]) -> int:
    from layerfit.errors import InputError

    if rest:
        raise InputError("examples", f"unexpected arguments {rest}")
    target = Path(args.directory)
    if target.exists() and not target.is_dir():
        raise InputError(str(target), "exists and is not a directory")
    bundled = example_files()
    clashes = sorted(name for name in bundled if (target / name).exists())
    if clashes and not args.force:
        raise InputError(str(target), f"already has {', '.join(clashes)}; pass --force to overwrite")
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name, data in sorted(bundled.items()):
            (target / name).write_bytes(data)
            print(target / name)
    except OSError as exc:
        raise InputError(str(target), f"cannot write there: {exc.strerror or exc}") from None
    print(
        f"{len(bundled)} example files written; try: layerfit plan --cluster {target / 'cluster.yaml'} "
        f"--deployment {target / 'deployment.yaml'}",
        file=sys.stderr,
    )
    return EXIT_PLACED


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``examples`` to the subcommands."""
    examples = commands.add_parser(
        "examples",
        help=SUBCOMMANDS["examples"][1],
        epilog=EXAMPLES,
        formatter_class=HELP_FORMAT,
        allow_abbrev=False,
    )
    examples.add_argument("directory", help="folder to write them to (created if missing)")
    examples.add_argument("--force", action="store_true", help="overwrite files of the same name")
    examples.set_defaults(handler=cmd_examples)
