"""Solving a deployment under ``objective: speed``: the fastest predicted decode, then fewest workers,
fewest GPUs, then the placement policy's tie-break.

The strict tiers are one weighted sum (``objective.speed_tiers``: the decode time in whole
microseconds, workers, GPUs; each weight exceeds the range of the tiers below it), minimised in
two steps:

1. **One worker** (no rpc-server): the model restricted to local slots, dominated main workers
   pruned (``prune``, speed-aware), at most the valid hint's time (a slower layout cannot win).
   Its best time ``T1`` is the time to beat.
2. **Several workers**: a layout of ``r`` rpc-servers takes at least ``least_time_us + r`` round
   trips (``speed_bound``), so with ``T1 - 1`` to beat at most ``most_servers`` of them fit; with none
   the step is proven empty without a model (``rpc-hop-bound``). Otherwise the model restricted to
   that many rpc slots, pruned for that many other workers, at least two workers, and at most
   ``T1 - 1`` microseconds. A layout of several workers wins only by being faster: it has more
   workers than any one-worker layout. Within the least of ``T1 - 1`` and the valid hint's time,
   ``server_bound.narrow`` leaves out main workers, server counts (posted per main worker) and GPU
   classes in a role that no layout so fast uses (``server-count-bound``); after the first small
   search over the fastest workers (below), again within its time. The step spends at most
   ``SEVERAL_LIMIT_SHARE`` of ``time_limit_s``.

Then, with the time, workers and GPUs fixed, the tie-break on the step's unpruned model with no
more slots of a kind than GPUs (the binpack bound of ``tie_break_bound``, which holds for every
layout of that many GPUs, may prove it without a search; a model of several workers with more GPU
classes than the layers search's tie-break searches is not searched, as there: the step's layout
stands, unproven; nor is it when the strict tiers are not proven); then the alternatives on
other GPU sets, as ``search`` does. A valid hint (the heuristic's layout, ranked by predicted time)
completes as a solution of its step's model: hint and upper bound. Experts placed per block
(``expert_search``'s decision) are part of the same models: the time counts where they go, so no
tier of their own is needed.

The shortcuts of ``search`` under this objective:

* ``capacity_infeasibility`` (``proofs``): kept; it proves that nothing fits, whatever is best.
* ``server_bound``: a lower bound by main worker and server count (a fractional fill of the
  blocks over the roomiest, fastest GPUs); the tie-break keeps its counts (its layouts have the
  optimal time, within the bound's limit).
* ``fast_workers``: on a large cluster, the several-workers step first searches the workers with
  the fastest room (a small model); its layout seeds the full step as its hint. Proves nothing.
* ``speed_bound.slower_mains``: main workers none of whose one-worker layouts can be as fast as the
  valid hint leave the one-worker step (and its tie-break) before the model is built.
* the single-GPU proof (``proofs.single_gpu_answer``), the layer and worker-count steps
  (``steps``, ``layer_bound``, ``gpu_count``), ``mains_reaching``, the witnesses (``witness``) and
  ``reassign``/``ordered_reserve``: not used. They decide or bound the layers tier first, or move
  devices to other GPUs by memory alone (another speed); none holds for the fastest layout.
* dominance pruning (``prune``): kept; with time modelled a dominator must be at least as fast
  (its docstring), so an optimum of these tiers survives. The tie-break runs unpruned.
* symmetry breaking: twin workers must agree on CPU, network and GPU speeds; devices are put in
  class order only where every block takes the same time on each GPU
  (``Instance.interchangeable_devices``).
* ``tie_break_bound.binpack_bound``: kept (a bound over every layout of that GPU count, so also
  over those of the optimal time); the spread bound's witness and rebalancing are not used.
* twin swaps among the alternatives: only between workers that agree on speed too (they are then
  as fast).

Rounding: the times are the model's (``speed_costs``): exact on the rounded figures, within
``error_us`` of each layout's predicted time; no layout is faster than the answer by more than
``2 * error_us`` (``EngineStats.details['speed_rounding_us']``).
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.budget.deadline import DeadlinePassed
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig, Policy
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Candidate, Status
from layerfit.domain.profile import MemoryProfile
from layerfit.memory.experts import experts_are_a_decision
from layerfit.solver.model.build import BuiltModel, build_model
from layerfit.solver.model.candidates import Incumbent, checked_candidate, incumbent_of
from layerfit.solver.model.instance import Instance, build_instance
from layerfit.solver.model.objective import speed_tiers, tie_break
from layerfit.solver.model.progress import tie_break_measure
from layerfit.solver.model.runner import HINT_SHARE, Run, complete_hint, run, set_full_hint
from layerfit.solver.search.alternatives import alternatives_after
from layerfit.solver.search.result import SolveResult, TierValues
from layerfit.solver.search.speed_steps import (
    Step,
    incumbent_time_us,
    one_worker,
    post_server_counts,
    several_workers,
)
from layerfit.solver.search.tie_break_stage import (
    MIN_TIE_BREAK_S,
    TIE_BREAK_NOT_SEARCHED,
    tie_break_value,
    too_large,
)
from layerfit.solver.search.trace import Clock, Trace, charge_set_up, not_run, solve_result, stage_name
from layerfit.solver.shortcuts.proofs import capacity_infeasibility
from layerfit.solver.shortcuts.tie_break_bound import TIE_BREAK_BOUND_MET, applies, binpack_bound, model_value
from layerfit.speed.deployment import deployment_speed


def solve_for_speed(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    hint: Layout | None,
    clock: Clock,
    *,
    shortcuts: bool = True,
) -> SolveResult:
    """The fastest layout, proven (see the module docstring), within ``clock``'s work budget."""
    trace = Trace(objective="speed")
    experts = experts_are_a_decision(deployment, profile, config)
    deadline = clock.work.deadline
    try:
        instance = build_instance(
            cluster, deployment, profile, config, experts=experts, deadline=None if hint is not None else deadline
        )
    except DeadlinePassed:
        return not_run(deployment, clock.elapsed())
    charge_set_up(clock, cluster)
    incumbent = incumbent_of(cluster, deployment, profile, config, hint)
    if incumbent is not None:
        trace.incumbent = "valid"
    if shortcuts and incumbent is None and not experts:
        proof = capacity_infeasibility(instance)
        if proof is not None:
            trace.proof = proof
            return solve_result(instance, clock, trace, Status.INFEASIBLE)
    clock.step()
    target = incumbent_time_us(instance, cluster, deployment, profile, incumbent)
    first = one_worker(instance, hint, target, config, clock, trace, shortcuts=shortcuts)
    second = several_workers(
        instance, first, hint, incumbent, config, clock, trace, shortcuts=shortcuts, target_us=target
    )
    steps = [step for step in (second, first) if step is not None and step.best is not None]
    proven = first.proven and (second is None or second.proven)
    if not steps:
        if incumbent is not None:
            return _kept(instance, clock, trace, incumbent)
        status = Status.INFEASIBLE if proven else Status.UNKNOWN
        trace.proof = "cp-sat" if proven else "none"
        return solve_result(instance, clock, trace, status)
    if proven or not shortcuts:
        final_model, final, tie_proven = _tie_break(steps[0], config, clock, trace, shortcuts=shortcuts)
    else:  # strict tiers not proven: a tie-break among layouts of that time would prove nothing
        assert steps[0].best is not None
        trace.shortcuts.append(TIE_BREAK_NOT_SEARCHED)
        final_model, final, tie_proven = steps[0].built, steps[0].best, False
    best = checked_candidate(cluster, deployment, profile, config, final.layout(final_model))
    if incumbent is not None and not proven and _slower(best.layout, incumbent, cluster, deployment, profile):
        return _kept(instance, clock, trace, incumbent)
    alternatives: tuple[Candidate, ...] = ()
    if proven and config.alternatives:
        alternatives = alternatives_after(
            cluster, deployment, profile, config, final_model, final, clock, trace, shortcuts=shortcuts
        )
    tiers = speed_tiers(final_model.instance, final_model.variables)
    time, workers, gpus = final.value(tiers.time), final.value(tiers.workers), final.value(tiers.gpus)
    objective = float(tiers.value(time, workers, gpus))
    trace.proof = "cp-sat" if proven else "none"
    return solve_result(
        instance,
        clock,
        trace,
        Status.OPTIMAL if proven and tie_proven else Status.FEASIBLE,
        best=best,
        alternatives=alternatives,
        tiers=TierValues(
            gpu_layers=best.layout.gpu_layers, workers=workers, gpus=gpus, tie_break=best.score, decode_us=time
        ),
        strict_optimal=proven,
        objective=objective,
        bound=objective if proven else None,
    )


