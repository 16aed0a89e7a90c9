"""Progress of long solves: which stage, how long so far, the best value found and its bound, in
the stage's own units.

Solvers call ``report``; what happens then depends on the reporter installed with ``reporting``:
the command line installs a live display (``LiveReporter``, drawn by ``rich`` on a terminal's
standard error) and nothing at all when standard error is piped or ``--json`` is given. Library
users who ask for progress without installing a reporter get plain lines on standard error.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TextIO

if TYPE_CHECKING:
    from ortools.sat.python import cp_model


@dataclass(frozen=True)
class Progress:
    """One progress report: a stage, the time since the work began, and best/bound in ``unit``."""

    stage: str
    unit: str
    elapsed_s: float
    best: float | None = None
    bound: float | None = None
    note: str = ""

    @property
    def gap(self) -> float | None:
        """Relative distance between best and bound (0 when proven)."""
        if self.best is None or self.bound is None:
            return None
        return abs(self.bound - self.best) / max(1.0, abs(self.best))

    def line(self) -> str:
        """The report as one line of text."""
        parts = [f"[{self.elapsed_s:7.2f} s] {self.stage}"]
        if self.best is not None:
            parts.append(f"best {self.best:.0f} {self.unit}")
        if self.bound is not None:
            parts.append(f"bound {self.bound:.0f} {self.unit}")
        if self.gap is not None:
            parts.append(f"gap {self.gap:.1%}")
        if self.note:
            parts.append(self.note)
        return ", ".join(parts)


class Reporter(Protocol):
    def update(self, progress: Progress) -> None: ...


class LineReporter:
    """Plain lines on a stream (standard error by default)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream

    def update(self, progress: Progress) -> None:
        print(progress.line(), file=self._stream or sys.stderr, flush=True)


class LiveReporter:
    """A live display of the latest report, redrawn in place with a running clock (``rich``)."""

    def __init__(self, console: Any = None, title: str = "layerfit") -> None:
        from rich.console import Console
        from rich.live import Live

        self._console = console if console is not None else Console(stderr=True)
        self._title = title
        self._latest: Progress | None = None
        self._started = time.perf_counter()
        self._live = Live(self, console=self._console, refresh_per_second=4, transient=True)

    def __rich__(self) -> Any:
        from rich.text import Text

        elapsed = time.perf_counter() - self._started
        if self._latest is None:
            return Text(f"{self._title}: starting ({elapsed:.1f} s)")
        latest = self._latest
        text = Text(f"{self._title}: {latest.stage}", style="bold")
        text.append(f"  {elapsed:.1f} s")
        if latest.best is not None:
            text.append(f"  best {latest.best:.0f} {latest.unit}")
        if latest.bound is not None:
            text.append(f"  bound {latest.bound:.0f} {latest.unit}")
        if latest.gap is not None:
            text.append(f"  gap {latest.gap:.1%}", style="green" if latest.gap == 0 else "yellow")
        if latest.note:
            text.append(f"  {latest.note}")
        return text

    def update(self, progress: Progress) -> None:
        self._latest = progress
        self._live.refresh()

    def __enter__(self) -> LiveReporter:
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.stop()


_REPORTER: ContextVar[Reporter | None] = ContextVar("layerfit_progress_reporter", default=None)


@contextmanager
def reporting(reporter: Reporter | None) -> Iterator[None]:
    """Send the reports made inside the block to ``reporter`` (``None``: drop them)."""
    token = _REPORTER.set(reporter if reporter is not None else _Silent())
    try:
        yield
    finally:
        _REPORTER.reset(token)


class _Silent:
    def update(self, progress: Progress) -> None:
        return None


def active() -> bool:
    """Whether a reporter that shows something is installed (``reporting`` with a reporter)."""
    return not isinstance(_REPORTER.get(), _Silent | None)


def report(progress: Progress) -> None:
    """Hand a report to the installed reporter, or print it as a line when none is installed."""
    (_REPORTER.get() or LineReporter()).update(progress)


def solution_callback(
    stage: str, unit: str, started: float, *, negate: bool = False
) -> cp_model.CpSolverSolutionCallback:
    """A CP-SAT callback that reports every improving solution of ``stage`` (``negate``: the model
    minimises the negative of what is reported)."""
    from ortools.sat.python import cp_model

    sign = -1.0 if negate else 1.0

    class _Callback(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            report(
                Progress(
                    stage=stage,
                    unit=unit,
                    elapsed_s=time.perf_counter() - started,
                    best=sign * self.ObjectiveValue(),
                    bound=sign * self.BestObjectiveBound(),
                )
            )

    return _Callback()


def stderr_is_terminal() -> bool:
    """Whether standard error is an interactive terminal (live displays only go there)."""
    return sys.stderr.isatty()
