"""Progress of one CP-SAT solve, in the units of what it optimises.

The strict solves maximise one weighted sum of tiers (``objective.strict_tiers``; with experts
placed per block, ``expert_search.expert_tiers``); their reports name the first tier not yet
settled with its own unit: layers on GPUs, (experts on GPUs,) workers, GPUs. The tier values come
from the solution, the tier bounds from the combined bound, which the dominating weights and each
tier's range let one read tier by tier.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from layerfit.budget.progress import Progress, report
from layerfit.domain.config import Policy
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.objective import StrictTiers
from layerfit.solver.model.variables import Expr

_EPS = 1e-6


@dataclass(frozen=True)
class Tier:
    """One tier of a weighted objective: ``weight * value`` added (maximised) or subtracted."""

    name: str
    unit: str
    expression: Expr
    weight: int
    maximise: bool
    low: int
    """The least value it can take (what matters for a maximised tier below another)."""
    high: int
    """The most value it can take (what matters for a minimised tier below another)."""


@dataclass(frozen=True)
class Measure:
    """What a solve optimises, for its progress reports."""

    stage: str
    unit: str
    negate: bool = False
    """The model minimises the negative of what is reported."""
    tiers: tuple[Tier, ...] = ()
    """The tiers, when the objective is their weighted sum (maximised)."""


def strict_measure(stage: str, instance: Instance, tiers: StrictTiers) -> Measure:
    """The strict tiers: layers on GPUs, then workers (main and rpc-server workers), then GPUs."""
    gpus = instance.rpc_slots + instance.local_slots
    return Measure(
        stage=stage,
        unit="layers on GPUs",
        tiers=(
            Tier("layers on GPUs", "layers", tiers.layers, tiers.layer_weight, True, 0, instance.n_layers),
            Tier("workers", "workers", tiers.workers, tiers.worker_weight, False, 1, 1 + instance.rpc_slots),
            Tier("GPUs", "GPUs", tiers.gpus, 1, False, 0, gpus),
        ),
    )


def tie_break_measure(stage: str, instance: Instance, *, uses_gpus: bool) -> Measure:
    """The policy's tie-break, in the coarse units of ``instance.tie_break_unit``."""
    binpack = instance.policy is Policy.BINPACK
    if uses_gpus:
        what = "allocatable VRAM of the GPUs used" if binpack else "headroom on the tightest GPU"
    else:
        what = "allocatable RAM of the main worker"
    return Measure(stage=f"{stage}, tie-break", unit=f"units of {what}", negate=not binpack)


def tiered_progress(
    stage: str, tiers: tuple[Tier, ...], values: tuple[int, ...], bound: float, elapsed_s: float
) -> Progress:
    """A report on the first tier not settled: ``values`` are the solution's, ``bound`` the
    solver's bound on the weighted sum. A tier's bound follows from the part of ``bound`` its
    settled betters leave and the least the tiers below it can add."""
    remaining = bound
    proven: list[str] = []
    for position, (tier, value) in enumerate(zip(tiers, values, strict=True)):
        below = tiers[position + 1 :]
        least_below = sum(t.weight * t.low if t.maximise else -t.weight * t.high for t in below)
        if tier.maximise:
            tier_bound = min(tier.high, math.floor((remaining - least_below) / tier.weight + _EPS))
            settled = value >= tier_bound
        else:
            tier_bound = max(tier.low, math.ceil((least_below - remaining) / tier.weight - _EPS))
            settled = value <= tier_bound
        if not settled or not below:
            later = ", ".join(f"{v} {t.unit}" for t, v in zip(below, values[position + 1 :], strict=True))
            notes = ([f"{', '.join(proven)} proven"] if proven else []) + ([f"then {later}"] if later else [])
            return Progress(f"{stage}: {tier.name}", tier.unit, elapsed_s, value, tier_bound, "; ".join(notes))
        proven.append(f"{value} {tier.unit}")
        remaining -= tier.weight * value if tier.maximise else -tier.weight * value
    raise ValueError("no tiers")


def progress_callback(measure: Measure, started: float) -> cp_model.CpSolverSolutionCallback:
    """A CP-SAT callback that reports every improving solution in the measure's units."""

    class _Callback(cp_model.CpSolverSolutionCallback):
        def _value(self, expression: Expr) -> int:
            return expression if isinstance(expression, int) else int(self.value(expression))

        def on_solution_callback(self) -> None:
            elapsed = time.perf_counter() - started
            if measure.tiers:
                values = tuple(self._value(tier.expression) for tier in measure.tiers)
                report(tiered_progress(measure.stage, measure.tiers, values, self.best_objective_bound, elapsed))
                return
            sign = -1.0 if measure.negate else 1.0
            best, bound = sign * self.objective_value + 0.0, sign * self.best_objective_bound + 0.0  # no -0
            report(Progress(measure.stage, measure.unit, elapsed, best, bound))

    return _Callback()
