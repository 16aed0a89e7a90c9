"""The ``layerfit`` command line: one module per subcommand, text rendering in ``render``.

Subcommand modules import the heavy parts (pydantic models, OR-Tools, numpy) inside their
handlers, so that ``layerfit --help`` and argument errors answer at once.

Exit codes: 0 placed (or estimate printed), 1 nothing fits, 2 bad input.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, cast

from layerfit.cli.common import EXAMPLES, EXIT_BAD_INPUT, EXIT_NO_FIT, EXIT_PLACED, HELP_FORMAT, SUBCOMMANDS
from layerfit.cli.plugins import without_plugin_scan
from layerfit.errors import InputError, LayerfitError

__all__ = ["EXIT_BAD_INPUT", "EXIT_NO_FIT", "EXIT_PLACED", "build_parser", "main"]


class _StoreOnce(argparse._StoreAction):
    """argparse's ``store``, refusing an option given twice: argparse keeps the last value silently
    (``--cluster a.yaml ... --cluster b.yaml`` planned on b.yaml)."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        given: set[str] = namespace.__dict__.setdefault("_given_once", set())
        if self.dest in given:
            raise argparse.ArgumentError(self, "given more than once; give it once")
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``layerfit plan: error: ...``), exit code 2, and no usage dump;
    ``HELP_FORMAT`` unless told otherwise (also for the subcommands' parsers); an option that takes
    a value may be given once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HELP_FORMAT)
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Version(argparse.Action):
    """``--version``: layerfit's version and the llama.cpp build whose options it models."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print layerfit's version and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from layerfit.llamacpp.flag_table import LLAMA_CPP_VERSION
        from layerfit.version import __version__

        print(f"layerfit {__version__} (llama.cpp options of {LLAMA_CPP_VERSION})")
        parser.exit(EXIT_PLACED)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every subcommand, or with only ``command``'s options and the other
    subcommands by name and help line: all that a run of ``command`` ever shows of them."""
    parser = _Parser(
        prog="layerfit",
        description="Place GGUF models (llama.cpp) on GPU clusters, and prove the placement optimal.",
        epilog=EXAMPLES,
        formatter_class=HELP_FORMAT,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action=_Version)
    commands = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]", parser.add_subparsers(dest="command", required=True)
    )
    for module in dict.fromkeys(home for home, _ in SUBCOMMANDS.values()):  # plan registers explain too
        names = [name for name, (home, _) in SUBCOMMANDS.items() if home == module]
        if command is None or command in names:
            register: Callable[..., None] = importlib.import_module(f"layerfit.cli.{module}").register
            register(commands)
        else:
            for name in names:
                commands.add_parser(name, help=SUBCOMMANDS[name][1])
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` runs, when its first word names one; else ``None`` (``--help``, a typo)."""
    return argv[0] if argv and argv[0] in SUBCOMMANDS else None


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
    from layerfit.llamacpp.flags import LEGACY_FLAGS, closest_flag, lookup

    own = _own_options(parser, command)
    for token in rest:
        name = token.partition("=")[0]
        if not name.startswith("--") or lookup(name) is not None or name in LEGACY_FLAGS:
            continue
        import difflib  # only for a misspelling: kept off the start-up path

        mine = difflib.get_close_matches(name, own, n=1, cutoff=0.6)
        nearest = mine[0] if mine else closest_flag(name)
        hint = f"; did you mean {nearest}?" if nearest else ""
        raise InputError(name, f"unknown option of layerfit {command} (and of llama-server){hint}")


SHORT_COMMANDS = frozenset({"estimate", "schema", "examples", "cache"})
"""Subcommands that search nothing: they end within a second, their allocations bounded by the
input's checked sizes, so they run without the cyclic garbage collector."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. ``--help``, argument errors and ``SHORT_COMMANDS`` run with the garbage
    collector off: their imports and pydantic's schema builds set off ~50 collections that free
    a few hundred objects (peak memory unchanged) and cost ~15 ms of an estimate's start-up."""
    without_plugin_scan()
    argv = sys.argv[1:] if argv is None else argv
    command = _command(argv)
    collecting = gc.isenabled()
    if command is None or command in SHORT_COMMANDS:
        gc.disable()
    try:
        return _run(command, argv)
    finally:
        if collecting:
            gc.enable()


def _run(command: str | None, argv: Sequence[str]) -> int:
    parser = build_parser(command)
    try:
        args, rest = parser.parse_known_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed on one line
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    try:
        check_unknown_options(parser, args.command, rest)
        code: int = args.handler(args, rest)
        sys.stdout.flush()
    except LayerfitError as exc:
        return _bad_input(str(exc))
    except BrokenPipeError:  # `layerfit plan ... | head -1`: the reader left; nothing more to say
        _silence_stdout()
        return EXIT_PLACED
    except (RecursionError, MemoryError, OverflowError, UnicodeError) as exc:  # input beyond what was checked
        return _bad_input(f"input too large or malformed ({type(exc).__name__}: {exc})")
    return code


def _bad_input(message: str) -> int:
    print(f"layerfit: error: {' '.join(message.split())}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not raise again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no real file (tests capture it)
        pass
    finally:
        os.close(devnull)
