"""Solving the master's tiers in order, each fixing the previous optimum.

Priority weight placed (weights chosen so that one replica of a higher priority outweighs every
replica of all lower ones), layers on GPUs, replicas moved (only replicas with a current placement
count; pinned replicas are fixed), then GPUs and workers used.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from layerfit.domain.fleet import FleetConfig
from layerfit.domain.plan import Status
from layerfit.errors import SolverError
from layerfit.fleet.greedy import greedy
from layerfit.fleet.master import Counts, Master
from layerfit.progress import Progress, report, solution_callback


@dataclass(frozen=True)
class Tier:
    name: str
    expression: cp_model.LinearExprT
    maximize: bool
    simple_bound: int | None
    """A value no solution can beat (every replica placed, ...), if one is known."""


TIER_NAMES = ("priority weight placed", "layers on GPUs", "replicas moved", "GPUs and workers used")
TIER_UNITS = ("priority-weighted replicas", "layers", "replicas", "(GPUs x (workers + 1) + workers)")
"""What each tier's value counts, for progress reports."""


def _stage(position: int, n_tiers: int) -> str:
    return f"fleet tier {position + 1}/{n_tiers} ({TIER_NAMES[position]})"


def tiers_of(master: Master) -> list[Tier]:
    placed, layers, moved = master.simple_bounds()
    return [
        Tier(TIER_NAMES[0], master.placed, True, placed),
        Tier(TIER_NAMES[1], master.layers, True, layers),
        Tier(TIER_NAMES[2], master.moved, False, moved),
        Tier(TIER_NAMES[3], master.footprint, False, None),
    ]


@dataclass(frozen=True)
class TierOutcome:
    """Status, replicas per candidate, tier values (maximised: as is; minimised: negated), the
    first tier not proven, and the master's own bound per tier solved."""

    status: Status
    counts: Counts
    values: tuple[int, ...]
    gap_tier: str | None
    master_bounds: tuple[float, ...] = ()
    proven: tuple[bool, ...] = ()
    """Per tier solved: optimal over the candidates (given the earlier tiers' values)."""


def _solver(config: FleetConfig) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.random_seed = config.seed
    solver.parameters.num_workers = config.num_search_workers or (os.cpu_count() or 1)
    return solver


class _Stages:
    """The tiers solved so far: incumbent, values, status and the first gap."""

    def __init__(self, master: Master, config: FleetConfig) -> None:
        self.master = master
        self.config = config
        self.started = time.perf_counter()
        self.solver = _solver(config)
        self.values: list[int] = []
        self.bounds: list[float] = []
        self.proven: list[bool] = []
        self.status = Status.OPTIMAL
        self.gap_tier: str | None = None
        first = greedy(master)
        self.counts: Counts | None = first if master.satisfies_pins(first) else None
        self._hint(first)

    def _hint(self, counts: Counts) -> None:
        self.master.model.clear_hints()  # type: ignore[no-untyped-call]
        for var, value in zip(self.master.all_vars(), (n for row in counts for n in row), strict=True):
            self.master.model.add_hint(var, value)

    def fix(self, tier: Tier, value: int) -> None:
        """Record the tier's value and keep it in the model for the later tiers."""
        self.values.append(value if tier.maximize else -value)
        self.bounds.append(float(value))
        self.proven.append(True)
        if tier.maximize:
            self.master.model.add(tier.expression >= value)
        else:
            self.master.model.add(tier.expression <= value)

    def _stop(self, tier: Tier) -> None:
        self.status = Status.FEASIBLE if self.counts is not None else Status.UNKNOWN
        self.gap_tier = tier.name

    def reaches_simple_bound(self, position: int, tier: Tier) -> bool:
        return (
            self.counts is not None
            and tier.simple_bound is not None
            and self.master.tier_values(self.counts)[position] == tier.simple_bound
        )

    def solve(self, position: int, tier: Tier, n_tiers: int) -> bool:
        """Solve one tier with its share of the remaining time; whether to go on."""
        remaining = self.config.time_limit_s - (time.perf_counter() - self.started)
        if remaining <= 0.05:
            self._stop(tier)
            return False
        share = remaining / (n_tiers - position) if position < n_tiers - 1 else remaining
        self.solver.parameters.max_time_in_seconds = share if self.counts is not None else remaining * 0.7
        if tier.maximize:
            self.master.model.maximize(tier.expression)
        else:
            self.master.model.minimize(tier.expression)
        unit = TIER_UNITS[position] if position < len(TIER_UNITS) else ""
        callback = solution_callback(_stage(position, n_tiers), unit, self.started) if self.config.progress else None
        outcome = self.solver.solve(self.master.model, callback)
        if outcome == cp_model.INFEASIBLE:
            raise SolverError("fleet master model is infeasible (pinned replicas cannot all fit together)")
        if outcome not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            self._stop(tier)
            return False
        value = round(self.solver.objective_value)
        flat = iter([self.solver.value(var) for var in self.master.all_vars()])
        self.counts = [[next(flat) for _ in row] for row in self.master.x]
        if outcome == cp_model.FEASIBLE and self.status is Status.OPTIMAL:
            # The first tier not proven optimal decides the status and the reported gap; later
            # tiers still improve the solution with this tier's value fixed.
            self.status = Status.FEASIBLE
            self.gap_tier = tier.name
        self._hint(self.counts)
        self.fix(tier, value)
        self.bounds[-1] = self.solver.best_objective_bound
        self.proven[-1] = outcome == cp_model.OPTIMAL
        return True


def solve_tiers(master: Master, config: FleetConfig) -> TierOutcome:
    """Solve the tiers in order.

    The greedy start is the incumbent. A tier whose incumbent already reaches its simple bound
    (every replica placed, every layer on a GPU, no replica moved) is proven without a solve;
    otherwise CP-SAT gets its share of the remaining time, hinted with the incumbent.
    """
    stages = _Stages(master, config)
    tiers = tiers_of(master)
    for position, tier in enumerate(tiers):
        if stages.reaches_simple_bound(position, tier):
            assert tier.simple_bound is not None
            stages.fix(tier, tier.simple_bound)
            if config.progress:
                elapsed = time.perf_counter() - stages.started
                unit = TIER_UNITS[position] if position < len(TIER_UNITS) else ""
                value, stage = float(tier.simple_bound), _stage(position, len(tiers))
                report(Progress(stage, unit, elapsed, value, value, note="proven by a simple bound"))
        elif not stages.solve(position, tier, len(tiers)):
            break
    if stages.counts is None:
        return TierOutcome(Status.UNKNOWN, [[0] * len(row) for row in master.x], (), stages.gap_tier)
    return TierOutcome(
        stages.status,
        stages.counts,
        tuple(stages.values),
        stages.gap_tier,
        tuple(stages.bounds),
        tuple(stages.proven),
    )
