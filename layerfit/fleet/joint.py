"""The joint plan over given candidates: the master problem's tiers, replica numbers and moves."""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

from layerfit.budget.deadline import Deadline
from layerfit.budget.fleet import Budget
from layerfit.check import capacity_reasons, check_layout, reference_reasons, unified_workers
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.fleet import (
    MAXIMISED_TIERS,
    Fleet,
    FleetConfig,
    FleetPlan,
    PlacedReplica,
    Placement,
    ReplicaRef,
    TierBound,
    UnplacedReplica,
)
from layerfit.domain.layout import Claims, Layout
from layerfit.domain.plan import EngineStats, Reason, ReasonKind, Severity
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import SolverError
from layerfit.fleet.busy import busy_reasons, busy_table
from layerfit.fleet.candidates import CandidateSet
from layerfit.fleet.gaps import UNITS, gpus_bound
from layerfit.fleet.gaps import tier_bound as gap_bound
from layerfit.fleet.greedy import gpus_used
from layerfit.fleet.master import Master
from layerfit.fleet.moves import assign_replicas, order_moves
from layerfit.fleet.screen import pin_conflicts
from layerfit.fleet.tiers import FOOTPRINT, TierOutcome, solve_tiers, tier_names, tier_value
from layerfit.memory import claims as compute_claims
from layerfit.planning.device_cap import device_cap_reason

DECODE_SHARE = 0.05
"""Share of the time left kept for decoding the master's solution and ordering the moves."""


def pin_reasons(
    fleet: Fleet, profiles: Mapping[str, MemoryProfile], config: PlannerConfig
) -> tuple[dict[str, Counter[Layout]], list[Reason]]:
    """Pins that still fit are enforced; a pin that no longer fits is reported, never dropped silently."""
    by_name = {d.name: d for d in fleet.deployments}
    pins: dict[str, Counter[Layout]] = defaultdict(Counter)
    reasons: list[Reason] = []
    fitting: list[tuple[Placement, MemoryProfile]] = []
    for placement in fleet.current:
        if not placement.pinned:
            continue
        deployment = by_name[placement.deployment]
        broken = check_layout(fleet.cluster, deployment, profiles[deployment.name], placement.layout, config)
        if broken:
            reasons.append(
                Reason(
                    kind=ReasonKind.PIN_BROKEN,
                    message=f"pinned replica {placement.replica} of {placement.deployment} no longer fits where it is: "
                    + "; ".join(reason.message for reason in broken),
                    severity=Severity.WARNING,
                    worker=placement.layout.main_worker,
                )
            )
            continue
        fitting.append((placement, profiles[deployment.name]))
    together, conflicts = pin_conflicts(fleet.cluster, fitting, by_name)
    for placement in together:
        pins[placement.deployment][placement.layout] += 1
    return pins, [*reasons, *conflicts]


def current_counts(fleet: Fleet) -> dict[str, Counter[Layout]]:
    """Replicas per current layout, per deployment: only replicas the deployment still has can
    stay where they are."""
    replicas = {d.name: d.replicas for d in fleet.deployments}
    by_replica: dict[str, dict[int, Layout]] = defaultdict(dict)
    for placement in fleet.current:
        by_replica[placement.deployment][placement.replica] = placement.layout
    return {
        name: Counter(layout for r, layout in layouts.items() if r < replicas.get(name, 0))
        for name, layouts in by_replica.items()
    }


