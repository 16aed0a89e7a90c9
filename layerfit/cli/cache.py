"""``layerfit cache``: where the header cache of remote models is, what it holds, and clearing it."""

from __future__ import annotations

import argparse

from layerfit.cli.common import EXIT_PLACED, HELP_FORMAT, SUBCOMMANDS


def cmd_cache(args: argparse.Namespace, rest: list[str]) -> int:
    from layerfit.errors import InputError
    from layerfit.remote import cache

    if rest:
        raise InputError("cache", f"unexpected arguments {rest}")
    if args.action == "clear":
        entries, total = cache.clear()
        print(f"removed {entries} header{'s' * (entries != 1)} ({total:,} bytes) from {cache.root()}")
        return EXIT_PLACED
    entries, total = cache.usage()
    state = "on" if cache.enabled() else "off (LAYERFIT_CACHE)"
    print(f"{cache.root()}: {entries} header{'s' * (entries != 1)}, {total:,} bytes; cache {state}")
    return EXIT_PLACED


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cache`` to the subcommands."""
    parser = commands.add_parser(
        "cache",
        help=SUBCOMMANDS["cache"][1],
        description=(
            "Headers of remote models (hf://, ms://, https://) are kept in $XDG_CACHE_HOME/layerfit/headers\n"
            "(default ~/.cache/layerfit/headers), by URL, revision and ETag. LAYERFIT_CACHE=off turns it off."
        ),
        formatter_class=HELP_FORMAT,
    )
    parser.add_argument("action", choices=("info", "clear"), help="info: where and how much; clear: empty it")
    parser.set_defaults(handler=cmd_cache)
