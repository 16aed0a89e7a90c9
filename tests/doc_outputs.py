"""Command outputs shown in the README and docs/, produced by running their commands.

A shown output is a fenced block right after a marker naming the command that prints it:

    <!-- output: layerfit explain --cluster examples/cluster.yaml --deployment examples/too-big.yaml -->
    ```
    deployment llama-70b-32k: infeasible
    ...
    ```

The command runs in ``bash`` from the repository root, with this interpreter's ``bin`` first on
the path (so ``layerfit`` and ``python`` are the ones under test); a marker may chain set-up
commands with ``&&``. Timings (``in 2.3 ms``) are compared as ``in <time>``. ``tests/test_docs.py``
compares every block with what its command prints; ``python tests/doc_outputs.py`` rewrites the
blocks with what the commands print now.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- output: (?P<command>.+?) -->\n```[a-z]*\n(?P<shown>.*?)^```$", re.M | re.S)
TIMING = re.compile(r"\bin \d+(?:\.\d+)? (?:ms|s)\b")
TIMEOUT_S = 120


class Shown(NamedTuple):
    """One shown output: where it is, its command, and the text the document shows."""

    page: Path
    command: str
    shown: str
    start: int
    end: int


def documents() -> list[Path]:
    """The README and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def shown_outputs(page: Path) -> list[Shown]:
    text = page.read_text()
    return [
        Shown(page, m.group("command"), m.group("shown"), m.start("shown"), m.end("shown"))
        for m in MARKER.finditer(text)
    ]


def run(command: str) -> str:
    """What ``command`` prints on standard output (and error, after it), as the docs show it."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update({"COLUMNS": "120", "NO_COLOR": "1", "PYTHONHASHSEED": "0"})
    done = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    return done.stdout + done.stderr


def normalised(text: str) -> str:
    return TIMING.sub("in <time>", text).rstrip("\n")


def rewrite(page: Path) -> int:
    """Every shown output of ``page`` replaced by what its command prints now; how many changed."""
    text = page.read_text()
    changed = 0
    for shown in reversed(shown_outputs(page)):
        printed = run(shown.command).rstrip("\n") + "\n"
        if normalised(printed) != normalised(shown.shown):
            text = text[: shown.start] + printed + text[shown.end :]
            changed += 1
    page.write_text(text)
    return changed


if __name__ == "__main__":
    for document in documents():
        count = rewrite(document)
        if count:
            print(f"{document.relative_to(ROOT)}: {count} output(s) rewritten")
