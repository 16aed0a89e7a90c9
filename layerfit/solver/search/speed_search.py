"""Solving a deployment under ``objective: speed``: the fastest predicted decode, then fewest workers,
fewest GPUs, then the placement policy's tie-break.

The strict tiers are one weighted sum (``objective.speed_tiers``: the decode time in whole
microseconds, workers, GPUs; each weight exceeds the range of the tiers below it), minimised in
two steps:

1. **One worker** (no rpc-server): the model restricted to local slots, dominated main workers
   pruned (``prune``, speed-aware). Its best time ``T1`` is the time to beat.
2. **Several workers**: a layout of ``r`` rpc-servers takes at least ``least_time_us + r`` round
   trips (``speed_bound``), so with ``T1 - 1`` to beat at most ``most_servers`` of them fit; with none
   the step is proven empty without a model (``rpc-hop-bound``). Otherwise the model restricted to
   that many rpc slots, pruned for that many other workers, at least two workers, and at most
   ``T1 - 1`` microseconds. A layout of several workers wins only by being faster: it has more
   workers than any one-worker layout.

Then, with the time, workers and GPUs fixed, the tie-break on the step's unpruned model (the
binpack bound of ``tie_break_bound``, which holds for every layout of that many GPUs, may prove it
without a search); then the alternatives on other GPU sets, as ``search`` does. A valid hint (the
heuristic's layout, ranked by predicted time) completes as a solution of its step's model: hint
and upper bound. Experts placed per block (``expert_search``'s decision) are part of the same
models: the time counts where they go, so no tier of their own is needed.

The shortcuts of ``search`` under this objective:

* ``capacity_infeasibility`` (``proofs``): kept; it proves that nothing fits, whatever is best.
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

from dataclasses import dataclass

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
from layerfit.solver.model.objective import SpeedTiers, speed_tiers, tie_break
from layerfit.solver.model.progress import Measure, Tier, tie_break_measure
from layerfit.solver.model.runner import HINT_SHARE, Run, complete_hint, run, set_full_hint
from layerfit.solver.model.speed_costs import to_us
from layerfit.solver.search.alternatives import alternatives_after
from layerfit.solver.search.result import SolveResult, TierValues
from layerfit.solver.search.tie_break_stage import MIN_TIE_BREAK_S, tie_break_value
from layerfit.solver.search.trace import Clock, Trace, charge_set_up, not_run, solve_result, stage_name
from layerfit.solver.shortcuts.proofs import capacity_infeasibility
from layerfit.solver.shortcuts.prune import prune_dominated
from layerfit.solver.shortcuts.speed_bound import most_servers, slower_mains
from layerfit.solver.shortcuts.tie_break_bound import TIE_BREAK_BOUND_MET, applies, binpack_bound, model_value
from layerfit.speed.deployment import deployment_speed

ONE_WORKER_BOUND = "one-worker-time-bound"
"""Shortcut name: main workers left out of the one-worker step, slower than the hint (``speed_bound``)."""
RPC_HOP_BOUND = "rpc-hop-bound"
"""Shortcut name: no layout with rpc-servers can beat the best one-worker layout (``speed_bound``)."""
ONE_WORKER_SHARE = 0.4
"""Share of the work left the one-worker step may spend (the several-workers step gets most of the rest)."""
SEVERAL_SHARE = 0.6
"""Share of the work left after the first step for the several-workers step."""


@dataclass(frozen=True)
class _Step:
    """A step's model, its best run (``None``: nothing found) and whether it is proven."""

    built: BuiltModel
    unpruned: Instance
    best: Run | None
    proven: bool
    hinted: tuple[int, ...] = ()

    def value(self, tiers: SpeedTiers) -> tuple[int, int, int]:
        assert self.best is not None
        return self.best.value(tiers.time), self.best.value(tiers.workers), self.best.value(tiers.gpus)


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
    target = _incumbent_time_us(instance, cluster, deployment, profile, incumbent)
    first = _one_worker(instance, hint, target, config, clock, trace, shortcuts=shortcuts)
    second = _several_workers(instance, first, hint, incumbent, config, clock, trace, shortcuts=shortcuts)
    steps = [step for step in (second, first) if step is not None and step.best is not None]
    proven = first.proven and (second is None or second.proven)
    if not steps:
        if incumbent is not None:
            return _kept(instance, clock, trace, incumbent)
        status = Status.INFEASIBLE if proven else Status.UNKNOWN
        trace.proof = "cp-sat" if proven else "none"
        return solve_result(instance, clock, trace, status)
    final_model, final, tie_proven = _tie_break(steps[0], config, clock, trace, shortcuts=shortcuts)
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


def speed_measure(stage: str, instance: Instance, tiers: SpeedTiers) -> Measure:
    """The speed tiers for progress reports: microseconds per token, workers, GPUs (all minimised)."""
    top = instance.speed.time_upper_bound(instance.rpc_slots + instance.local_slots) if instance.speed else 0
    gpus = instance.rpc_slots + instance.local_slots
    return Measure(
        stage=stage,
        unit="us per token",
        tiers=(
            Tier("decode time", "us per token", tiers.time, tiers.time_weight, False, 0, top),
            Tier("workers", "workers", tiers.workers, tiers.worker_weight, False, 1, 1 + instance.rpc_slots),
            Tier("GPUs", "GPUs", tiers.gpus, 1, False, 0, gpus),
        ),
    )


