"""Solving the master's tiers in order, each fixing the previous optimum.

Priority weight placed (weights chosen so that one replica of a higher priority outweighs every
replica of all lower ones), layers on GPUs, replicas kept in place (relative to the current
placement; pinned replicas are fixed), then GPUs and workers used.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from layerfit.domain.fleet import FleetConfig
from layerfit.domain.plan import Status
from layerfit.errors import SolverError
from layerfit.fleet.greedy import greedy
from layerfit.fleet.master import Counts, Master


class _Progress(cp_model.CpSolverSolutionCallback):
    def __init__(self, stage: str, started: float) -> None:
        super().__init__()
        self._stage = stage
        self._started = started

    def on_solution_callback(self) -> None:
        print(
            f"[{time.perf_counter() - self._started:7.2f}s] {self._stage}: objective {self.ObjectiveValue():.0f}, "
            f"bound {self.BestObjectiveBound():.0f}",
            file=sys.stderr,
            flush=True,
        )


@dataclass(frozen=True)
class TierOutcome:
    """Status, replicas per candidate, tier values, the gap and the first tier not proven."""

    status: Status
    counts: Counts
    values: tuple[int, ...]
    gap: float | None
    gap_tier: str | None


def _tiers(master: Master) -> list[tuple[str, cp_model.LinearExprT, bool]]:
    return [
        ("priority weight placed", master.placed, True),
        ("layers on GPUs", master.layers, True),
        ("replicas kept in place", master.kept, True),
        ("GPUs and workers used", master.footprint, False),
    ]


def _solver(config: FleetConfig) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.random_seed = config.seed
    solver.parameters.num_workers = config.num_search_workers or (os.cpu_count() or 1)
    return solver


def _hint(master: Master, counts: Counts) -> None:
    for var, value in zip(master.all_vars(), (n for row in counts for n in row), strict=True):
        master.model.add_hint(var, value)


def solve_tiers(master: Master, config: FleetConfig) -> TierOutcome:
    """Solve the tiers in order.

    The greedy start is the incumbent. A maximised tier whose incumbent already reaches a simple
    upper bound (every replica placed, every layer on a GPU, every replica kept) is proven without
    a solve; otherwise CP-SAT gets its share of the remaining time, hinted with the incumbent.
    The first tier not proven optimal decides the status and the reported gap; later tiers still
    improve the solution with that tier's value fixed.
    """
    started = time.perf_counter()
    tiers = _tiers(master)
    bounds = master.upper_bounds()
    solver = _solver(config)
    values: list[int] = []
    status = Status.OPTIMAL
    gap: float | None = 0.0
    gap_tier: str | None = None
    first = greedy(master)
    counts: Counts | None = first if master.satisfies_pins(first) else None
    _hint(master, first)
    for position, (name, expression, maximize) in enumerate(tiers):
        if counts is not None and position < len(bounds) and master.tier_values(counts)[position] == bounds[position]:
            values.append(bounds[position])
            master.model.add(expression >= bounds[position])
            continue
        remaining = config.time_limit_s - (time.perf_counter() - started)
        if remaining <= 0.05:
            status = Status.FEASIBLE if counts is not None else Status.UNKNOWN
            gap, gap_tier = None, name
            break
        share = remaining / (len(tiers) - position) if position < len(tiers) - 1 else remaining
        solver.parameters.max_time_in_seconds = share if counts is not None else remaining * 0.7
        if maximize:
            master.model.maximize(expression)
        else:
            master.model.minimize(expression)
        outcome = solver.solve(master.model, _Progress(name, started) if config.progress else None)
        if outcome not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if outcome == cp_model.INFEASIBLE:
                raise SolverError("fleet master model is infeasible (pinned replicas cannot all fit together)")
            status = Status.FEASIBLE if counts is not None else Status.UNKNOWN
            gap, gap_tier = None, name
            break
        value = round(solver.objective_value)
        values.append(value if maximize else -value)
        flat = iter([solver.value(var) for var in master.all_vars()])
        counts = [[next(flat) for _ in row] for row in master.x]
        if outcome == cp_model.FEASIBLE and status is Status.OPTIMAL:
            status = Status.FEASIBLE
            gap, gap_tier = abs(solver.best_objective_bound - value) / max(1.0, abs(value)), name
        master.model.clear_hints()  # type: ignore[no-untyped-call]
        _hint(master, counts)
        if maximize:
            master.model.add(expression >= value)
        else:
            master.model.add(expression <= value)
    if counts is None:
        return TierOutcome(Status.UNKNOWN, [[0] * len(row) for row in master.x], (), None, gap_tier)
    return TierOutcome(status, counts, tuple(values), gap, gap_tier)
