"""Step 1 of ``search``: the layer ceiling on exactly ``t`` workers (and, on one, ``k`` GPUs).

Each step restricts the model to its worker count and to the workers a capacity bound lets take
part (``model.capacity``), and hints it with the heuristic's layout when its tiers match the step. A
multi-worker step without such a hint gets a greedy layout (``witness``); when that meets the
step's GPU-count bound, the step is proven without a CP-SAT search.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ortools.sat.python import cp_model

from layerfit.domain.config import PlannerConfig
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Status
from layerfit.solver.model.build import BuiltModel, build_model
from layerfit.solver.model.capacity import (
    most_remote_gpus,
    multi_worker_candidates,
    single_worker_mains,
)
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.objective import strict_tiers, strict_value, tie_break
from layerfit.solver.model.progress import Measure, tie_break_measure
from layerfit.solver.model.runner import HINT_SHARE, Run, complete_hint, run
from layerfit.solver.model.variables import Expr
from layerfit.solver.search.tie_break_stage import improved, tie_break_stage
from layerfit.solver.search.trace import Clock, SearchOutcome, Trace, stage_name
from layerfit.solver.shortcuts.gpu_count import fewest_gpus, most_gpus
from layerfit.solver.shortcuts.prune import prune_dominated
from layerfit.solver.shortcuts.witness import Valid, witness_solution

ONE_WORKER_LINEARIZATION = 0
"""CP-SAT's linearization level in the one-worker steps, whose worker and GPU counts are fixed, so
the LP bounds that level 2 buys them are not needed: the 671B 8-GPU step of seed 6, 16 GPUs, #6
took 1.05 s CPU at level 2 and 0.18 s at level 0 (0.37 -> 0.25 s on seed 9, 64 GPUs, #3)."""


def single_worker_step(
    instance: Instance, ceiling: int, hint: Layout | None, config: PlannerConfig, clock: Clock, trace: Trace
) -> SearchOutcome | Status:
    """The ceiling on one worker with exactly ``k = 1, 2, ...`` GPUs, tie-break included."""
    split, used = instance.rules.tensor_split, instance.rules.device_count
    if split is None:
        gpu_counts: Sequence[int] = range(1, instance.local_slots + 1)
    else:  # the devices the split gives a layer at the ceiling
        row = split.blocks_by_layers.get(ceiling)
        gpu_counts = () if row is None else (len(row),)
    gpu_counts = gpu_counts if used is None else (used,)  # a selection used whole
    for k in gpu_counts:
        if k > instance.local_slots:
            break
        clock.step()
        mains = single_worker_mains(instance, k, ceiling)
        if not mains:
            continue
        built = build_model(instance.restricted(rpc_slots=0, local_slots=k, mains=mains))
        tiers = strict_tiers(built.instance, built.variables)
        built.model.add(tiers.layers == ceiling)
        built.model.add(tiers.gpus == k)
        built.model.minimize(tie_break(built.model, built.instance, built.variables, uses_gpus=True))
        solution = _hint_if(built, hint, (ceiling, 1, k), config, clock, trace)
        measure = tie_break_measure(stage_name(instance, f"{k} GPUs on one worker"), built.instance, uses_gpus=True)
        found = run(built, config, clock.work, measure, linearization=ONE_WORKER_LINEARIZATION)
        result = trace.record(f"one-worker-{k}-gpus", found)
        if result.status == cp_model.INFEASIBLE and not solution:
            continue
        if not result.found:
            return Status.UNKNOWN  # out of time, or CP-SAT contradicting a known solution
        hinted = Run(status=cp_model.FEASIBLE, solution=solution, objective=0.0, bound=result.bound, wall_time_s=0.0)
        best = improved(built.instance, built, (result, hinted) if solution else (result,), config, clock, trace)
        return SearchOutcome(
            built=best.built,
            best=best.solution,
            layers=ceiling,
            workers=1,
            gpus=k,
            strict_proven=True,
            tie_break_proven=result.status == cp_model.OPTIMAL,
            bound=float(strict_value(instance, ceiling, 1, k)),
            ranks_tie_break=best.built is built,
        )
    return Status.INFEASIBLE


def multi_worker_step(
    instance: Instance,
    ceiling: int,
    workers: int,
    hint: Layout | None,
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
    valid: Valid | None = None,
) -> SearchOutcome | Status:
    """The ceiling with exactly ``workers`` workers on the fewest GPUs, then the tie-break."""
    clock.step()
    mains, rpc = multi_worker_candidates(instance, workers, ceiling)
    if not mains or len(rpc) < workers - 1:
        return Status.INFEASIBLE
    candidates = instance.restricted(
        rpc_slots=most_remote_gpus(instance, rpc, workers - 1),
        local_slots=instance.local_slots,
        mains=mains,
        rpc_workers=rpc,
    )
    fewest = fewest_gpus(candidates, workers, ceiling)
    if fewest is None:
        return Status.INFEASIBLE
    built = build_model(prune_dominated(candidates, others=workers - 1))
    tiers = strict_tiers(built.instance, built.variables)
    built.model.add(tiers.layers == ceiling)
    built.model.add(tiers.workers == workers)
    built.model.add(tiers.gpus >= fewest)  # a capacity bound: also CP-SAT's proof when a layout meets it
    built.model.minimize(tiers.gpus)
    solution = _hint_if(built, hint, (ceiling, workers, None), config, clock, trace)
    hinted_gpus = _value(solution, tiers.gpus) if solution else None
    if valid is not None and hinted_gpus != fewest:
        most = most_gpus(built.instance, workers) if hinted_gpus is None else hinted_gpus - 1
        share = clock.work.part(clock.left() * HINT_SHARE)
        trace.witness, better = witness_solution(built, workers, range(fewest, most + 1), valid, config, share, ceiling)
        trace.completed("witness", trace.witness.rpartition(":")[2])
        solution = better or solution
    hinted = bool(solution)
    if hinted and _value(solution, tiers.gpus) == fewest:
        # A valid layout meets the capacity bound: the step is proven without a search.
        met = Run(status=cp_model.OPTIMAL, solution=solution, objective=fewest, bound=fewest, wall_time_s=0.0)
        result = trace.record(f"{workers}-workers-bound-met", met)
    else:
        measure = Measure(stage_name(instance, f"{workers} workers"), "GPUs")
        result = trace.record(f"{workers}-workers", run(built, config, clock.work, measure))
    if result.status == cp_model.INFEASIBLE and not hinted:
        return Status.INFEASIBLE
    if not result.found:
        return Status.UNKNOWN
    gpus = result.value(tiers.gpus)
    outcome = SearchOutcome(
        built=built,
        best=result,
        layers=ceiling,
        workers=workers,
        gpus=gpus,
        strict_proven=result.status == cp_model.OPTIMAL,
        tie_break_proven=False,
        bound=float(strict_value(instance, ceiling, workers, math.ceil(result.bound))),
        ranks_tie_break=False,
    )
    if not outcome.strict_proven:
        return outcome
    # The tie-break needs only the workers that can take part in a layout of ``gpus`` GPUs.
    mains, rpc = multi_worker_candidates(candidates, workers, ceiling, gpus=gpus)
    narrow = candidates.restricted(
        rpc_slots=candidates.rpc_slots, local_slots=candidates.local_slots, mains=mains, rpc_workers=rpc
    )
    return tie_break_stage(narrow, outcome, config, clock, trace, shortcuts=valid is not None, hint=hint)


def _hint_if(
    built: BuiltModel,
    hint: Layout | None,
    tiers: tuple[int, int, int | None],
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
) -> tuple[int, ...]:
    """Hint a restricted model with the heuristic's layout when its tiers match the restriction
    (``None``: any GPU count); the completed solution when the model accepted it, else empty."""
    if hint is None:
        return ()
    layers, workers, gpus = tiers
    if hint.gpu_layers != layers or len(hint.workers) != workers or gpus not in (None, len(hint.devices)):
        return ()
    how, solution = complete_hint(built, hint, config, clock.work, clock.left() * HINT_SHARE)
    trace.hinted(how)
    return solution


def _value(solution: tuple[int, ...], expression: Expr) -> int:
    """A linear expression's value in a complete solution of the model."""
    return Run(status=cp_model.FEASIBLE, solution=solution, objective=0.0, bound=0.0, wall_time_s=0.0).value(expression)
