"""Solving a deployment whose experts' place is a decision (``expert_costs``).

The tiers, strict in this order: layers on GPUs, blocks whose experts are on GPUs, workers, GPUs;
then the placement policy's tie-break. One model holds every slot and worker, with the experts of
each GPU block free to stay on the host; it maximises the weighted strict tiers from the
heuristic's layout (hint and floor), then, with them fixed, minimises the tie-break, then finds
the alternatives on other GPU sets as ``search`` does. The capacity bounds, shortcuts and
worker-by-worker steps of ``search`` take blocks with their experts, so they are not used here.
A context range is decided around this (``layerfit.planning.context_range``): each context is a fixed-context
solve, and the largest context that keeps the tiers above it wins.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Candidate, Status
from layerfit.domain.profile import MemoryProfile
from layerfit.solver.model.build import BuiltModel, build_model
from layerfit.solver.model.candidates import Incumbent, checked_candidate, incumbent_of
from layerfit.solver.model.constraints.experts import experts_on_gpus
from layerfit.solver.model.instance import Instance, build_instance
from layerfit.solver.model.objective import tie_break
from layerfit.solver.model.progress import Measure, Tier, tie_break_measure
from layerfit.solver.model.runner import HINT_SHARE, Run, complete_hint, run, set_full_hint
from layerfit.solver.model.variables import Expr
from layerfit.solver.search.alternatives import alternatives_after
from layerfit.solver.search.result import SolveResult, TierValues
from layerfit.solver.search.tie_break_stage import MIN_TIE_BREAK_S, tie_break_value
from layerfit.solver.search.trace import Clock, Trace, charge_set_up, solve_result

ExpertTierKey = tuple[int, int, int, int]
"""``(layers, expert blocks on GPUs, -workers, -gpus)``: higher is better."""


def expert_tier_key(profile: MemoryProfile, layout: Layout) -> ExpertTierKey:
    """A layout's strict tiers when experts are placed apart from their blocks."""
    on_gpus = sum(1 for block in profile.expert_blocks if block >= layout.cpu_blocks)
    return (layout.gpu_layers, on_gpus - len(layout.host_expert_blocks), -len(layout.workers), -len(layout.devices))


@dataclass(frozen=True)
class ExpertTiers:
    layers: Expr
    experts: Expr
    workers: Expr
    gpus: Expr
    weights: tuple[int, int, int]
    """Layer, expert and worker weights; each exceeds the whole range of the tiers below it."""

    @property
    def combined(self) -> Expr:
        return self.value(self.layers, self.experts, self.workers, self.gpus)

    def value(self, layers: Expr, experts: Expr, workers: Expr, gpus: Expr) -> Expr:
        layer_weight, expert_weight, worker_weight = self.weights
        return layer_weight * layers + expert_weight * experts - worker_weight * workers - gpus

    def of(self, key: ExpertTierKey) -> int:
        layers, experts, workers, gpus = key
        value = self.value(layers, experts, -workers, -gpus)
        assert isinstance(value, int)
        return value


def expert_measure(instance: Instance, tiers: ExpertTiers) -> Measure:
    """The expert tiers for progress reports: layers, experts, workers and GPUs in their units."""
    assert instance.experts is not None
    layer_weight, expert_weight, worker_weight = tiers.weights
    gpus = instance.rpc_slots + instance.local_slots
    return Measure(
        stage=f"cp-sat for {instance.deployment} (experts per block)",
        unit="layers on GPUs",
        tiers=(
            Tier("layers on GPUs", "layers", tiers.layers, layer_weight, True, 0, instance.n_layers),
            Tier("experts on GPUs", "blocks' experts", tiers.experts, expert_weight, True, 0, instance.n_blocks),
            Tier("workers", "workers", tiers.workers, worker_weight, False, 1, 1 + instance.rpc_slots),
            Tier("GPUs", "GPUs", tiers.gpus, 1, False, 0, gpus),
        ),
    )


def expert_tiers(built: BuiltModel) -> ExpertTiers:
    instance, variables = built.instance, built.variables
    assert instance.experts is not None
    max_gpus = instance.rpc_slots + instance.local_slots
    worker_weight = max_gpus + 1
    expert_weight = instance.rpc_slots * worker_weight + max_gpus + 1
    layer_weight = (len(instance.experts.blocks) + 1) * expert_weight
    return ExpertTiers(
        layers=variables.gpu_layers,
        experts=experts_on_gpus(built.model, instance.experts, variables),
        workers=sum(variables.worker_used.values()),
        gpus=sum(slot.used for slot in variables.slots),
        weights=(layer_weight, expert_weight, worker_weight),
    )