def _tie_break(
    step: Step, config: PlannerConfig, clock: Clock, trace: Trace, *, shortcuts: bool
) -> tuple[BuiltModel, Run, bool]:
    """With the speed tiers fixed, the policy's tie-break on the step's unpruned model: that model,
    its best run and whether it is proven. Never worse, in the model's units, than the step's own
    solution (the alternatives re-solve the model returned)."""
    assert step.best is not None
    clock.step()
    time, workers, gpus = step.value(speed_tiers(step.built.instance, step.built.variables))
    unpruned = step.unpruned  # a layout of that many GPUs uses no more slots of a kind
    narrow = unpruned.restricted(
        rpc_slots=min(unpruned.rpc_slots, gpus) if workers > 1 else 0, local_slots=min(unpruned.local_slots, gpus)
    )
    # every layout of the optimal time keeps the step's server counts (its instance is narrowed already)
    counts = step.server_counts if workers > 1 else None
    if shortcuts and workers > 1 and too_large(narrow):  # as the layers search: the step's layout stands
        trace.shortcuts.append(TIE_BREAK_NOT_SEARCHED)
        return step.built, step.best, False
    built = build_model(narrow)
    if counts:
        post_server_counts(built, counts)
    tiers = speed_tiers(built.instance, built.variables)
    for expression, value in ((tiers.time, time), (tiers.workers, workers), (tiers.gpus, gpus)):
        built.model.add(expression == value)
    built.model.minimize(tie_break(built.model, built.instance, built.variables, uses_gpus=gpus > 0))
    layout = step.best.layout(step.built)
    how, solution = complete_hint(built, layout, config, clock.work, clock.left() * HINT_SHARE)
    trace.completed("known-layout", how)
    if not solution:  # the step's layout is a solution of the unpruned model: only a limit stops it
        return step.built, step.best, False
    known = Run(cp_model.FEASIBLE, solution, 0.0, 0.0, 0.0)
    set_full_hint(built.model, known.solution)
    bound = _binpack_bound(built, gpus, layout) if shortcuts else None
    if bound is not None and model_value(built, known) <= bound:
        trace.shortcuts.append(TIE_BREAK_BOUND_MET)
        return built, known, True
    nominal = max(MIN_TIE_BREAK_S, clock.spent())
    measure = tie_break_measure(stage_name(step.unpruned), built.instance, uses_gpus=gpus > 0)
    # presolve's probing of a several-workers model spends the tie-break's budget (as in its step)
    probing = workers <= 1
    found = trace.record("tie-break", run(built, config, clock.work, measure, nominal_s=nominal, probing=probing))
    if found.found and tie_break_value(built, found) <= tie_break_value(built, known):
        return built, found, found.status == cp_model.OPTIMAL
    return built, known, False


