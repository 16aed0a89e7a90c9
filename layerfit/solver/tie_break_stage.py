"""Step 3 of ``search``: the tie-break with the strict tiers fixed, on a narrowed model.

Before any search, a bound on the tie-break (``tie_break_bound``) may decide it: when the step's
layout, or that layout with its blocks rebalanced (spread), meets the bound in the model's own
units, the tie-break is proven without building the narrowed model (``tie-break-bound-met``).
Otherwise the best of those layouts hints the search and the bound limits its objective.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from layerfit.domain.config import PlannerConfig, Policy
from layerfit.domain.layout import Layout
from layerfit.solver.bounds import single_worker_layers, single_worker_ordered_layers
from layerfit.solver.build import BuiltModel, build_model
from layerfit.solver.instance import Instance
from layerfit.solver.objective import strict_tiers, tie_break
from layerfit.solver.progress import tie_break_measure
from layerfit.solver.runner import Run, complete_hint, hint_decisions, run
from layerfit.solver.tie_break_bound import (
    TIE_BREAK_BOUND_MET,
    applies,
    binpack_bound,
    model_value,
    rebalanced,
    spread_bound,
)
from layerfit.solver.trace import Clock, SearchOutcome, Trace, stage_name

MIN_TIE_BREAK_TIME_S = 1.0
"""The tie-break may take as long as the strict tiers took, at least this (within the limit)."""
DIRECT_HINT_TIME_S = 0.2
"""At most this long to complete the rebalanced layout as a solution of the step's model."""


@dataclass(frozen=True)
class _Direct:
    """The tie-break's bound (the model's objective: minimised) and the best layout known in the
    step's model, with the model's value of it."""

    bound: int | None
    layout: Layout
    solution: Run
    value: int


def tie_break_stage(
    candidates: Instance,
    outcome: SearchOutcome,
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
    *,
    shortcuts: bool = True,
) -> SearchOutcome:
    """Step 3: with the strict tiers fixed, the tie-break over ``candidates`` (not dominance-pruned)
    restricted to the optimal GPU count (and, on one worker, to the workers whose ``gpus`` largest
    GPUs can hold the layers by the ordered-devices bound). ``shortcuts``: decide it by its bound
    where one meets it (off only to test that)."""
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
    instance = candidates.restricted(rpc_slots=gpus if outcome.workers > 1 else 0, local_slots=gpus, mains=mains)
    direct = _direct(instance, outcome, config, clock) if shortcuts else None
    if direct is not None and direct.bound is not None and direct.value <= direct.bound:
        trace.shortcuts.append(TIE_BREAK_BOUND_MET)
        met = Run(cp_model.OPTIMAL, direct.solution.solution, direct.value, direct.bound, 0.0)
        trace.record(TIE_BREAK_BOUND_MET, met)
        return replace(outcome, best=met, tie_break_proven=True, ranks_tie_break=False, wider=instance)
    narrow = build_model(instance)
    fixed = strict_tiers(narrow.instance, narrow.variables)
    for expression, value in ((fixed.layers, outcome.layers), (fixed.workers, outcome.workers), (fixed.gpus, gpus)):
        narrow.model.add(expression == value)
    objective = tie_break(narrow.model, narrow.instance, narrow.variables, uses_gpus=gpus > 0)
    narrow.model.minimize(objective)
    if direct is not None and direct.bound is not None:
        narrow.model.add(objective >= direct.bound)  # the relaxation's bound, for the LP
    hint_decisions(narrow, outcome.best.layout(outcome.built) if direct is None else direct.layout)
    time_limit = min(clock.remaining(), max(MIN_TIE_BREAK_TIME_S, clock.elapsed()))
    measure = tie_break_measure(stage_name(candidates), narrow.instance, uses_gpus=gpus > 0)
    result = trace.record("tie-break", run(narrow, config, time_limit, measure))
    if not result.found:
        if direct is not None and direct.solution is not outcome.best:
            return replace(outcome, best=direct.solution)  # the rebalanced layout, not proven best
        return outcome
    return replace(
        outcome, built=narrow, best=result, tie_break_proven=result.status == cp_model.OPTIMAL, ranks_tie_break=True
    )


def _direct(instance: Instance, outcome: SearchOutcome, config: PlannerConfig, clock: Clock) -> _Direct | None:
    """The bound and the best layout known without a search (``None``: the bound does not apply)."""
    if outcome.gpus == 0 or not applies(instance, outcome.layers):
        return None
    built = outcome.built
    layout = outcome.best.layout(built)
    value = model_value(built, outcome.best)
    if instance.policy is Policy.BINPACK:
        return _Direct(binpack_bound(instance, outcome.gpus), layout, outcome.best, value)
    headroom = spread_bound(instance, outcome.gpus, outcome.workers)
    bound = None if headroom is None else -headroom
    best = _Direct(bound, layout, outcome.best, -value)
    balanced = rebalanced(instance, layout)
    if balanced is None or balanced == layout:
        return best
    found = _solution(built, balanced, config, clock)
    if found is None:
        return best
    balanced_value = -model_value(built, found)
    return _Direct(bound, balanced, found, balanced_value) if balanced_value < best.value else best


def _solution(built: BuiltModel, layout: Layout, config: PlannerConfig, clock: Clock) -> Run | None:
    """``layout`` as a complete solution of ``built`` (its decisions fixed), when the model holds it."""
    how, solution = complete_hint(built, layout, config, min(DIRECT_HINT_TIME_S, clock.remaining()))
    if how != "accepted":
        return None
    return Run(cp_model.FEASIBLE, solution, 0.0, 0.0, 0.0)
