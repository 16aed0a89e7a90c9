"""A loaded or slow machine, emulated by the clock the planner reads (``time.perf_counter``), not by
loading this one: every CP-SAT solve seeming to take longer, or every step; and the plan JSON
without its wall-clock figures, for comparing plans made under either."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from ortools.sat.python import cp_model
from pydantic import BaseModel

_STEP_MS = re.compile(r":\d+ms(?=,|$)")


@contextmanager
def slow_solves(delay_s: float) -> Iterator[None]:
    """Every CP-SAT solve seems to take ``delay_s`` longer: ``time.perf_counter`` runs that much
    ahead after each (as on a machine whose other processes take the CPU while CP-SAT runs)."""
    real_clock, real_solve = time.perf_counter, cp_model.CpSolver.solve
    late = [0.0]

    def solve(self: cp_model.CpSolver, *args: Any, **kwargs: Any) -> cp_model.CpSolverStatus:
        status = real_solve(self, *args, **kwargs)
        late[0] += delay_s
        return status

    with (
        mock.patch.object(time, "perf_counter", lambda: real_clock() + late[0]),
        mock.patch.object(cp_model.CpSolver, "solve", solve),
    ):
        yield


@contextmanager
def ticking_clock(tick_s: float) -> Iterator[None]:
    """Each read of ``time.perf_counter`` is ``tick_s`` later than the one before (beside the real
    time gone by): a small tick is a machine slower at every step, a large one puts every deadline
    taken before the next read in the past (the safety stop fires)."""
    real_clock = time.perf_counter
    reads = [0]

    def clock() -> float:
        reads[0] += 1
        return real_clock() + reads[0] * tick_s

    with mock.patch.object(time, "perf_counter", clock):
        yield


def planner_under(emulation: Callable[[], Any]) -> Any:
    """``mock.patch`` of ``layerfit.planning.planner.plan`` that runs each outermost call under ``emulation()``
    (a context manager), so that only the single-deployment planner sees it."""
    from layerfit.planning import planner

    real = planner.plan
    inside = [False]

    def plan(*args: Any, **kwargs: Any) -> Any:
        if inside[0]:
            return real(*args, **kwargs)
        inside[0] = True
        try:
            with emulation():
                return real(*args, **kwargs)
        finally:
            inside[0] = False

    return mock.patch.object(planner, "plan", plan)


def stable_json(result: BaseModel) -> str:
    """``result`` as ``--json`` prints it, less its wall-clock figures: each stage's ``wall_time_s``
    (and the fleet's ``*_s`` stage times and executor), and the milliseconds of each CP-SAT step in
    the solver's ``steps`` detail. What is left is the same on every run unless a safety stop fired."""
    data = json.loads(result.model_dump_json())
    for stats in data["stats"]:
        del stats["wall_time_s"]
        details = stats["details"]
        if "steps" in details:
            details["steps"] = _STEP_MS.sub("", details["steps"])
        if stats["engine"] not in ("heuristic", "cp-sat"):
            stats["details"] = {k: v for k, v in details.items() if not k.endswith("_s") and k != "executor"}
    return json.dumps(data, sort_keys=True)
