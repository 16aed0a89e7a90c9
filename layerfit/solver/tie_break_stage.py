"""Step 3 of ``search``: the tie-break with the strict tiers fixed, on a narrowed model."""

from __future__ import annotations

from dataclasses import replace

from ortools.sat.python import cp_model

from layerfit.domain.config import PlannerConfig
from layerfit.solver.bounds import single_worker_layers, single_worker_ordered_layers
from layerfit.solver.build import build_model
from layerfit.solver.instance import Instance
from layerfit.solver.objective import strict_tiers, tie_break
from layerfit.solver.progress import tie_break_measure
from layerfit.solver.runner import hint_decisions, run
from layerfit.solver.trace import Clock, SearchOutcome, Trace, stage_name

MIN_TIE_BREAK_TIME_S = 1.0
"""The tie-break may take as long as the strict tiers took, at least this (within the limit)."""


def tie_break_stage(
    candidates: Instance, outcome: SearchOutcome, config: PlannerConfig, clock: Clock, trace: Trace
) -> SearchOutcome:
    """Step 3: with the strict tiers fixed, the tie-break over ``candidates`` (not dominance-pruned)
    restricted to the optimal GPU count (and, on one worker, to the workers whose ``gpus`` largest
    GPUs can hold the layers by the ordered-devices bound)."""
    gpus = outcome.gpus
    mains = None
    if outcome.workers == 1 and gpus > 0:
        mains = frozenset(
            w
            for w, view in enumerate(candidates.workers)
            if view.main_ok
            and single_worker_layers(candidates, w, gpus) >= outcome.layers
            and single_worker_ordered_layers(candidates, w, gpus, outcome.layers) >= outcome.layers
        )
    narrow = build_model(
        candidates.restricted(rpc_slots=gpus if outcome.workers > 1 else 0, local_slots=gpus, mains=mains)
    )
    fixed = strict_tiers(narrow.instance, narrow.variables)
    for expression, value in ((fixed.layers, outcome.layers), (fixed.workers, outcome.workers), (fixed.gpus, gpus)):
        narrow.model.add(expression == value)
    narrow.model.minimize(tie_break(narrow.model, narrow.instance, narrow.variables, uses_gpus=gpus > 0))
    hint_decisions(narrow, outcome.best.layout(outcome.built))
    time_limit = min(clock.remaining(), max(MIN_TIE_BREAK_TIME_S, clock.elapsed()))
    measure = tie_break_measure(stage_name(candidates), narrow.instance, uses_gpus=gpus > 0)
    result = trace.record("tie-break", run(narrow, config, time_limit, measure))
    if not result.found:
        return outcome
    return replace(
        outcome, built=narrow, best=result, tie_break_proven=result.status == cp_model.OPTIMAL, ranks_tie_break=True
    )
