"""Solving the master's tiers in order, each fixing the previous optimum.

Priority weight placed (weights chosen so that one replica of a higher priority outweighs every
replica of all lower ones), layers on GPUs, replicas moved (only replicas with a current placement
count; pinned replicas are fixed), then GPUs and workers used.

Where a deployment is planned under ``objective: speed``, the busy decode time tier (``busy``)
comes after replicas moved and before GPUs and workers used: the sum, over every replica of such a
deployment, of its predicted decode time per token with every replica on its GPUs decoding at once
(in µs, exact: ``Master._busy_objective``). After the moves, because restarting a running replica
to make it faster is a disruption the plan should not buy on speed alone (a replica that must
move anyway goes where it runs fastest); before the GPUs tier, because fewer GPUs is exactly
stacking replicas on one GPU, which speed forbids where an idle GPU can take them. Without such a
deployment the tier is not there and the plans are those of the four tiers.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from layerfit.budget.fleet import Budget
from layerfit.budget.progress import Progress, report, solution_callback
from layerfit.domain.fleet import FleetConfig
from layerfit.domain.plan import Status
from layerfit.errors import SolverError
from layerfit.fleet.busy import BUSY_TIER
from layerfit.fleet.gaps import gap
from layerfit.fleet.greedy import greedy
from layerfit.fleet.lns import GROUP_WORKERS, footprint, search_footprint
from layerfit.fleet.master import Counts, Master


@dataclass(frozen=True)
class Tier:
    name: str
    expression: cp_model.LinearExprT
    maximize: bool
    simple_bound: int | None
    """A value no solution can beat (every replica placed, ...), if one is known."""


TIER_NAMES = ("priority weight placed", "layers on GPUs", "replicas moved", "GPUs and workers used")
TIER_UNITS = {
    TIER_NAMES[0]: "priority-weighted replicas",
    TIER_NAMES[1]: "layers",
    TIER_NAMES[2]: "replicas",
    BUSY_TIER: "us per token, summed over the replicas",
    TIER_NAMES[3]: "(GPUs x (workers + 1) + workers)",
}
"""What each tier's value counts, for progress reports."""
FOOTPRINT = TIER_NAMES[3]
"""The GPUs and workers tier."""
SEARCH_SHARE = 0.75
"""Share of the GPUs and workers tier's time for the search by groups of workers on a large fleet
(the rest: CP-SAT over the whole master, started from the search's plan)."""
FULL_SOLVE_MAX_VARS = 10_000
"""Above this many candidate variables, CP-SAT over the whole master gets the GPUs and workers tier
only once the search by groups has converged (at a thousand GPUs it improves nothing within a
minute, proves no bound, and overruns its limit under load)."""


MODEL_STAGE = "the master's model (not built in time: the greedy start is the plan)"


def _stage(position: int, tier: Tier, n_tiers: int) -> str:
    return f"fleet tier {position + 1}/{n_tiers} ({tier.name})"


def tiers_of(master: Master) -> list[Tier]:
    """The master's tiers in the order they are solved (the module docstring)."""
    placed, layers, moved = master.simple_bounds()
    built = master.built  # without the model, no expression (the tiers are only counted)
    speed = [Tier(BUSY_TIER, master.busy_time if built else 0, False, None)] if has_speed_tier(master) else []
    return [
        Tier(TIER_NAMES[0], master.placed if built else 0, True, placed),
        Tier(TIER_NAMES[1], master.layers if built else 0, True, layers),
        Tier(TIER_NAMES[2], master.moved if built else 0, False, moved),
        *speed,
        Tier(TIER_NAMES[3], master.footprint if built else 0, False, None),
    ]


def has_speed_tier(master: Master) -> bool:
    return master.busy is not None and master.busy.has_speed_tier


def tier_names(master: Master) -> tuple[str, ...]:
    return tuple(tier.name for tier in tiers_of(master))


def tier_value(master: Master, name: str, counts: Counts) -> int:
    """A solution's value on the tier of that name (a count: minimised tiers are not negated)."""
    if name == FOOTPRINT:
        return footprint(master, counts)
    if name == BUSY_TIER:
        return master.busy_value(counts)
    return master.tier_values(counts)[TIER_NAMES.index(name)]


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
    details: dict[str, str] = field(default_factory=dict)
    """How the footprint search by groups of workers ended, where it ran."""


def _solver(config: FleetConfig) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.random_seed = config.seed
    solver.parameters.num_workers = config.num_search_workers or (os.cpu_count() or 1)
    return solver


