"""Start-up: the CLI keeps pydantic's plugin loader (and ``importlib.metadata``) off its path while
every plugin is disabled, without changing what it prints; a user's own setting still rules. It
builds the options of the subcommand it runs only, and answers as the full parser does."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_gguf import write_tiny

REPO = Path(__file__).resolve().parent.parent
PROBE = """
import contextlib, io, sys
from layerfit.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    assert main(['estimate', sys.argv[1]]) == 0
print('importlib.metadata' in sys.modules)
print(type(sys.modules['pydantic.plugin._loader']).__name__)
print(out.getvalue())
"""


def _estimate(model: Path, plugins_off: str | None) -> tuple[str, str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYDANTIC_DISABLE_PLUGINS"}
    if plugins_off is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = plugins_off
    argv = [sys.executable, "-c", PROBE, str(model)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO, env=env)
    metadata, loader, printed = done.stdout.split("\n", 2)
    return metadata, loader, printed


def test_the_plugin_loader_stands_aside_only_while_every_plugin_is_off(tmp_path: Path) -> None:
    model = write_tiny(tmp_path)
    default = _estimate(model, None)
    assert default[:2] == ("False", "NoPluginLoader")
    for value in ("__all__", "1", "true"):
        assert _estimate(model, value)[:2] == ("False", "NoPluginLoader")
    own = _estimate(model, "some-plugin")  # some plugin left on: pydantic's own loader looks for them
    assert own[:2] == ("True", "module")
    assert own[2] == default[2] and "blocks" in default[2]


def test_the_stand_in_hands_any_other_name_to_pydantic_s_loader() -> None:
    code = (
        "import sys\nfrom layerfit.cli.plugins import without_plugin_scan\nwithout_plugin_scan()\n"
        "from pydantic.plugin import _loader as stand_in\n"
        "assert stand_in.get_plugins() == () and not hasattr(stand_in, '__path__')\n"
        "assert 'importlib.metadata' not in sys.modules\n"
        "print(type(stand_in).__name__, stand_in.PYDANTIC_ENTRY_POINT_GROUP)\n"
        "print(type(sys.modules[stand_in.__name__]).__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.split() == ["NoPluginLoader", "pydantic", "module"]


def _answer(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[int, str]:
    """What parsing ``argv`` prints (help or error) and its exit code."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            parser.parse_known_args(argv)
        except SystemExit as exc:
            return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def test_a_parser_built_for_one_subcommand_answers_as_the_whole_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """``main`` builds only the subcommand it runs: its help and its errors are the full parser's,
    and the other subcommands (those of other modules) are left as bare names."""
    from layerfit.cli import build_parser
    from layerfit.cli.common import SUBCOMMANDS

    monkeypatch.setenv("COLUMNS", "100")
    whole = build_parser()
    for name, (module, _) in SUBCOMMANDS.items():
        one = build_parser(name)
        for argv in ([name, "--help"], [name], [name, "--json", "--time-limit", "x"], [name, "a", "b", "c"]):
            assert _answer(one, argv) == _answer(whole, argv), argv
        for other, (home, _) in SUBCOMMANDS.items():
            if home != module:  # left bare: no options of its own, so its help is not the full one's
                assert _answer(one, [other, "--help"]) != _answer(whole, [other, "--help"])


@pytest.mark.parametrize("columns", ["100", "0", "wide", None])
def test_help_is_as_wide_as_argparse_makes_it(monkeypatch: pytest.MonkeyPatch, columns: str | None) -> None:
    """``terminal_columns`` is ``shutil.get_terminal_size().columns``: from ``COLUMNS`` when it is a
    positive number, else the terminal's, else 80."""
    import shutil

    from layerfit.cli.common import HELP_FORMAT, terminal_columns

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert terminal_columns() == shutil.get_terminal_size().columns
    assert columns != "100" or terminal_columns() == 100
    assert HELP_FORMAT("layerfit")._width == argparse.HelpFormatter("layerfit")._width


def test_an_estimate_runs_without_garbage_collections(tmp_path: Path) -> None:
    """The collector is off while a command that searches nothing runs, and on again after it."""
    code = (
        "import contextlib, gc, io, sys\nfrom layerfit.cli import main\nruns = []\n"
        "gc.callbacks.append(lambda phase, info: runs.append(phase))\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    assert main(['estimate', sys.argv[1]]) == 0\n"
        "print(len(runs), gc.isenabled())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(write_tiny(tmp_path))], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert done.stdout.split() == ["0", "True"]


def test_searches_keep_the_garbage_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    import layerfit.cli as cli

    seen: dict[str | None, bool] = {}

    def run(command: str | None, argv: object) -> int:
        seen[command] = gc.isenabled()
        if command == "schema":
            raise KeyboardInterrupt
        return 0

    monkeypatch.setattr(cli, "_run", run)
    for argv in (["plan"], ["explain"], ["replan"], ["estimate"], ["examples"], ["--help"]):
        cli.main(argv)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["schema"])
    assert seen == {
        "plan": True,
        "explain": True,
        "replan": True,
        "estimate": False,
        "examples": False,
        None: False,
        "schema": False,
    }
    assert gc.isenabled()
