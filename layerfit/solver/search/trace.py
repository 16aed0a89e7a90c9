"""What one solve did and how its answer is assembled: the clock, the trace of CP-SAT calls for
``EngineStats.details``, the search's answer before decoding, and the ``SolveResult``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from layerfit.budget.work import SOLVER_PER_GPU_S, SOLVER_STEP_PER_WORKER_S, Work
from layerfit.domain.cluster import Cluster
from layerfit.domain.deployment import Deployment
from layerfit.domain.plan import Candidate, EngineStats, Status
from layerfit.solver.model.build import BuiltModel
from layerfit.solver.model.candidates import Incumbent
from layerfit.solver.model.capacity import layer_ceiling
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.objective import strict_value
from layerfit.solver.model.runner import INCOMPLETE, STOPPED, Run
from layerfit.solver.search.result import SolveResult, TierValues

ENGINE = "cp-sat"
DEADLINE = "deadline"
"""What ``not_run`` names when the safety stop kept CP-SAT from starting."""
WORK = "work"
"""What ``not_run`` names when the work budget left was too small to start."""


def stage_name(instance: Instance, detail: str = "") -> str:
    """The progress reports' name of a solve."""
    return f"cp-sat for {instance.deployment}" + (f" ({detail})" if detail else "")


class Clock:
    """The solve's work budget (``layerfit.budget.work``), which its steps spend and share out, and the
    wall time since it started (for its stats only)."""

    def __init__(self, work: Work) -> None:
        self.started = time.perf_counter()
        self.work = work
        self.step_s = 0.0
        """What one step of the search pays beyond its CP-SAT calls (``charge_set_up``)."""

    def step(self) -> None:
        """Charge one step of the search: its capacity bounds, greedy layouts and model, computed
        over the instance's workers."""
        self.work.spend(self.step_s)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        """Nominal seconds left."""
        return self.work.left()

    def spent(self) -> float:
        """Nominal seconds spent so far."""
        return self.work.spent_s


@dataclass
class Trace:
    """What the search did, for ``EngineStats.details``."""

    steps: list[str] = field(default_factory=list)
    hint: str = "none"
    solves: int = 0
    cuts: list[str] = field(default_factory=list)
    """The steps a limit cut short: a CP-SAT solve ended without a proof, a hint left incomplete,
    the alternatives' share spent (``truncated`` in the stats). A work budget cuts a step at the
    same point on every run."""
    stops: list[str] = field(default_factory=list)
    """The steps of ``cuts`` the wall clock cut, not their work budget (``safety_stops`` in the
    stats). Empty: the same input gives the same answer on every run."""
    proof: str = "none"
    """What proves the strict tiers: ``cp-sat``, a named shortcut, or ``none``."""
    shortcuts: list[str] = field(default_factory=list)
    """Later stages answered without CP-SAT, each by its proof's name (``name:count``)."""
    witness: str = "none"
    """A greedy layout for a multi-worker step (``witness``): ``none``, or its GPU count and how
    its model took it (``8:accepted``)."""
    objective: str = "layers"
    """What the strict tiers are: ``layers`` (``docs/design.md``'s order) or ``speed``."""
    incumbent: str = "none"
    """The heuristic's layout: ``none`` (absent or invalid), ``valid``, ``kept`` as the answer, or
    ``contradicted`` (CP-SAT called the model infeasible; the layout is kept, nothing is proven)."""

    def record(self, step: str, result: Run) -> Run:
        self.steps.append(f"{step}:{result.status.name}:{result.wall_time_s * 1000:.0f}ms")
        self.solves += 1
        if result.cut:
            self.cut(step, stopped=result.stopped)
        return result

    def cut(self, step: str, *, stopped: bool = False) -> None:
        """A limit cut ``step`` short: its work budget, or (``stopped``) the wall clock."""
        if step not in self.cuts:
            self.cuts.append(step)
        if stopped and step not in self.stops:
            self.stops.append(step)

    def completed(self, step: str, how: str) -> None:
        """A layout completed as a solution (``runner.complete_hint``): left incomplete by a limit,
        ``step`` is a cut."""
        if how in (INCOMPLETE, STOPPED):
            self.cut(step, stopped=how == STOPPED)

    def hinted(self, how: str) -> str:
        """How the heuristic's layout hinted a model (``runner.complete_hint``); left incomplete by
        a limit, it is a cut."""
        self.hint = how
        self.completed("hint", how)
        return how


