"""Step 3 of ``search``: the tie-break with the strict tiers fixed, on a narrowed model.

Before any search, the best known layout is found directly: the step's layout or the heuristic's
(when it has the step's strict tiers), improved by moving each worker's devices to the GPUs the
policy prefers (``reassign``) and, under spread, by rebalancing the blocks to keep the most
headroom (``ordered_reserve.rebalanced``), each checked as a solution of a model of its workers
alone. When that layout meets a bound on the tie-break (``tie_break_bound``) in the model's own
units, the tie-break is proven without a search (``tie-break-bound-met``). Otherwise it hints the
search and the bound limits its objective; a model of more candidate GPU classes than
``LARGE_MODEL_CLASSES`` is not searched at all (``tie-break-not-searched``: CP-SAT's presolve
outlasts the time share there) and that layout is the answer, not proven best. A search cut short
is improved the same way (``improved``), and the better of that and the known layout, in the
model's units, is the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from layerfit.domain.config import PlannerConfig, Policy
from layerfit.domain.layout import Layout
from layerfit.solver.model.build import BuiltModel, build_model
from layerfit.solver.model.capacity import single_worker_mains
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.objective import strict_tiers, tie_break
from layerfit.solver.model.progress import tie_break_measure
from layerfit.solver.model.runner import Run, complete_hint, hint_decisions, run
from layerfit.solver.search.trace import Clock, SearchOutcome, Trace, stage_name
from layerfit.solver.shortcuts.ordered_reserve import rebalanced
from layerfit.solver.shortcuts.reassign import device_needs, reassigned
from layerfit.solver.shortcuts.tie_break_bound import (
    TIE_BREAK_BOUND_MET,
    applies,
    binpack_bound,
    model_value,
    spread_bound,
)

MIN_TIE_BREAK_S = 2.0
"""The tie-break may spend as much work as the solve spent before it, at least this many nominal
seconds (one deterministic second, ``layerfit.budget.work``; within the budget). Over the quick
benchmark's 290 cases (seeds 1-10) every tie-break search CP-SAT proved took at most 0.15 s CPU
but one, which took 0.43 s and 0.95 deterministic seconds; of those it did not prove, the one
left ran to its share and found nothing better than the layout known before the search, which is
then the answer (FEASIBLE). The share was 0.5 s of wall time before work budgets, in which CP-SAT
itself stopped these fast models at about one deterministic second.
"""
LARGE_MODEL_CLASSES = 48
"""A tie-break model with more candidate GPU classes than this is not searched: CP-SAT's presolve
alone outlasts its time share there (probing ~0.5 s CPU on 1,024 GPUs of uneven 671B blocks,
57 classes left after narrowing)."""
TIE_BREAK_NOT_SEARCHED = "tie-break-not-searched"
"""Shortcut name: the tie-break of a model too large to search is the best layout known before
it (``_known``), not proven best."""
MOVE_ROUNDS = 4
"""At most this many rounds of ``reassign`` and rebalancing improve a known layout (``_moved``)."""
DIRECT_HINT_S = 0.2
"""At most this many nominal seconds to complete a better layout as a solution of its workers' model."""


@dataclass(frozen=True)
class _Known:
    """The best layout known before a search, as a solution of ``built``, with its tie-break (the
    model's objective, minimised) and a bound on the tie-break (``None``: none applies)."""

    built: BuiltModel
    solution: Run
    value: int
    bound: int | None

    @property
    def met(self) -> bool:
        return self.bound is not None and self.value <= self.bound

    @property
    def layout(self) -> Layout:
        return self.solution.layout(self.built)


