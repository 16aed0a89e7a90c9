"""Progress of one CP-SAT solve, in the units of what it optimises.

The strict solve maximises one weighted sum of three tiers (``objective.strict_tiers``); its
reports name the first tier not yet settled with its own unit: layers on GPUs, then workers, then
GPUs. The tier values come from the solution, the tier bounds from the combined bound, which the
dominating weights let one read tier by tier.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from layerfit.domain.config import Policy
from layerfit.progress import Progress, report
from layerfit.solver.instance import Instance
from layerfit.solver.objective import StrictTiers
from layerfit.solver.variables import Expr

_EPS = 1e-6


@dataclass(frozen=True)
class Measure:
    """What a solve optimises, for its progress reports."""

    stage: str
    unit: str
    negate: bool = False
    """The model minimises the negative of what is reported."""
    tiers: StrictTiers | None = None
    """The strict tiers, when the objective is their weighted sum."""


def strict_measure(stage: str, tiers: StrictTiers) -> Measure:
    return Measure(stage=stage, unit="layers on GPUs", tiers=tiers)


def tie_break_measure(stage: str, instance: Instance, *, uses_gpus: bool) -> Measure:
    """The policy's tie-break, in the coarse units of ``instance.tie_break_unit``."""
    binpack = instance.policy is Policy.BINPACK
    if uses_gpus:
        what = "allocatable VRAM of the GPUs used" if binpack else "headroom on the tightest GPU"
    else:
        what = "allocatable RAM of the main worker"
    return Measure(stage=f"{stage}, tie-break", unit=f"units of {what}", negate=not binpack)


def strict_progress(
    stage: str, values: tuple[int, int, int], bound: float, tiers: StrictTiers, elapsed_s: float
) -> Progress:
    """A report on the first unsettled tier: ``values`` are the solution's (layers, workers, GPUs),
    ``bound`` the solver's bound on the weighted sum (maximised)."""
    layers, workers, gpus = values
    layers_bound = math.ceil(bound / tiers.layer_weight - _EPS)
    if layers < layers_bound:
        note = f"then {workers} workers, {gpus} GPUs"
        return Progress(f"{stage}: layers on GPUs", "layers", elapsed_s, layers, layers_bound, note)
    # no plan with these layers pays less than this in ``workers * worker_weight + gpus``
    penalty = max(0.0, tiers.layer_weight * layers - bound)
    workers_bound = math.floor(penalty / tiers.worker_weight + _EPS)
    if workers > workers_bound:
        note = f"{layers} layers on GPUs proven, then {gpus} GPUs"
        return Progress(f"{stage}: workers", "workers", elapsed_s, workers, workers_bound, note)
    gpus_bound = max(0, math.ceil(penalty - tiers.worker_weight * workers - _EPS))
    note = f"{layers} layers on GPUs and {workers} workers proven"
    return Progress(f"{stage}: GPUs", "GPUs", elapsed_s, gpus, gpus_bound, note)


def progress_callback(measure: Measure, started: float) -> cp_model.CpSolverSolutionCallback:
    """A CP-SAT callback that reports every improving solution in the measure's units."""

    class _Callback(cp_model.CpSolverSolutionCallback):
        def _value(self, expression: Expr) -> int:
            return expression if isinstance(expression, int) else int(self.value(expression))

        def on_solution_callback(self) -> None:
            elapsed = time.perf_counter() - started
            tiers = measure.tiers
            if tiers is not None:
                values = (self._value(tiers.layers), self._value(tiers.workers), self._value(tiers.gpus))
                report(strict_progress(measure.stage, values, self.best_objective_bound, tiers, elapsed))
                return
            sign = -1.0 if measure.negate else 1.0
            best, bound = sign * self.objective_value + 0.0, sign * self.best_objective_bound + 0.0  # no -0
            report(Progress(measure.stage, measure.unit, elapsed, best, bound))

    return _Callback()