def charge_set_up(clock: Clock, cluster: Cluster) -> None:
    """Charge the solve's instance (per GPU) and set what each of its steps pays (per worker)."""
    clock.work.spend(SOLVER_PER_GPU_S * sum(len(worker.gpus) for worker in cluster.workers))
    clock.step_s = SOLVER_STEP_PER_WORKER_S * len(cluster.workers)


@dataclass(frozen=True)
class SearchOutcome:
    """The search's answer before decoding: the final model, its best run, the strict tiers."""

    built: BuiltModel
    best: Run
    layers: int
    workers: int
    gpus: int
    strict_proven: bool
    tie_break_proven: bool
    bound: float
    """Best proven bound on the weighted strict tiers (``objective.strict_value``)."""
    ranks_tie_break: bool = True
    """The final model minimises the tie-break (false for a strict model whose tie-break stage found
    nothing)."""
    wider: Instance | None = None
    """Where the alternatives' re-solves run when ``built`` is narrower than the tie-break's
    candidates (the tie-break was decided on the step's dominance-pruned model without a search)."""


def not_run(deployment: Deployment, wall_time_s: float = 0.0, *, limit: str = DEADLINE) -> SolveResult:
    """The answer when a limit kept CP-SAT from starting: UNKNOWN, truncated by ``limit``, the
    safety stop (``DEADLINE``) or the work budget (``WORK``)."""
    stops = (limit,) if limit == DEADLINE else ()
    stats = EngineStats(
        engine=ENGINE, wall_time_s=wall_time_s, status=Status.UNKNOWN, details={"truncated": limit}, safety_stops=stops
    )
    return SolveResult(deployment=deployment.name, status=Status.UNKNOWN, wall_time_s=wall_time_s, stats=stats)


def kept_incumbent(
    instance: Instance, clock: Clock, trace: Trace, incumbent: Incumbent, search: Status, bound: float | None
) -> SolveResult:
    """The incumbent as the answer: no search step found anything better in time (``search`` is
    UNKNOWN), or CP-SAT contradicted a layout ``check`` accepts (INFEASIBLE: no proof is given)."""
    trace.incumbent = "contradicted" if search is Status.INFEASIBLE else "kept"
    trace.proof = "none"
    layers, workers, gpus = incumbent.layers, incumbent.workers, incumbent.gpus
    objective = float(strict_value(instance, layers, workers, gpus))
    ceiling = layer_ceiling(instance)
    upper = float(strict_value(instance, ceiling, 1, 1 if ceiling else 0))
    return solve_result(
        instance,
        clock,
        trace,
        Status.FEASIBLE,
        best=incumbent.candidate,
        tiers=TierValues(gpu_layers=layers, workers=workers, gpus=gpus, tie_break=incumbent.candidate.score),
        objective=objective,
        bound=max(objective, upper if bound is None else bound),
    )


def solve_result(
    instance: Instance,
    clock: Clock,
    trace: Trace,
    status: Status,
    *,
    best: Candidate | None = None,
    alternatives: tuple[Candidate, ...] = (),
    tiers: TierValues | None = None,
    strict_optimal: bool = False,
    objective: float | None = None,
    bound: float | None = None,
) -> SolveResult:
    wall = clock.elapsed()
    details: dict[str, float | int | str] = {
        "steps": ",".join(trace.steps),
        "solves": trace.solves,
        "hint": trace.hint,
        "proof": trace.proof,
        "shortcuts": ",".join(trace.shortcuts),
        "incumbent": trace.incumbent,
        "witness": trace.witness,
        "objective": trace.objective,
        "unit_bytes": instance.scale.unit_bytes,
        "exact_units": int(instance.scale.exact),
        "gpu_classes": len(instance.classes),
        "rpc_slots": instance.rpc_slots,
        "local_slots": instance.local_slots,
        "alternatives": len(alternatives),
        "truncated": ",".join(trace.cuts),
        "work_s": round(clock.spent(), 6),
    }
    if instance.speed is not None:
        details["speed_rounding_us"] = instance.speed.error_us
    stats = EngineStats(
        engine=ENGINE,
        wall_time_s=wall,
        status=status,
        objective=objective,
        bound=bound,
        details=details,
        safety_stops=tuple(trace.stops),
    )
    return SolveResult(
        deployment=instance.deployment,
        status=status,
        best=best,
        alternatives=alternatives,
        tiers=tiers,
        strict_optimal=strict_optimal,
        objective=objective,
        bound=bound,
        wall_time_s=wall,
        stats=stats,
    )