def _binpack_bound(built: BuiltModel, gpus: int, layout: Layout) -> int | None:
    """``tie_break_bound.binpack_bound`` where it applies: binpack, every layer on GPUs, no rule
    fixing the shape, no experts placed apart."""
    instance = built.instance
    if instance.policy is not Policy.BINPACK or gpus == 0 or not applies(instance, layout.gpu_layers):
        return None
    return binpack_bound(instance, gpus)


def _slower(
    found: Layout, incumbent: Incumbent, cluster: Cluster, deployment: Deployment, profile: MemoryProfile
) -> bool:
    """Whether an unproven answer is predicted slower than the valid incumbent (which then stands)."""
    ours = deployment_speed(cluster, deployment, profile, found).decode_ms_per_token
    theirs = deployment_speed(cluster, deployment, profile, incumbent.layout).decode_ms_per_token
    return theirs < ours


def _kept(instance: Instance, clock: Clock, trace: Trace, incumbent: Incumbent) -> SolveResult:
    """The heuristic's layout as the answer: no step found anything in time."""
    trace.incumbent = "kept"
    trace.proof = "none"
    layout = incumbent.layout
    return solve_result(
        instance,
        clock,
        trace,
        Status.FEASIBLE,
        best=incumbent.candidate,
        tiers=TierValues(
            gpu_layers=layout.gpu_layers,
            workers=len(layout.workers),
            gpus=len(layout.devices),
            tie_break=incumbent.candidate.score,
        ),
    )
