"""Work budgets: how much each stage of ``plan_fleet`` may do, fixed by the input and the time
limit, so that the same input gives the same plan under any load.

A stage that can be cut short counts its work in nominal seconds (about the seconds it takes on an
idle machine): CP-SAT's deterministic time, and counted steps (a worker's multi-GPU layouts, a
replica placed one at a time, a group of workers searched) at a fixed cost each, sized by the
input. It stops when its share of ``WORK_SHARE`` x the time limit is spent. The wall clock is
only a safety stop: a stage whose deadline passes first stops too, and the plan says so (the
``safety_stops`` detail, and a reason); only then may the plan differ from run to run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from layerfit.budget.deadline import Deadline
from layerfit.budget.work import Allowance
from layerfit.domain.fleet import FleetPlan
from layerfit.domain.plan import Reason, ReasonKind, Severity

WORK_SHARE = 0.6
"""Nominal seconds of work per second of ``time_limit_s``: the rest is room for what is not
counted (building models, decoding) and for a loaded machine before the safety stop fires."""
DETERMINISTIC_PER_S = 0.2
"""CP-SAT deterministic seconds per nominal second (measured on the fleet masters and groups:
0.13-0.33 deterministic seconds per CPU second)."""
HOST_LAYOUT_S = 0.0008
"""Nominal cost of looking for one worker's fewest-GPU full offload (candidate generation)."""
PLANNER_S = 0.5
"""Nominal cost of the single-deployment planner's layouts over the whole cluster."""
SEED_PER_GPU_S = 25e-6
"""Nominal cost of placing one replica one at a time, per GPU of the cluster."""
COLUMN_S = 0.15e-3
"""Nominal cost of one candidate layout through the plan: made and checked, a column of the
master and of column generation's LP, looked at by the greedy start."""
GROUP_PER_OPTION_S = 0.35e-6
"""Nominal cost of building one group of the footprint search, per candidate of the master."""
GROUP_SOLVE_S = 0.01
"""Nominal cost of one group's CP-SAT model beyond its deterministic time."""


@dataclass
class Budget(Allowance):
    """A fleet stage's allowance, and the stages whose safety stop fired (shared by a budget and
    every part of it)."""

    stops: list[str] = field(default_factory=list, kw_only=True)

    @classmethod
    def of(cls, time_limit_s: float, deadline: Deadline | None = None) -> Budget:
        """The whole plan's budget: ``WORK_SHARE`` x the limit, the limit itself as the safety stop."""
        return cls(time_limit_s * WORK_SHARE, deadline or Deadline.after(time_limit_s))

    def final(self) -> Deadline:
        """The whole plan's deadline (that of the budget every other is a part of)."""
        budget: Allowance = self
        while budget.parent is not None:
            budget = budget.parent
        return budget.deadline

    def affords(self, cost_s: float) -> bool:
        """Whether a step of this nominal cost still fits."""
        return cost_s <= self.left()

    def part(self, fraction: float, deadline: Deadline | None = None) -> Budget:
        """``fraction`` of what is left, with the same share of the wall-clock time left as its
        safety stop (or ``deadline``, never later than this budget's)."""
        fraction = min(1.0, max(0.0, fraction))
        stop = self.deadline.share(fraction) if deadline is None else deadline.earlier(self.deadline)
        return Budget(self.left() * fraction, stop, parent=self, stops=self.stops)

    def safety_stop(self, stage: str) -> None:
        """The wall clock stopped ``stage`` before its work budget was spent."""
        if stage not in self.stops:
            self.stops.append(stage)

    def expired(self, stage: str) -> bool:
        """The safety stop has fired (and is recorded for ``stage``)."""
        if self.deadline.expired():
            self.safety_stop(stage)
            return True
        return False

    def limit(self, solver: cp_model.CpSolver, nominal_s: float) -> None:
        """CP-SAT limits for ``nominal_s`` of this budget: deterministic time, the deadline as a guard."""
        solver.parameters.max_deterministic_time = max(0.0, nominal_s) * DETERMINISTIC_PER_S
        solver.parameters.max_time_in_seconds = max(0.01, self.deadline.remaining())

    def charge(self, solver: cp_model.CpSolver, status: cp_model.CpSolverStatus, stage: str) -> None:
        """Charge a CP-SAT solve; a solve stopped before its deterministic limit (and not finished)
        was stopped by the wall clock."""
        used = solver.deterministic_time
        self.spend(used / DETERMINISTIC_PER_S)
        finished = status in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
        if not finished and used < 0.99 * solver.parameters.max_deterministic_time:
            self.safety_stop(stage)


def safety_reason(stops: list[str]) -> Reason | None:
    """What the plan says when the wall clock cut a stage short, else nothing."""
    if not stops:
        return None
    message = (
        f"the time limit's wall-clock safety stop cut short: {', '.join(stops)} (the machine was slower than the "
        "work budget allows for); the plan may differ from run to run, a larger time_limit_s avoids it"
    )
    return Reason(kind=ReasonKind.STRATEGY_SKIPPED, resource="time_limit_s", severity=Severity.INFO, message=message)


def with_safety_stop(plan: FleetPlan, stage: str) -> FleetPlan:
    """``plan`` with one more stage its safety stop (or a time limit of its own) cut short: in the
    ``safety_stops`` detail and in the one reason that names them."""
    before = plan.stats[0].safety_stops
    stops = [*before, stage]
    first = plan.stats[0].model_copy(update={"safety_stops": tuple(stops)})
    old = safety_reason(list(before))
    said = safety_reason(stops)
    reasons = (*(reason for reason in plan.reasons if reason != old), *([said] if said else []))
    return plan.model_copy(update={"stats": (first, *plan.stats[1:]), "reasons": reasons})


def parallel_reason(workers: int) -> Reason | None:
    """What the plan says when CP-SAT searches the master with several workers (``0``: one per
    core): the parallel search depends on thread timing, with or without a safety stop."""
    if workers == 1:
        return None
    message = (
        f"num_search_workers={workers}: CP-SAT's parallel search depends on thread timing, so the plan may "
        "differ from run to run (among equally good plans where every tier is proven, on the tiers' values "
        "where one is not); 1 gives the same plan on every run"
    )
    return Reason(
        kind=ReasonKind.STRATEGY_SKIPPED, resource="num_search_workers", severity=Severity.INFO, message=message
    )