def tie_break_stage(
    candidates: Instance,
    outcome: SearchOutcome,
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
    *,
    shortcuts: bool = True,
    hint: Layout | None = None,
) -> SearchOutcome:
    """Step 3: with the strict tiers fixed, the tie-break over ``candidates`` (not dominance-pruned)
    restricted to the optimal GPU count (and, on one worker, to the workers whose ``gpus`` largest
    GPUs can hold the layers by the ordered-devices bound). ``shortcuts``: decide it without a
    search where the bound is met, and do not search a model too large (off only to test them).
    ``hint`` (the heuristic's layout) is a known layout too when it has the step's strict tiers.

    The answer is never worse on the tie-break, in the model's units, than the best layout known
    before the search (the step's, the hint, their reassigned forms: ``_known``): a search cut
    short whose solution is worse gives way to it, unproven."""
    clock.step()
    gpus = outcome.gpus
    mains = None
    if outcome.workers == 1 and gpus > 0:
        mains = single_worker_mains(candidates, gpus, outcome.layers)
    instance = candidates.restricted(rpc_slots=gpus if outcome.workers > 1 else 0, local_slots=gpus, mains=mains)
    known = _known(instance, outcome, config, clock, trace, hint, bound=shortcuts)
    if shortcuts and gpus > 0 and (known.met or too_large(instance)):
        name = TIE_BREAK_BOUND_MET if known.met else TIE_BREAK_NOT_SEARCHED
        trace.shortcuts.append(name)
        best = Run(cp_model.OPTIMAL if known.met else cp_model.FEASIBLE, known.solution.solution, known.value, 0, 0.0)
        trace.record(name, best)
        wider = instance if known.met else None  # alternatives of a model too large: on ``known.built``
        return replace(
            outcome, built=known.built, best=best, tie_break_proven=known.met, ranks_tie_break=False, wider=wider
        )
    narrow = build_model(instance)
    fixed = strict_tiers(narrow.instance, narrow.variables)
    for expression, value in ((fixed.layers, outcome.layers), (fixed.workers, outcome.workers), (fixed.gpus, gpus)):
        narrow.model.add(expression == value)
    objective = tie_break(narrow.model, narrow.instance, narrow.variables, uses_gpus=gpus > 0)
    narrow.model.minimize(objective)
    if known.bound is not None:
        narrow.model.add(objective >= known.bound)  # the relaxation's bound, for the LP
    hint_decisions(narrow, known.layout)
    nominal = max(MIN_TIE_BREAK_S, clock.spent())
    measure = tie_break_measure(stage_name(candidates), narrow.instance, uses_gpus=gpus > 0)
    result = trace.record("tie-break", run(narrow, config, clock.work, measure, nominal_s=nominal))
    found = improved(instance, narrow, (result,), config, clock, trace) if result.found else None
    if found is not None and found.value <= known.value:
        if found.solution is result:
            proven = result.status == cp_model.OPTIMAL
            return replace(outcome, built=narrow, best=result, tie_break_proven=proven, ranks_tie_break=True)
        return replace(outcome, built=found.built, best=found.solution, tie_break_proven=False, ranks_tie_break=False)
    # Nothing found in time, or a solution (moved too) worse than one known before the search.
    if known.solution is outcome.best:
        return outcome
    return replace(outcome, built=known.built, best=known.solution, tie_break_proven=False, ranks_tie_break=False)


def too_large(instance: Instance) -> bool:
    """Whether the tie-break's model has more candidate GPU classes than ``LARGE_MODEL_CLASSES``."""
    return sum(cls.rpc_ok or cls.local_ok for cls in instance.classes) > LARGE_MODEL_CLASSES


def _known(
    instance: Instance,
    outcome: SearchOutcome,
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
    hint: Layout | None,
    *,
    bound: bool,
) -> _Known:
    """The best of the layouts known before a search, each as a solution of a model with its value
    in the model's units: the step's layout; ``hint`` when it has the step's strict tiers; and the
    better of those with each worker's devices on the GPUs the policy prefers (``reassign``) and,
    under spread, its blocks rebalanced. Each but the step's is checked as a solution of a model of
    its own workers. With the bound (``bound``) where it applies. Without GPUs: the step's alone."""
    built = outcome.built
    best = _Known(built, outcome.best, tie_break_value(built, outcome.best), None)
    if outcome.gpus == 0:
        return best  # no GPU: the tie-break is the main worker's RAM, left to the search
    layout = outcome.best.layout(built)
    if hint is not None and hint != layout and _strict(hint) == (outcome.layers, outcome.workers, outcome.gpus):
        best = _better(instance, best, hint, config, clock, trace)
    best = _moved(instance, best, config, clock, trace)
    if not bound or not applies(instance, outcome.layers):
        return best
    if instance.policy is Policy.BINPACK:
        return replace(best, bound=binpack_bound(instance, outcome.gpus))
    found = spread_bound(instance, outcome.gpus, outcome.workers, known=-best.value)
    if found.witness is not None and found.headroom is not None and -best.value < found.headroom:
        placed = rebalanced(instance, found.witness)
        best = best if placed is None else _better(instance, best, placed, config, clock, trace)
    return replace(best, bound=None if found.headroom is None else -found.headroom)