def _replicas(
    deployments: Sequence[Deployment],
    candidates: Sequence[CandidateSet],
    counts: Sequence[Sequence[int]],
    current_by: Mapping[str, dict[int, Layout]],
) -> tuple[list[PlacedReplica], list[UnplacedReplica]]:
    """Replica numbers for the chosen candidates; the replicas left out, with why."""
    placed: list[PlacedReplica] = []
    unplaced: list[UnplacedReplica] = []
    for deployment, options, row in zip(deployments, candidates, counts, strict=True):
        chosen = [layout for (layout, _), n in zip(options, row, strict=True) for _ in range(n)]
        claims_of = dict(options)
        assigned, missing = assign_replicas(deployment, chosen, current_by.get(deployment.name, {}))
        placed += [
            PlacedReplica(deployment=deployment.name, replica=r, layout=layout, claims=claims_of[layout], change=change)
            for r, layout, change in assigned
        ]
        why = _unplaced_reason(deployment, options)
        unplaced += [UnplacedReplica(deployment=deployment.name, replica=r, reasons=(why,)) for r in missing]
    return placed, unplaced


def choose(
    fleet: Fleet,
    profiles: Mapping[str, MemoryProfile],
    candidates: Sequence[CandidateSet],
    config: FleetConfig = FleetConfig(),
    planner_config: PlannerConfig = PlannerConfig(),
    seed: Sequence[tuple[str, Layout]] = (),
    deadline: Deadline | None = None,
    budget: Budget | None = None,
) -> FleetPlan:
    """The master problem over given candidates (one set per deployment, in fleet order), and the moves.

    ``seed`` (deployment, layout) pairs, such as a one-at-a-time placement, start the search. The
    master's tiers spend ``budget`` (less a share for decoding; default: the work budget of the
    time to ``deadline``, else of ``config.time_limit_s``), the wall clock as a safety stop.
    """
    started = time.perf_counter()
    cluster, deployments = fleet.cluster, fleet.deployments
    current_by: dict[str, dict[int, Layout]] = defaultdict(dict)
    for placement in fleet.current:
        current_by[placement.deployment][placement.replica] = placement.layout
    pins, reasons = pin_reasons(fleet, profiles, planner_config)
    seeded: dict[str, Counter[Layout]] = defaultdict(Counter)
    for name, layout in seed:
        seeded[name][layout] += 1
    if budget is None:
        budget = Budget.of(config.time_limit_s if deadline is None else deadline.remaining(), deadline)
    layouts = [[layout for layout, _ in options] for options in candidates]
    busy = busy_table(cluster, deployments, profiles, layouts, planner_config)
    master = Master(cluster, deployments, candidates, current_counts(fleet), pins, seeded, budget.deadline, busy)
    outcome = solve_tiers(master, config, budget.part(1 - DECODE_SHARE))
    placed, unplaced = _replicas(deployments, candidates, outcome.counts, current_by)
    unplaced = _with_device_cap(cluster, deployments, profiles, candidates, planner_config, unplaced)
    if capacity_reasons(cluster, *(p.claims for p in placed)):
        raise SolverError("fleet plan exceeds a capacity after decoding; this is a bug")
    slow = busy_reasons(cluster, {d.name: d for d in deployments}, profiles, placed)
    if slow:
        raise SolverError(f"fleet plan breaks a minimum decode speed with its GPUs busy ({slow[0]}); this is a bug")
    # Replicas on workers or GPUs that are gone are not running any more: nothing to stop there.
    current = _running(fleet, profiles, candidates)
    before = [(p.deployment, p.replica) for p in fleet.current]
    moves = order_moves(cluster, current, [(p.deployment, p.replica, p.layout, p.claims) for p in placed], before)
    kept_or_moved = {(p.deployment, p.replica) for p in placed}
    stopped = tuple(ReplicaRef(deployment=d, replica=r) for d, r in before if (d, r) not in kept_or_moved)
    bounds = candidate_bounds(master, outcome)
    stats = EngineStats(
        engine="fleet",
        wall_time_s=time.perf_counter() - started,
        status=outcome.status,
        details={
            "candidates": sum(len(options) for options in candidates),
            "deployments": len(deployments),
            "executor": config.executor.value,
            **outcome.details,
        },
        safety_stops=tuple(budget.stops),
    )
    return FleetPlan(
        status=outcome.status,
        placements=tuple(placed),
        unplaced=tuple(unplaced),
        moves=moves,
        stopped=stopped,
        reasons=tuple(reasons),
        objective=outcome.values,
        gap=next((b.gap for b in bounds if b.tier == outcome.gap_tier), None),
        gap_tier=outcome.gap_tier,
        bounds=bounds,
        stats=(stats,),
    )


