"""Solving one deployment: which models to solve, in which order, and what the answer is.

The strict tiers (layers, workers, GPUs) are decided first, then the tie-break:

1. **Every layer on GPUs, fewest workers first.** With ``t = 1, 2, ...`` workers, a model
   restricted to layouts with ``t`` workers asks for the layer ceiling (every layer, or the user's
   ``-ngl``) and the fewest GPUs. Workers that cannot take part in such a layout by a capacity
   bound (``model.capacity``) are left out, and for ``t >= 2`` dominated workers too (``prune``). With
   one worker the GPU count grows one by one (``k = 1, 2, ...`` local slots): GPUStack's order
   (one GPU, then several GPUs of one worker), but each step is an exact search. The first
   ``t`` with a solution gives the optimal strict tiers: no layout has more layers, every smaller
   ``t`` (and ``k``) was proven impossible.
2. **General model.** When no worker count reaches the ceiling (partial offload, CPU only), the
   full model maximises the weighted strict tiers from the heuristic's layout as a complete hint.
3. **Tie-break** (``tie_break_stage``). A model restricted to the optimal GPU count and to the
   candidates of step 1 or 2 (before dominance pruning), with the strict tiers fixed, minimises
   the policy's tie-break.
4. **Alternatives** on that model (``alternatives``).

Every decoded layout is checked again in bytes with ``layerfit.check``; a violation is a bug and
raises ``SolverError``. Every step stops on a work budget (``layerfit.budget.work``: CP-SAT's
deterministic time, fixed costs), the wall clock being only a safety stop (``safety_stops`` in the
stats), so with one search worker and a fixed seed the answer is the same on every run unless the
safety stop fires.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.budget.deadline import DeadlinePassed
from layerfit.budget.work import Work
from layerfit.check import check_layout
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import Objective, PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Candidate, Status
from layerfit.domain.profile import MemoryProfile
from layerfit.memory.experts import experts_are_a_decision
from layerfit.solver.model.build import build_model
from layerfit.solver.model.candidates import Incumbent, checked_candidate, incumbent_of, tier_key
from layerfit.solver.model.capacity import (
    layer_ceiling,
)
from layerfit.solver.model.decode import decision_values
from layerfit.solver.model.instance import Instance, build_instance
from layerfit.solver.model.objective import strict_tiers, strict_value
from layerfit.solver.model.progress import strict_measure
from layerfit.solver.model.runner import HINT_SHARE, hint_layout, run
from layerfit.solver.search.alternatives import alternatives as find_alternatives
from layerfit.solver.search.result import SolveResult, TierValues
from layerfit.solver.search.steps import multi_worker_step, single_worker_step
from layerfit.solver.search.tie_break_stage import tie_break_stage
from layerfit.solver.search.trace import (
    Clock,
    SearchOutcome,
    Trace,
    charge_set_up,
    kept_incumbent,
    not_run,
    solve_result,
    stage_name,
)
from layerfit.solver.shortcuts.layer_bound import most_layers
from layerfit.solver.shortcuts.proofs import (
    SINGLE_GPU,
    capacity_infeasibility,
    forced_layers,
    mains_reaching,
    single_gpu_answer,
)
from layerfit.solver.shortcuts.prune import prune_dominated
from layerfit.solver.shortcuts.witness import Valid

CEILING_SEARCH = "ceiling-search"
"""Proof name: the rules fix the GPU-layer count, and the ceiling search proved it unreachable."""
LAYER_BOUND = "layer-bound"
"""Proof name: step 1 found a layout at the most layers the capacity bounds allow (``layer_bound``)."""


def solve(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig = PlannerConfig(),
    hint: Layout | None = None,
    *,
    shortcuts: bool = True,
    work: Work | None = None,
) -> SolveResult:
    """The provably best layout for one deployment under the objective tiers of ``docs/design.md``
    (``objective: speed``: ``speed_search``).

    ``hint`` (the heuristic's best layout) seeds the search; it need not be valid. A valid hint is
    the incumbent: the answer is never worse than it, and never UNKNOWN or INFEASIBLE.
    ``shortcuts``: answer without CP-SAT where a bound proves it (``proofs``, and a multi-worker
    step's greedy ``witness`` meeting its bound); off only to test them.
    When where the experts go is a decision (``layerfit.memory.experts.experts_are_a_decision``), the model
    places them block by block (``expert_search``), with the tier "blocks with experts on GPUs".
    ``work``: what the solve may spend, and its safety stop (default ``Work.of(config.time_limit_s)``).
    """
    clock = Clock(work if work is not None else Work.of(config.time_limit_s))
    if config.objective_for(deployment) is Objective.SPEED:
        from layerfit.solver.search.speed_search import solve_for_speed

        return solve_for_speed(cluster, deployment, profile, config, hint, clock, shortcuts=shortcuts)
    if experts_are_a_decision(deployment, profile, config):
        from layerfit.solver.search.expert_search import solve_with_experts

        return solve_with_experts(cluster, deployment, profile, config, hint, clock)
    trace = Trace()
    # Without a hint the set-up stops at the safety stop (UNKNOWN); a hint that proves valid is the
    # answer however late, so with one the instance is always built.
    deadline = clock.work.deadline
    try:
        instance = build_instance(cluster, deployment, profile, config, deadline=None if hint is not None else deadline)
    except DeadlinePassed:
        return not_run(deployment, clock.elapsed())
    charge_set_up(clock, cluster)
    incumbent = incumbent_of(cluster, deployment, profile, config, hint)
    if incumbent is None and deadline.expired():
        return not_run(deployment, clock.elapsed())
    if incumbent is not None:
        trace.incumbent = "valid"
    if shortcuts:
        shortcut = _shortcut(cluster, deployment, profile, config, instance, incumbent, clock, trace)
        if shortcut is not None:
            return shortcut

    def valid(layout: Layout) -> bool:
        return not check_layout(cluster, deployment, profile, layout, config)

    outcome = _ceiling_search(instance, hint, config, clock, trace, valid if shortcuts else None)
    if outcome is Status.INFEASIBLE and shortcuts and incumbent is None and (forced_layers(instance) or 0) > 0:
        # The rules fix the GPU-layer count and no worker count reaches it: nothing else can fit.
        trace.proof = CEILING_SEARCH
        return solve_result(instance, clock, trace, Status.INFEASIBLE)
    proof = "cp-sat"
    if outcome is Status.INFEASIBLE and shortcuts:
        most = most_layers(instance, 0 if incumbent is None else incumbent.layers, layer_ceiling(instance))
        if most is not None:
            outcome = _ceiling_search(instance, hint, config, clock, trace, valid, ceiling=most)
            proof = LAYER_BOUND
    if not isinstance(outcome, SearchOutcome):
        proof = "cp-sat"
        outcome = _general_search(instance, hint, incumbent, config, clock, trace)
    if not isinstance(outcome, SearchOutcome):
        if incumbent is not None:
            return kept_incumbent(instance, clock, trace, incumbent, outcome, bound=None)
        return solve_result(instance, clock, trace, outcome)
    best = checked_candidate(cluster, deployment, profile, config, outcome.best.layout(outcome.built))
    if incumbent is not None and not outcome.strict_proven and incumbent.key > tier_key(best.layout):
        return kept_incumbent(instance, clock, trace, incumbent, Status.FEASIBLE, bound=outcome.bound)
    alternatives: tuple[Candidate, ...] = ()
    if outcome.strict_proven and config.alternatives:
        alternatives = find_alternatives(
            cluster, deployment, profile, config, outcome, clock, trace, shortcuts=shortcuts
        )
    status = Status.OPTIMAL if outcome.strict_proven and outcome.tie_break_proven else Status.FEASIBLE
    tiers = TierValues(gpu_layers=outcome.layers, workers=outcome.workers, gpus=outcome.gpus, tie_break=best.score)
    objective = float(strict_value(instance, outcome.layers, outcome.workers, outcome.gpus))
    trace.proof = proof if outcome.strict_proven else "none"
    return solve_result(
        instance,
        clock,
        trace,
        status,
        best=best,
        alternatives=alternatives,
        tiers=tiers,
        strict_optimal=outcome.strict_proven,
        objective=objective,
        bound=objective if outcome.strict_proven else outcome.bound,
    )


def _shortcut(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    instance: Instance,
    incumbent: Incumbent | None,
    clock: Clock,
    trace: Trace,
) -> SolveResult | None:
    """An answer proven without CP-SAT (``proofs``), or ``None``."""
    if incumbent is None:
        proof = capacity_infeasibility(instance)
        if proof is not None:
            trace.proof = proof
            return solve_result(instance, clock, trace, Status.INFEASIBLE)
        return None
    found = single_gpu_answer(cluster, deployment, profile, config, instance, incumbent)
    if found is None:
        return None
    trace.proof = SINGLE_GPU
    best, *alternatives = found
    objective = float(strict_value(instance, incumbent.layers, 1, 1))
    return solve_result(
        instance,
        clock,
        trace,
        Status.OPTIMAL,
        best=best,
        alternatives=tuple(alternatives),
        tiers=TierValues(gpu_layers=incumbent.layers, workers=1, gpus=1, tie_break=best.score),
        strict_optimal=True,
        objective=objective,
        bound=objective,
    )


def layout_is_feasible_in_model(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, layout: Layout
) -> bool:
    """Whether the CP model (without symmetry breaking) accepts ``layout`` with its decisions fixed."""
    instance = build_instance(cluster, deployment, profile, config)
    built = build_model(instance, break_symmetry=False)
    values = decision_values(instance, built.variables, layout)
    if values is None:
        return False
    for var, value in values.items():
        built.model.add(var == value)
    return run(built, config, Work.of(config.time_limit_s)).found


# ---------------------------------------------------------------------------------------------
# The two searches
# ---------------------------------------------------------------------------------------------


def _ceiling_search(
    instance: Instance,
    hint: Layout | None,
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
    valid: Valid | None = None,
    *,
    ceiling: int | None = None,
) -> SearchOutcome | Status:
    """Step 1: the layer ceiling (or ``ceiling`` layers, which no layout exceeds) with ``t = 1, 2,
    ...`` workers. ``INFEASIBLE``: no worker count reaches it (proven); ``UNKNOWN``: a step ran out
    of time."""
    ceiling = layer_ceiling(instance) if ceiling is None else ceiling
    if ceiling == 0:
        return Status.INFEASIBLE
    found = single_worker_step(instance, ceiling, hint, config, clock, trace)
    for workers in range(2, instance.rpc_slots + 2):
        if found is not Status.INFEASIBLE:
            break
        found = multi_worker_step(instance, ceiling, workers, hint, config, clock, trace, valid)
    return found


def _general_search(
    instance: Instance,
    hint: Layout | None,
    incumbent: Incumbent | None,
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
) -> SearchOutcome | Status:
    """Step 2: the weighted strict tiers on the full model, then the tie-break. A valid hint's
    strict value bounds the objective from below (pruning keeps an optimum, so it stays valid), and
    only main workers that can reach its layers take part (``proofs.mains_reaching``)."""
    clock.step()
    if incumbent is not None:
        instance = instance.restricted(
            rpc_slots=instance.rpc_slots,
            local_slots=instance.local_slots,
            mains=mains_reaching(instance, incumbent.layers),
        )
    built = build_model(prune_dominated(instance))
    hinted = False
    if hint is not None:
        trace.hinted(hint_layout(built, hint, config, clock.work, clock.left() * HINT_SHARE))
        hinted = trace.hint == "accepted"
    tiers = strict_tiers(built.instance, built.variables)
    if incumbent is not None:
        floor = strict_value(built.instance, incumbent.layers, incumbent.workers, incumbent.gpus)
        built.model.add(tiers.combined >= floor)
    built.model.maximize(tiers.combined)
    measure = strict_measure(stage_name(instance), built.instance, tiers)
    first = trace.record("strict", run(built, config, clock.work, measure))
    if not first.found:
        # INFEASIBLE despite an accepted hint would be a CP-SAT fault: report no proof rather than a wrong one.
        # With an incumbent, ``solve`` keeps it and names the contradiction.
        proven_empty = first.status == cp_model.INFEASIBLE and (incumbent is not None or not hinted)
        return Status.INFEASIBLE if proven_empty else Status.UNKNOWN
    outcome = SearchOutcome(
        built=built,
        best=first,
        layers=first.value(tiers.layers),
        workers=first.value(tiers.workers),
        gpus=first.value(tiers.gpus),
        strict_proven=first.status == cp_model.OPTIMAL,
        tie_break_proven=False,
        bound=first.bound,
        ranks_tie_break=False,
    )
    return tie_break_stage(instance, outcome, config, clock, trace, hint=hint) if outcome.strict_proven else outcome
