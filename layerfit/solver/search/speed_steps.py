"""The steps of the speed search (``speed_search``): the one-worker and several-workers models,
each minimising the speed tiers, with the shortcuts that apply to each (see ``speed_search``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ortools.sat.python import cp_model

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.solver.model.build import BuiltModel, build_model
from layerfit.solver.model.candidates import Incumbent
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.objective import SpeedTiers, speed_tiers
from layerfit.solver.model.progress import Measure, Tier
from layerfit.solver.model.runner import HINT_SHARE, Run, complete_hint, run
from layerfit.solver.model.speed_costs import to_us
from layerfit.solver.search.trace import Clock, Trace, stage_name
from layerfit.solver.shortcuts.fast_workers import fast_workers
from layerfit.solver.shortcuts.prune import keeping, prune_dominated
from layerfit.solver.shortcuts.server_bound import SERVER_BOUND, ServerBound, narrow
from layerfit.solver.shortcuts.speed_bound import most_servers, slower_mains
from layerfit.speed.deployment import deployment_speed

FAST_WORKERS_SEED = "fast-workers-seed"
"""Shortcut name: the several-workers step hinted with a layout over the fastest workers."""
SEED_SERVERS = 2
"""The most rpc-servers of the small first search (most fast layouts have one or two); twice as
many while it proves that none of that many fits under the time to beat."""
SEED_SHARE = 0.3
"""Share of the several-workers step's work its small first search over the fastest workers may spend."""
ONE_WORKER_BOUND = "one-worker-time-bound"
"""Shortcut name: main workers left out of the one-worker step, slower than the hint (``speed_bound``)."""
RPC_HOP_BOUND = "rpc-hop-bound"
"""Shortcut name: no layout with rpc-servers can beat the best one-worker layout (``speed_bound``)."""
ONE_WORKER_SHARE = 0.4
"""Share of the work left the one-worker step may spend (the several-workers step gets most of the rest)."""
SEVERAL_SHARE = 0.6
"""Share of the work left after the first step for the several-workers step ..."""
SEVERAL_LIMIT_SHARE = 0.2
"""... and at most this share of ``time_limit_s`` (nominal seconds), its first small search
included: on a cluster of 1,024 GPUs a several-workers model that the bounds leave large is not
proven with more either (neither of ``speed_objective.py``'s two such cases with a 30 s limit,
where one found a layout 0.9 % faster), and the answer is then reported unproven."""


@dataclass(frozen=True)
class Step:
    """A step's model, its best run (``None``: nothing found) and whether it is proven."""

    built: BuiltModel
    unpruned: Instance
    best: Run | None
    proven: bool
    hinted: tuple[int, ...] = ()
    server_counts: Mapping[int, tuple[int, ...]] | None = None
    """Per main worker, the rpc-server counts a layout within the step's time to beat may have
    (``server_bound``; ``None``: not bounded): they hold for the tie-break's layouts too."""

    def value(self, tiers: SpeedTiers) -> tuple[int, int, int]:
        assert self.best is not None
        return self.best.value(tiers.time), self.best.value(tiers.workers), self.best.value(tiers.gpus)


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
    server_counts: Mapping[int, tuple[int, ...]] | None = None,
    presolve_passes: int | None = None,
) -> Step:
    """Minimise the speed tiers on ``searched`` (``instance`` pruned): at most ``cap_us`` of time,
    with ``several`` at least two workers, each main worker of ``server_counts`` with one of its
    counts of rpc-servers; the hint completed as a solution first (``_hint``). ``presolve_passes``:
    CP-SAT's rounds of presolve (``runner.solver_for``; default: CP-SAT's)."""
    built = build_model(searched)
    tiers = speed_tiers(built.instance, built.variables)
    if cap_us is not None:
        built.model.add(tiers.time <= cap_us)
    if several:
        built.model.add(tiers.workers >= 2)
    if server_counts:
        post_server_counts(built, server_counts)
    hinted = _hint(built, hint, several, config, clock, trace)
    if hinted:
        built.model.add(tiers.combined <= Run(cp_model.FEASIBLE, hinted, 0.0, 0.0, 0.0).value(tiers.combined))
    built.model.maximize(-tiers.combined)
    measure = speed_measure(stage_name(instance, name), built.instance, tiers)
    found = trace.record(
        name,
        run(
            built,
            config,
            clock.work,
            measure,
            nominal_s=nominal_s,
            probing=not several,
            presolve_passes=presolve_passes,
        ),
    )
    best = found if found.found else None
    if best is None and hinted:  # cut short: the hint's solution stands, unproven
        best = Run(cp_model.FEASIBLE, hinted, 0.0, 0.0, 0.0)
    proven = found.status in (cp_model.OPTIMAL, cp_model.INFEASIBLE) and not (
        found.status == cp_model.INFEASIBLE and hinted
    )
    return Step(built, instance, best, proven, hinted, server_counts)


def post_server_counts(built: BuiltModel, server_counts: Mapping[int, tuple[int, ...]]) -> None:
    """Each main worker's number of used rpc slots in its allowed counts (``server_bound``)."""
    variables = built.variables
    servers = sum(slot.used for slot in variables.rpc)
    for w, is_main in variables.main.items():
        counts = server_counts.get(w)
        if counts is None:
            continue
        if not counts:
            built.model.add(is_main == 0)
            continue
        domain = cp_model.Domain.from_values(list(counts))
        built.model.add_linear_expression_in_domain(servers, domain).only_enforce_if(is_main)