def _running(
    fleet: Fleet, profiles: Mapping[str, MemoryProfile], candidates: Sequence[CandidateSet]
) -> list[tuple[str, int, Layout, Claims]]:
    """The current placements on GPUs the cluster still has, with their claims (those of their
    candidate where the layout is one: the memory model is not run again for 8,192 replicas)."""
    cluster = fleet.cluster
    unified = unified_workers(cluster)
    # by identity: a current layout is a candidate as the very object the placement holds
    known = {id(layout): claims for options in candidates for layout, claims in options}
    running = []
    for p in fleet.current:
        if reference_reasons(cluster, p.layout):
            continue
        claims = known.get(id(p.layout)) or compute_claims(profiles[p.deployment], p.layout, unified)
        running.append((p.deployment, p.replica, p.layout, claims))
    return running


def candidate_bounds(master: Master, outcome: TierOutcome) -> tuple[TierBound, ...]:
    """Every tier's value in its own units with the master's own bound, relative to the candidates
    only (each among the plans with the earlier tiers' values); a tier not solved (cut short) or
    whose bound is trivial has none. The GPUs and workers tier is given in GPUs."""
    bounds = []
    for position, name in enumerate(tier_names(master)):
        maximised = name in MAXIMISED_TIERS
        solved = position < len(outcome.values)
        raw = outcome.master_bounds[position] if solved and position < len(outcome.master_bounds) else None
        raw = raw if raw is not None and math.isfinite(raw) else None
        if name == FOOTPRINT and raw is not None:
            raw = float(gpus_bound(raw, master.n_workers))
        proven = solved and position < len(outcome.proven) and outcome.proven[position]
        value = gpus_used(master, outcome.counts) if name == FOOTPRINT else tier_value(master, name, outcome.counts)
        bounds.append(gap_bound(name, UNITS[name], value, raw, maximised, proven))
    return tuple(bounds)


def _with_device_cap(
    cluster: Cluster,
    deployments: Sequence[Deployment],
    profiles: Mapping[str, MemoryProfile],
    candidates: Sequence[CandidateSet],
    config: PlannerConfig,
    unplaced: list[UnplacedReplica],
) -> list[UnplacedReplica]:
    """Replicas of a deployment that fits nowhere, with llama.cpp's device limit named when it cut
    the deployment's layouts (``layerfit.planning.device_cap``)."""
    capped: dict[str, Reason] = {}
    said: dict[object, Reason | None] = {}  # by what the reason depends on: it counts every worker's GPUs
    for deployment, options in zip(deployments, candidates, strict=True):
        if options:
            continue
        n_layers = profiles[deployment.name].n_layers
        params = deployment.params
        key = (
            deployment.kind,
            deployment.gpu_selection,
            deployment.distributed_inference_across_workers,
            params.tensor_split,
            params.n_gpu_layers,
            n_layers,
        )
        if key not in said:
            said[key] = device_cap_reason(cluster, deployment, config, n_layers)
        why = said[key]
        if why is not None:
            capped[deployment.name] = why
    return [
        replica.model_copy(update={"reasons": (*replica.reasons, capped[replica.deployment])})
        if replica.deployment in capped
        else replica
        for replica in unplaced
    ]


def _unplaced_reason(deployment: Deployment, options: CandidateSet) -> Reason:
    if not options:
        return Reason(
            kind=ReasonKind.NO_CANDIDATE,
            message=f"{deployment.name} does not fit anywhere in this cluster, even alone",
        )
    return Reason(
        kind=ReasonKind.NO_CANDIDATE,
        message=f"{deployment.name}: no room left; its {len(options)} possible layouts are taken by deployments "
        f"of the same or higher priority",
        severity=Severity.WARNING,
    )