def solve_with_experts(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    hint: Layout | None,
    clock: Clock,
) -> SolveResult:
    """The provably best layout, experts placed block by block (see the module docstring), within
    ``clock``'s work budget."""
    trace = Trace()
    instance = build_instance(cluster, deployment, profile, config, experts=True)
    charge_set_up(clock, cluster)
    clock.step()
    incumbent = incumbent_of(cluster, deployment, profile, config, hint)
    if incumbent is not None:
        trace.incumbent = "valid"
    built = build_model(instance)
    tiers = expert_tiers(built)
    hinted: tuple[int, ...] = ()
    if hint is not None:
        how, hinted = complete_hint(built, hint, config, clock.work, clock.left() * HINT_SHARE)
        trace.hinted(how)
    if incumbent is not None:
        built.model.add(tiers.combined >= tiers.of(expert_tier_key(profile, incumbent.layout)))
    built.model.maximize(tiers.combined)
    first = trace.record("strict", run(built, config, clock.work, expert_measure(instance, tiers)))
    if not first.found:
        if incumbent is not None:
            return _kept(instance, profile, clock, trace, incumbent, tiers, first)
        proven_empty = first.status == cp_model.INFEASIBLE and not hinted
        return solve_result(instance, clock, trace, Status.INFEASIBLE if proven_empty else Status.UNKNOWN)
    strict_proven = first.status == cp_model.OPTIMAL
    key = (first.value(tiers.layers), first.value(tiers.experts), first.value(tiers.workers), first.value(tiers.gpus))
    final = _tie_break(built, tiers, key, (first, hinted), config, clock, trace)
    best = checked_candidate(cluster, deployment, profile, config, final.layout(built))
    if incumbent is not None and expert_tier_key(profile, incumbent.layout) > expert_tier_key(profile, best.layout):
        return _kept(instance, profile, clock, trace, incumbent, tiers, first)
    alternatives: tuple[Candidate, ...] = ()
    if strict_proven and config.alternatives:
        alternatives = alternatives_after(cluster, deployment, profile, config, built, final, clock, trace)
    trace.proof = "cp-sat" if strict_proven else "none"
    objective = float(tiers.of(expert_tier_key(profile, best.layout)))
    return solve_result(
        instance,
        clock,
        trace,
        Status.OPTIMAL if strict_proven and final.status == cp_model.OPTIMAL else Status.FEASIBLE,
        best=best,
        alternatives=alternatives,
        tiers=_tier_values(profile, best),
        strict_optimal=strict_proven,
        objective=objective,
        bound=objective if strict_proven else max(objective, first.bound),
    )


def _tie_break(
    built: BuiltModel,
    tiers: ExpertTiers,
    key: tuple[int, int, int, int],
    known: tuple[Run, tuple[int, ...]],
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
) -> Run:
    """With the strict tiers fixed at ``key``, the best tie-break: never worse, in the model's units,
    than the strict solve's solution or the hint's (``known``, the hint counting only at ``key``)."""
    first, hinted = known
    expressions = (tiers.layers, tiers.experts, tiers.workers, tiers.gpus)
    best = first
    if hinted:
        hint_run = Run(status=cp_model.FEASIBLE, solution=hinted, objective=0.0, bound=0.0, wall_time_s=0.0)
        at_key = tuple(hint_run.value(e) for e in expressions) == key
        if at_key and tie_break_value(built, hint_run) < tie_break_value(built, first):
            best = hint_run
    for expression, value in zip(expressions, key, strict=True):
        built.model.add(expression == value)
    built.model.minimize(tie_break(built.model, built.instance, built.variables, uses_gpus=key[3] > 0))
    set_full_hint(built.model, best.solution)
    nominal = max(MIN_TIE_BREAK_S, clock.spent())
    stage = f"cp-sat for {built.instance.deployment} (experts per block)"
    measure = tie_break_measure(stage, built.instance, uses_gpus=key[3] > 0)
    second = trace.record("tie-break", run(built, config, clock.work, measure, nominal_s=nominal))
    if second.found and tie_break_value(built, second) <= tie_break_value(built, best):
        return second
    return replace(best, status=cp_model.FEASIBLE)  # the strict solve's status says nothing of the tie-break


def _tier_values(profile: MemoryProfile, candidate: Candidate) -> TierValues:
    layers, experts, workers, gpus = expert_tier_key(profile, candidate.layout)
    return TierValues(
        gpu_layers=layers, expert_blocks_on_gpus=experts, workers=-workers, gpus=-gpus, tie_break=candidate.score
    )


def _kept(
    instance: Instance,
    profile: MemoryProfile,
    clock: Clock,
    trace: Trace,
    incumbent: Incumbent,
    tiers: ExpertTiers,
    search: Run,
) -> SolveResult:
    """The heuristic's layout as the answer (the search found nothing better in time, or CP-SAT
    contradicted a layout ``check`` accepts)."""
    trace.incumbent = "contradicted" if search.status == cp_model.INFEASIBLE else "kept"
    trace.proof = "none"
    objective = float(tiers.of(expert_tier_key(profile, incumbent.layout)))
    return solve_result(
        instance,
        clock,
        trace,
        Status.FEASIBLE,
        best=incumbent.candidate,
        tiers=_tier_values(profile, incumbent.candidate),
        objective=objective,
        bound=max(objective, search.bound) if search.found else None,
    )