class _Stages:
    """The tiers solved so far: incumbent, values, status and the first gap."""

    def __init__(self, master: Master, config: FleetConfig, budget: Budget) -> None:
        self.master = master
        self.config = config
        self.budget = budget
        self.details: dict[str, str] = {}
        self.started = time.perf_counter()
        self.solver = _solver(config)
        self.values: list[int] = []
        self.bounds: list[float] = []
        self.proven: list[bool] = []
        self.status = Status.OPTIMAL
        self.gap_tier: str | None = None
        first = greedy(master)
        self.counts: Counts | None = first if master.satisfies_pins(first) else None
        if master.built:
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
        if not self.master.built:
            return
        if tier.maximize:
            self.master.model.add(tier.expression >= value)
        else:
            self.master.model.add(tier.expression <= value)

    def incumbent_value(self, tier: Tier) -> int:
        """The incumbent's value on a tier (a count: minimised tiers are not negated)."""
        assert self.counts is not None
        return tier_value(self.master, tier.name, self.counts)

    def keep(self, tier: Tier) -> None:
        """A tier with no time left or no solution from CP-SAT: the incumbent's value, not proven,
        no bound; the status says the plan is not proven from this tier on."""
        if self.counts is None:
            self.status, self.gap_tier = Status.UNKNOWN, self.gap_tier or tier.name
            return
        self.fix(tier, self.incumbent_value(tier))
        self.bounds[-1], self.proven[-1] = math.nan, False
        self._unproven(tier)

    def _unproven(self, tier: Tier) -> None:
        # The first tier not proven optimal decides the status and the reported gap; later tiers
        # still improve the solution with this tier's value fixed.
        if self.status is Status.OPTIMAL:
            self.status, self.gap_tier = Status.FEASIBLE, tier.name

    def reaches_simple_bound(self, tier: Tier) -> bool:
        return (
            self.counts is not None
            and tier.simple_bound is not None
            and self.incumbent_value(tier) == tier.simple_bound
        )

    def _search_footprint(self, share: float) -> bool:
        """On a fleet larger than one group of workers, the GPUs and workers tier first improves
        the incumbent group by group (``lns``): on a master too large for CP-SAT to improve within
        the limit (``FULL_SOLVE_MAX_VARS``) with the whole share, else with most of it. Whether
        CP-SAT over the whole master is still to run (the search converged, or the master is small)."""
        if self.counts is None or self.master.n_workers <= GROUP_WORKERS:
            return True
        large = len(self.master.all_vars()) > FULL_SOLVE_MAX_VARS
        fraction = share / max(1e-9, self.budget.left()) * (1.0 if large else SEARCH_SHARE)
        outcome = search_footprint(self.master, self.counts, self.budget.part(fraction), self.config.seed)
        self.counts = outcome.counts
        self.details["footprint_search"] = f"{outcome.ended} after {outcome.groups} groups"
        self._hint(self.counts)
        return not (large and outcome.ended != "converged")

    def solve(self, position: int, tier: Tier, n_tiers: int) -> bool:
        """Solve one tier with its share of the work budget left (the wall clock's share as its
        safety stop), never ending worse on it than the incumbent; whether there was budget to."""
        stage = _stage(position, tier, n_tiers)
        left = self.budget.left()
        if not self.master.built:  # its deadline passed while it was built: the greedy start is the plan
            self.budget.safety_stop(MODEL_STAGE)
            return False
        if left <= 0.05 or self.budget.expired(stage):
            return False
        share = left / (n_tiers - position) if position < n_tiers - 1 else left
        if tier.name == FOOTPRINT:
            if not self._search_footprint(share):
                self.keep(tier)
                return True
            share = max(0.05, share - (left - self.budget.left()))
        nominal = share if self.counts is not None else left * 0.7
        tier_budget = self.budget.part(nominal / max(1e-9, self.budget.left()))
        tier_budget.limit(self.solver, nominal)
        if tier.maximize:
            self.master.model.maximize(tier.expression)
        else:
            self.master.model.minimize(tier.expression)
        callback = solution_callback(stage, TIER_UNITS[tier.name], self.started) if self.config.progress else None
        outcome = self.solver.solve(self.master.model, callback)
        tier_budget.charge(self.solver, outcome, stage)
        if outcome == cp_model.INFEASIBLE:
            raise SolverError("fleet master model is infeasible (pinned replicas cannot all fit together)")
        if outcome not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            self.keep(tier)
            return self.counts is not None
        value = round(self.solver.objective_value)
        if self.counts is None or self._better(tier, value, self.incumbent_value(tier)):
            flat = iter([self.solver.value(var) for var in self.master.all_vars()])
            self.counts = [[next(flat) for _ in row] for row in self.master.x]
        else:
            value = self.incumbent_value(tier)
        self._hint(self.counts)
        self.fix(tier, value)
        self.bounds[-1] = self.solver.best_objective_bound
        bound = self.solver.best_objective_bound
        self.proven[-1] = outcome == cp_model.OPTIMAL or gap(value, bound, tier.maximize) == 0.0
        if not self.proven[-1]:
            self._unproven(tier)
        return True

    @staticmethod
    def _better(tier: Tier, value: int, incumbent: int) -> bool:
        return value > incumbent if tier.maximize else value < incumbent


def solve_tiers(master: Master, config: FleetConfig, budget: Budget | None = None) -> TierOutcome:
    """Solve the tiers in order, within ``budget`` (default: ``config.time_limit_s``'s).

    The greedy start is the incumbent. A tier whose incumbent already reaches its simple bound
    (every replica placed, every layer on a GPU, no replica moved) is proven without a solve;
    otherwise CP-SAT gets its share of the work budget left, hinted with the incumbent.
    """
    stages = _Stages(master, config, budget or Budget.of(config.time_limit_s))
    tiers = tiers_of(master)
    for position, tier in enumerate(tiers):
        if stages.reaches_simple_bound(tier):
            assert tier.simple_bound is not None
            stages.fix(tier, tier.simple_bound)
            if config.progress:
                elapsed = time.perf_counter() - stages.started
                value, stage = float(tier.simple_bound), _stage(position, tier, len(tiers))
                report(Progress(stage, TIER_UNITS[tier.name], elapsed, value, value, note="proven by a simple bound"))
        elif not stages.solve(position, tier, len(tiers)):
            for later in tiers[position:]:
                stages.keep(later)
            break
    if stages.counts is None:
        return TierOutcome(Status.UNKNOWN, [[0] * len(row) for row in master.candidates], (), stages.gap_tier)
    return TierOutcome(
        stages.status,
        stages.counts,
        tuple(stages.values),
        stages.gap_tier,
        tuple(stages.bounds),
        tuple(stages.proven),
        stages.details,
    )