def _hint(
    built: BuiltModel, hint: Layout | None, several: bool, config: PlannerConfig, clock: Clock, trace: Trace
) -> tuple[int, ...]:
    """The hint as a complete solution of the step's model, when it has the step's worker count."""
    if hint is None or (len(hint.workers) > 1) != several:
        return ()
    how, solution = complete_hint(built, hint, config, clock.work, clock.left() * HINT_SHARE)
    trace.hinted(how)
    return solution


def incumbent_time_us(
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


def one_worker(
    instance: Instance,
    hint: Layout | None,
    target_us: int | None,
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
    *,
    shortcuts: bool,
) -> Step:
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
    searched = _pruned(one, 0, hint, several=False) if shortcuts else one
    nominal = clock.left() * ONE_WORKER_SHARE
    cap = target_us if shortcuts else None  # a one-worker layout slower than the hint cannot win
    return _search(one, searched, hint, config, clock, trace, "one-worker", nominal, cap_us=cap)


def several_workers(
    instance: Instance,
    first: Step,
    hint: Layout | None,
    incumbent: Incumbent | None,
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
    *,
    shortcuts: bool,
    target_us: int | None = None,
) -> Step | None:
    """Step 2: a faster layout with rpc-servers, if any can be (``None``: proven that none is).
    ``target_us``: at least the valid hint's time in the model (no layout slower needs a search)."""
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
    counts: dict[int, tuple[int, ...]] | None = None
    if shortcuts:
        narrowed, counts, bound = _server_counts(several, (cap, target_us), trace)
        if counts is not None and narrowed.rpc_slots < 1:
            by_target = target_us is not None and (cap is None or target_us < cap)
            if not (by_target and incumbent is not None and len(incumbent.layout.workers) > 1):
                return None  # proven: no layout with rpc-servers is within the time to beat
            narrowed, counts = several, None  # the valid hint has servers: only rounding could drop it
        several = narrowed
    nominal = min(clock.left() * SEVERAL_SHARE, config.time_limit_s * SEVERAL_LIMIT_SHARE)
    ends = clock.spent() + nominal
    if shortcuts:
        hint, seed_us = _seed(several, several.rpc_slots, hint, config, clock, trace, cap, nominal * SEED_SHARE, counts)
        nominal = max(0.0, ends - clock.spent())
        if seed_us is not None and counts is not None:  # the seed is a layout to beat too
            several, counts, bound = _server_counts(several, (cap, target_us, seed_us), trace, bound)
    searched = _pruned(several, several.rpc_slots, hint, several=True) if shortcuts else several
    return _search(
        several,
        searched,
        hint,
        config,
        clock,
        trace,
        "several-workers",
        nominal,
        cap_us=cap,
        several=True,
        server_counts=counts,
        presolve_passes=1,  # the full model: presolve's later rounds cost it most (``runner.solver_for``)
    )


def _server_counts(
    several: Instance, limits: tuple[int | None, ...], trace: Trace, bound: ServerBound | None = None
) -> tuple[Instance, dict[int, tuple[int, ...]] | None, ServerBound | None]:
    """The step's instance without the main workers, rpc slots and GPUs that no layout within the
    least of ``limits`` uses (``server_bound``), per main worker its server counts, and the bound."""
    known = [limit for limit in limits if limit is not None]
    if not known:
        return several, None, bound
    found = narrow(several, min(known), bound)
    if found is None:
        return several, None, None
    if found.dropped and SERVER_BOUND not in trace.shortcuts:
        trace.shortcuts.append(SERVER_BOUND)
    return found.instance, found.counts, found.bound


def _seed(
    several: Instance,
    servers: int,
    hint: Layout | None,
    config: PlannerConfig,
    clock: Clock,
    trace: Trace,
    cap: int | None,
    nominal_s: float,
    counts: Mapping[int, tuple[int, ...]] | None = None,
) -> tuple[Layout | None, int | None]:
    """On a large cluster, the several-workers model over the fastest workers first
    (``fast_workers``): its best layout, faster than the one-worker optimum, becomes the full
    step's hint (the given hint stays when it has several workers or nothing is found), and its time."""
    if hint is not None and len(hint.workers) > 1:
        return hint, None
    chosen = fast_workers(several)
    if chosen is None:
        return hint, None
    least = min((min(allowed) for allowed in counts.values()), default=1) if counts else 1
    few = min(servers, max(SEED_SERVERS, least))
    ends = clock.spent() + nominal_s
    while True:  # twice the servers while the small model is proven to hold nothing under the cap
        small = several.restricted(rpc_slots=few, local_slots=several.local_slots, mains=chosen, rpc_workers=chosen)
        searched = prune_dominated(small, others=few)
        step = _search(
            small,
            searched,
            None,
            config,
            clock,
            trace,
            "fast-workers",
            max(0.0, ends - clock.spent()),
            cap_us=cap,
            several=True,
            server_counts=counts,
        )
        if step.best is not None or not step.proven or few >= servers or clock.spent() >= ends:
            break
        few = min(servers, 2 * few)
    if step.best is None:
        return hint, None
    trace.shortcuts.append(FAST_WORKERS_SEED)
    return step.best.layout(step.built), step.best.value(speed_tiers(step.built.instance, step.built.variables).time)


def _pruned(instance: Instance, others: int, hint: Layout | None, *, several: bool) -> Instance:
    """Dominated roles pruned (``prune``), the hint's workers kept in theirs when the hint has the
    step's worker count (so that it completes as a solution)."""
    pruned = prune_dominated(instance, others=others)
    if hint is None or (len(hint.workers) > 1) != several:
        return pruned
    servers = frozenset(device.worker for device in hint.rpc_devices)
    return keeping(pruned, instance, hint.main_worker, servers)
