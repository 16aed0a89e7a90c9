"""Work budgets of ``plan()``: how much each stage may do, fixed by the input and the time limit,
so that the same input gives the same plan under any load.

A stage that can be cut short counts its work in nominal seconds (about the seconds it takes on an
idle machine): CP-SAT's deterministic time (``DETERMINISTIC_PER_S`` of it per nominal second) plus
a fixed cost per CP-SAT call, the heuristic's evaluations of a placement and steps of its loops at
a fixed cost each, a fixed cost per GPU for the views and instances built. ``plan()`` gets ``WORK_SHARE`` x
``time_limit_s`` of them; the heuristic, the solver's steps, its tie-break and alternatives, and
``explain``'s relaxed plans take their shares of that. The wall clock (``Deadline``) is only a
safety stop: a stage it stops before its work budget is spent says so (``safety_stops`` in its
``EngineStats``), and only then may the plan differ from run to run. (The fleet planner's
``layerfit.budget.fleet`` works the same way, with its own costs.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from layerfit.budget.deadline import Deadline

if TYPE_CHECKING:  # the heuristic uses this module too, and does not load OR-Tools
    from ortools.sat.python import cp_model

WORK_SHARE = 0.6
"""Nominal seconds of work per second of ``time_limit_s``: the rest is room for what is not
counted (building models, checks, decoding) and for a slower machine before the safety stop fires."""
DETERMINISTIC_PER_S = 0.5
"""CP-SAT deterministic seconds per nominal second. Measured on ``plan()``'s solves of
``benchmarks/solver_bench.py`` (seeds 1-10 quick and 1-3 full, idle, one search worker): 0.25-0.5
(5th percentile) to 0.7-0.9 (median) to 2.4-3.0 (largest) deterministic seconds per CPU second on
solves of over 20 ms; the solves a limit cut ran at 0.57-3.0. Below 20 ms a solve is mostly
loading and presolve set-up, with almost no deterministic time: ``SOLVE_S`` counts that."""
SOLVE_S = 0.003
"""Nominal cost of one CP-SAT call beyond its deterministic time (building and loading the model;
1.9 ms on average over the calls of under 5 ms)."""
EVALUATION_S = 30e-6
"""Nominal cost of one heuristic evaluation of a placement: 17 us measured on 400 blocks over nine
devices, 16-22 us on one device, with the layer shapes cached; 71 us where a process computes
them the first time (``heuristics.placement``)."""
STEP_S = 4e-6
"""Nominal cost of one step of a heuristic search's loop (a device combination looked at: 31,616
of them, with no evaluation, took 0.09 s on 1,024 GPUs)."""
HEURISTIC_PER_GPU_S = 20e-6
"""Nominal cost of the heuristic's views and pre-checks, per GPU of the cluster (16 ms on 1,024)."""
SOLVER_PER_GPU_S = 50e-6
"""Nominal cost of the solver's instance (GPU classes, scaled figures), per GPU of the cluster."""
SOLVER_STEP_PER_WORKER_S = 150e-6
"""Nominal cost of one step of the solver (its capacity bounds, greedy layouts and model), per
worker of the cluster: 100-250 us measured on 500-570 workers, beyond the CP-SAT calls' costs."""
PROVEN_SHARE = 0.99
"""A CP-SAT solve that ended unproven with less than this share of its deterministic limit spent
was stopped by the wall clock (or by CP-SAT's own wall-time limits), not by its work budget."""


@dataclass
class Allowance:
    """Nominal seconds a stage may spend, and its wall-clock safety stop; spending a part charges
    every budget it is a part of. ``plan()``'s ``Work`` and the fleet's ``Budget`` are both."""

    nominal_s: float
    deadline: Deadline
    spent_s: float = 0.0
    parent: Allowance | None = None

    def left(self) -> float:
        return max(0.0, self.nominal_s - self.spent_s)

    def spend(self, cost_s: float) -> None:
        """Charge this budget and every budget it is a part of."""
        budget: Allowance | None = self
        while budget is not None:
            budget.spent_s += cost_s
            budget = budget.parent


@dataclass
class Work(Allowance):
    """``plan()``'s budget and its stages' parts."""

    @classmethod
    def of(cls, time_limit_s: float, deadline: Deadline | None = None) -> Work:
        """A plan's budget: ``WORK_SHARE`` x the limit; the limit (or ``deadline``, when sooner) as
        the safety stop."""
        return cls(time_limit_s * WORK_SHARE, Deadline.after(time_limit_s).earlier(deadline))

    def part(self, nominal_s: float, deadline: Deadline | None = None) -> Work:
        """At most ``nominal_s`` of what is left, with this budget's safety stop (or ``deadline``,
        when sooner)."""
        stop = self.deadline if deadline is None else deadline.earlier(self.deadline)
        return Work(min(max(0.0, nominal_s), self.left()), stop, parent=self)

    def expired(self) -> bool:
        """The safety stop has fired."""
        return self.deadline.expired()

    def limit(self, solver: cp_model.CpSolver, nominal_s: float) -> None:
        """CP-SAT limits for ``nominal_s`` of this budget: deterministic time, the deadline as a guard."""
        solver.parameters.max_deterministic_time = max(0.0, min(nominal_s, self.left())) * DETERMINISTIC_PER_S
        solver.parameters.max_time_in_seconds = max(1e-3, self.deadline.remaining())

    def charge(self, solver: cp_model.CpSolver, status: cp_model.CpSolverStatus) -> bool:
        """Charge a CP-SAT call; whether the wall clock, not its work budget, ended it unproven."""
        from ortools.sat.python import cp_model

        used = solver.deterministic_time
        self.spend(SOLVE_S + used / DETERMINISTIC_PER_S)
        proven = status in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
        return not proven and used < PROVEN_SHARE * solver.parameters.max_deterministic_time


def heuristic_cost(evaluations: int, steps: int, gpus: int) -> float:
    """Nominal seconds of a heuristic run: its evaluations, its loops' steps and its views of
    ``gpus`` GPUs."""
    return evaluations * EVALUATION_S + steps * STEP_S + gpus * HEURISTIC_PER_GPU_S