def _search(
    instance: Instance,
    searched: Instance,
    hint: Layout | None,
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
    name: str,
    nominal_s: float,
    *,
    cap_us: int | None = None,
    several: bool = False,
) -> _Step:
    """Minimise the speed tiers on ``searched`` (``instance`` pruned): at most ``cap_us`` of time,
    with ``several`` at least two workers; the hint completed as a solution first (``_hint``)."""
    built = build_model(searched)
    tiers = speed_tiers(built.instance, built.variables)
    if cap_us is not None:
        built.model.add(tiers.time <= cap_us)
    if several:
        built.model.add(tiers.workers >= 2)
    hinted = _hint(built, hint, several, config, clock, trace)
    if hinted:
        built.model.add(tiers.combined <= Run(cp_model.FEASIBLE, hinted, 0.0, 0.0, 0.0).value(tiers.combined))
    built.model.maximize(-tiers.combined)
    measure = speed_measure(stage_name(instance, name), built.instance, tiers)
    found = trace.record(name, run(built, config, clock.work, measure, nominal_s=nominal_s))
    best = found if found.found else None
    if best is None and hinted:  # cut short: the hint's solution stands, unproven
        best = Run(cp_model.FEASIBLE, hinted, 0.0, 0.0, 0.0)
    proven = found.status in (cp_model.OPTIMAL, cp_model.INFEASIBLE) and not (
        found.status == cp_model.INFEASIBLE and hinted
    )
    return _Step(built, instance, best, proven, hinted)


def _hint(
    built: BuiltModel, hint: Layout | None, several: bool, config: PlannerConfig, clock: Clock, trace: Trace
) -> tuple[int, ...]:
    """The hint as a complete solution of the step's model, when it has the step's worker count."""
    if hint is None or (len(hint.workers) > 1) != several:
        return ()
    how, solution = complete_hint(built, hint, config, clock.work, clock.left() * HINT_SHARE)
    trace.hinted(how)
    return solution


def _incumbent_time_us(
    instance: Instance,
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    incumbent: Incumbent | None,
) -> int | None:
    """At least the valid hint's time in the model: its predicted time plus the rounding bound."""
    if incumbent is None or instance.speed is None:
        return None
    predicted = deployment_speed(cluster, deployment, profile, incumbent.layout).decode_ms_per_token
    return to_us(predicted) + instance.speed.error_us


def _one_worker(
    instance: Instance,
    hint: Layout | None,
    target_us: int | None,
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
    *,
    shortcuts: bool,
) -> _Step:
    """Step 1: the fastest layout without an rpc-server; main workers whose every one-worker layout
    is slower than the valid hint (``speed_bound.slower_mains``) left out, the tie-break's model too
    (none of their layouts reaches the optimal time)."""
    one = instance.restricted(rpc_slots=0, local_slots=instance.local_slots)
    if shortcuts and target_us is not None:
        slower = slower_mains(one, target_us)
        if slower:
            trace.shortcuts.append(ONE_WORKER_BOUND)
            mains = frozenset(w for w, view in enumerate(one.workers) if view.main_ok and w not in slower)
            one = one.restricted(rpc_slots=0, local_slots=instance.local_slots, mains=mains)
    searched = prune_dominated(one, others=0) if shortcuts else one
    return _search(one, searched, hint, config, clock, trace, "one-worker", clock.left() * ONE_WORKER_SHARE)


def _several_workers(
    instance: Instance,
    first: _Step,
    hint: Layout | None,
    incumbent: Incumbent | None,
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
    *,
    shortcuts: bool,
) -> _Step | None:
    """Step 2: a faster layout with rpc-servers, if any can be (``None``: proven that none is)."""
    if instance.rpc_slots == 0:
        return None
    cap: int | None = None
    servers = instance.rpc_slots
    if first.best is not None:
        tiers = speed_tiers(first.built.instance, first.built.variables)
        cap = first.best.value(tiers.time) - 1
        if shortcuts:
            servers = most_servers(instance, cap)
            if servers < 1:
                trace.shortcuts.append(RPC_HOP_BOUND)
                return None
    clock.step()
    several = instance.restricted(rpc_slots=servers, local_slots=instance.local_slots)
    searched = prune_dominated(several, others=servers) if shortcuts else several
    nominal = clock.left() * SEVERAL_SHARE
    return _search(several, searched, hint, config, clock, trace, "several-workers", nominal, cap_us=cap, several=True)


def _tie_break(
    step: _Step, config: PlannerConfig, clock: Clock, trace: Trace, *, shortcuts: bool
) -> tuple[BuiltModel, Run, bool]:
    """With the speed tiers fixed, the policy's tie-break on the step's unpruned model: that model,
    its best run and whether it is proven. Never worse, in the model's units, than the step's own
    solution (the alternatives re-solve the model returned)."""
    assert step.best is not None
    clock.step()
    built = build_model(step.unpruned)
    tiers = speed_tiers(built.instance, built.variables)
    time, workers, gpus = step.value(speed_tiers(step.built.instance, step.built.variables))
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
    found = trace.record("tie-break", run(built, config, clock.work, measure, nominal_s=nominal))
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