def _moved(instance: Instance, best: _Known, config: PlannerConfig, clock: Clock, trace: Trace) -> _Known:
    """``best`` improved while a round improves it, at most ``MOVE_ROUNDS`` rounds: a round tries
    its devices on the GPUs the policy prefers (``reassign``) and, under spread, that layout with
    its blocks rebalanced, each kept when valid and better. A rebalanced layout can move needs
    between devices, so that ``reassign`` improves it again."""
    rebalance = instance.policy is Policy.SPREAD and instance.rules.tensor_split is None and instance.experts is None
    for _ in range(MOVE_ROUNDS):
        start = best
        moved = reassigned(instance, start.layout, device_needs(start.built, start.solution))
        tried = [moved, rebalanced(instance, moved) if rebalance else None]
        for layout in tried:
            if layout is not None and layout != best.layout:
                best = _better(instance, best, layout, config, clock, trace)
        if best is start:
            break
    return best


def improved(
    instance: Instance, built: BuiltModel, found: Sequence[Run], config: PlannerConfig, clock: Clock, trace: Trace
) -> _Known:
    """The best of solutions of ``built`` (a model over ``instance``; a search's first, a hint's
    after it) and of their moved forms (``_moved``), in the model's units, the earliest on a tie; a
    solution the search proved best is the answer as it is. A search cut short can stop on a
    solution that ``reassign`` improves, or that a hint's moved form beats."""
    best: _Known | None = None
    for solution in found:
        known = _Known(built, solution, tie_break_value(built, solution), None)
        if solution.status == cp_model.OPTIMAL:
            return known
        moved = _moved(instance, known, config, clock, trace)
        if best is None or moved.value < best.value:
            best = moved
    assert best is not None, "improved() needs a solution"
    return best


def _strict(layout: Layout) -> tuple[int, int, int]:
    """A layout's strict tiers: (layers on GPUs, workers, GPUs)."""
    return layout.gpu_layers, len(layout.workers), len(layout.devices)


def _better(
    instance: Instance, best: _Known, layout: Layout, config: PlannerConfig, clock: Clock, trace: Trace
) -> _Known:
    """``layout`` when the model of its own workers holds it and it beats ``best``, else ``best``."""
    own = _own_workers(instance, layout)
    found = _solution(own, layout, config, clock, trace)
    if found is not None and (value := tie_break_value(own, found)) < best.value:
        return _Known(own, found, value, None)
    return best


def _own_workers(instance: Instance, layout: Layout) -> BuiltModel:
    """A model of ``layout``'s workers alone (its main worker as the only main one)."""
    main = instance.worker_index(layout.main_worker)
    names = set(layout.workers)
    own = instance.restricted(
        rpc_slots=instance.rpc_slots,
        local_slots=instance.local_slots,
        mains=frozenset(() if main is None else (main,)),
        rpc_workers=frozenset(w for w, view in enumerate(instance.workers) if view.name in names),
    )
    return build_model(own)


def tie_break_value(built: BuiltModel, found: Run) -> int:
    """The tie-break objective (minimised) of a solution of ``built``, in the model's units, read from
    its decisions: an unproven solution's spread headroom variable need not be tight."""
    instance = built.instance
    if not any(found.value(slot.used) for slot in built.variables.slots):
        ram = sum(instance.workers[w].tie_ram * found.value(main) for w, main in built.variables.main.items())
        return ram if instance.policy is Policy.BINPACK else -ram
    value = model_value(built, found)
    return value if instance.policy is Policy.BINPACK else -value


def _solution(built: BuiltModel, layout: Layout, config: PlannerConfig, clock: Clock, trace: Trace) -> Run | None:
    """``layout`` as a complete solution of ``built`` (its decisions fixed), when the model holds it."""
    how, solution = complete_hint(built, layout, config, clock.work, DIRECT_HINT_S)
    trace.completed("known-layout", how)
    if how != "accepted":
        return None
    return Run(cp_model.FEASIBLE, solution, 0.0, 0.0, 0.0)
