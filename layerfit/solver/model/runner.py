"""One CP-SAT call on a built model: parameters, status, solution, hints.

Each call spends a ``layerfit.budget.work.Work`` budget: CP-SAT stops at its deterministic time limit (the
nominal seconds given, or what is left), the same on every run, and its wall-clock limit is the
budget's safety stop.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model
from ortools.sat.python import cp_model_helper as cmh

from layerfit.budget.progress import active as progress_active
from layerfit.budget.work import DETERMINISTIC_PER_S, Work
from layerfit.domain.config import PlannerConfig
from layerfit.domain.layout import Layout
from layerfit.errors import SolverError
from layerfit.solver.model.build import BuiltModel
from layerfit.solver.model.canonical import canonical_layout
from layerfit.solver.model.decode import decision_values, decode
from layerfit.solver.model.progress import Measure, progress_callback
from layerfit.solver.model.variables import Expr

HINT_SHARE = 0.1
"""Share of the work left a hint completion may use."""
INCOMPLETE = "incomplete"
"""A hint completion its work budget cut short (``complete_hint``)."""
STOPPED = "stopped"
"""A hint completion the wall clock (the safety stop) cut short."""


@dataclass(frozen=True)
class Run:
    """One CP-SAT call: its status, solution (every variable, by index) and objective figures."""

    status: cp_model.CpSolverStatus
    solution: tuple[int, ...]
    objective: float
    bound: float
    wall_time_s: float
    cut: bool = False
    """A limit ended the solve before a proof (or before it began)."""
    stopped: bool = False
    """That limit was the wall clock (the safety stop), not the work budget: another run may differ."""

    @property
    def found(self) -> bool:
        return self.status in (cp_model.OPTIMAL, cp_model.FEASIBLE)

    @property
    def proven(self) -> bool:
        """OPTIMAL, or INFEASIBLE: the answer holds for the whole model."""
        return self.status in (cp_model.OPTIMAL, cp_model.INFEASIBLE)

    def value(self, expression: Expr) -> int:
        """A linear expression's value in this run's solution."""
        if isinstance(expression, int):
            return expression
        flat = cmh.FlatIntExpr(expression)
        return int(
            flat.offset + sum(c * self.solution[var.index] for var, c in zip(flat.vars, flat.coeffs, strict=True))
        )

    def layout(self, built: BuiltModel) -> Layout:
        return decode(built.instance, built.variables, lambda var: self.solution[var.index])


NOT_RUN = Run(status=cp_model.UNKNOWN, solution=(), objective=0.0, bound=0.0, wall_time_s=0.0, cut=True)
"""A solve not started: its work budget is spent."""
STOPPED_RUN = replace(NOT_RUN, stopped=True)
"""A solve not started: the safety stop has fired."""


def solver_for(
    config: PlannerConfig,
    time_limit_s: float,
    *,
    linearization: int = 2,
    probing: bool = True,
    presolve_passes: int | None = None,
) -> cp_model.CpSolver:
    """A CP-SAT solver with the configured workers and seed, and ``time_limit_s`` of wall time.

    Linearization level 2 (the default) puts every constraint into the LP relaxation: the GPU and
    worker counts get useful bounds, which multi-worker layouts on large clusters need to be proven
    optimal.
    Presolve's detection of included linear constraints is off: in CP-SAT 9.15 it proved some
    feasible models of this shape infeasible (enforced RAM rows whose coefficients are near
    multiples of a large common factor).
    ``probing=False`` turns presolve's probing off: on the several-workers models of ``objective:
    speed`` (prefix sums at every slot boundary per GPU speed) it spent most of a second before the
    search found a first layout (0.16 s with it off against 1.3 s on a 4-worker case of 1,024 GPUs).
    ``presolve_passes``: at most that many rounds of presolve (CP-SAT's default 3): on the same
    models of several workers each round after the first took 0.2-0.3 s of wall time and almost no
    deterministic time, so the work budget did not see it (2.02 -> 1.53 s on a 405B case of 1,024
    GPUs, 0.42 -> 0.19 s on a 123B case of 16).
    """
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = config.num_search_workers
    solver.parameters.random_seed = config.seed
    solver.parameters.linearization_level = linearization
    solver.parameters.presolve_inclusion_work_limit = 0
    if not probing:
        solver.parameters.cp_model_probing_level = 0
    if presolve_passes is not None:
        solver.parameters.max_presolve_iterations = presolve_passes
    return solver


def limited_solver(
    config: PlannerConfig,
    work: Work,
    nominal_s: float,
    *,
    linearization: int = 2,
    probing: bool = True,
    presolve_passes: int | None = None,
) -> cp_model.CpSolver | None:
    """A solver that may spend ``nominal_s`` of ``work`` (at most what is left), stopped by its
    safety stop too; ``None`` when the budget is spent or the safety stop has fired."""
    nominal = min(nominal_s, work.left())
    if nominal <= 0 or work.expired():
        return None
    solver = solver_for(
        config,
        max(1e-3, work.deadline.remaining()),
        linearization=linearization,
        probing=probing,
        presolve_passes=presolve_passes,
    )
    solver.parameters.max_deterministic_time = nominal * DETERMINISTIC_PER_S
    return solver


def run(
    built: BuiltModel,
    config: PlannerConfig,
    work: Work,
    measure: Measure | None = None,
    *,
    nominal_s: float | None = None,
    linearization: int = 2,
    probing: bool = True,
    presolve_passes: int | None = None,
) -> Run:
    """Solve the model as it stands within ``nominal_s`` of ``work`` (default: all that is left),
    and charge it; ``SolverError`` naming the deployment if CP-SAT fails.
    ``measure`` names what the objective counts, for the progress reports (none without it);
    ``linearization``, ``probing``, ``presolve_passes``: CP-SAT's linearization level and presolve
    (``solver_for``)."""
    nominal = work.left() if nominal_s is None else nominal_s
    solver = limited_solver(
        config, work, nominal, linearization=linearization, probing=probing, presolve_passes=presolve_passes
    )
    if solver is None:
        return STOPPED_RUN if work.expired() and work.left() > 0 else NOT_RUN
    shown = measure is not None and progress_active()
    callback = progress_callback(measure, time.perf_counter()) if measure is not None and shown else None
    try:
        status = solver.solve(built.model, callback)
    except Exception as exc:  # CP-SAT reports internal failures as plain exceptions
        raise SolverError(f"deployment {built.instance.deployment}: CP-SAT failed: {exc}") from exc
    if status == cp_model.MODEL_INVALID:
        problem = built.model.validate() or "model invalid"
        raise SolverError(f"deployment {built.instance.deployment}: invalid CP-SAT model: {problem}")
    stopped = work.charge(solver, status)
    response = solver.response_proto
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    return Run(
        status=status,
        solution=tuple(response.solution) if found else (),
        objective=response.objective_value if found else 0.0,
        bound=response.best_objective_bound,
        wall_time_s=response.wall_time,
        cut=status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE),  # only a limit ends a solve unproven
        stopped=stopped,
    )


def set_full_hint(model: cp_model.CpModel, solution: Sequence[int]) -> None:
    """Hint every variable of the model with a previous solution of the same model."""
    model.proto.clear_solution_hint()
    hint = model.proto.solution_hint
    for index, value in enumerate(solution):
        hint.vars.append(index)
        hint.values.append(value)


def hint_decisions(built: BuiltModel, layout: Layout) -> bool:
    """Hint the decision variables (main worker, slot assignments, block counts, output layer)
    from a layout known to be valid; CP-SAT completes the rest by propagation. Cheaper than
    ``hint_layout`` on large models. Whether the layout fits the model's variables."""
    canonical = canonical_layout(built.instance, layout) if built.symmetry_broken else layout
    values = decision_values(built.instance, built.variables, canonical)
    built.model.proto.clear_solution_hint()
    if values is None:
        return False
    for var, value in values.items():
        built.model.add_hint(var, value)
    return True


def hint_layout(built: BuiltModel, layout: Layout, config: PlannerConfig, work: Work, nominal_s: float) -> str:
    """Hint every variable from a layout (``complete_hint``); only how it went."""
    return complete_hint(built, layout, config, work, nominal_s)[0]


def complete_hint(
    built: BuiltModel, layout: Layout, config: PlannerConfig, work: Work, nominal_s: float
) -> tuple[str, tuple[int, ...]]:
    """Hint every variable from a layout: fix its decisions in a copy, solve within ``nominal_s``
    of ``work``, copy every value.

    Returns how it went: ``accepted``, ``outside-model`` (a GPU or role the model has no room
    for), ``rejected`` (the model proves the layout invalid), ``INCOMPLETE`` (its work budget
    spent) or ``STOPPED`` (its safety stop fired); and, when accepted, the value of every variable
    (a solution of the model without its objective).
    """
    canonical = canonical_layout(built.instance, layout) if built.symmetry_broken else layout
    values = decision_values(built.instance, built.variables, canonical)
    if values is None:
        return "outside-model", ()
    trial = built.model.clone()
    trial.proto.clear_objective()
    for var, value in values.items():
        trial.add(trial.get_int_var_from_proto_index(var.index) == value)
    solver = limited_solver(config, work, nominal_s)
    if solver is None:
        return (STOPPED if work.expired() and work.left() > 0 else INCOMPLETE), ()
    status = solver.solve(trial)
    stopped = work.charge(solver, status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return ("rejected" if status == cp_model.INFEASIBLE else STOPPED if stopped else INCOMPLETE), ()
    solution = tuple(solver.response_proto.solution)
    set_full_hint(built.model, solution)
    return "accepted", solution
