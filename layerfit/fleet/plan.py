"""plan_fleet(): candidates, the master problem, replicas and moves, put together."""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

from layerfit.check import capacity_reasons, check_layout, reference_reasons, unified_workers
from layerfit.deadline import Deadline
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
from layerfit.domain.layout import Layout
from layerfit.domain.plan import EngineStats, Reason, ReasonKind, Severity, Status
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import SolverError
from layerfit.fleet.candidates import CandidateSet, GroupTask, group_task, identical_groups, valid_candidates
from layerfit.fleet.colgen import LAYERS, PLACED, ColumnGeneration, Goal, reached, tier_bound, trivial_bounds
from layerfit.fleet.commands import with_commands
from layerfit.fleet.executors import run_tasks
from layerfit.fleet.gaps import UNITS, gpus_bound
from layerfit.fleet.gaps import tier_bound as gap_bound
from layerfit.fleet.greedy import gpus_used
from layerfit.fleet.later_bounds import later_bounds
from layerfit.fleet.master import Master, priority_weights
from layerfit.fleet.moves import assign_replicas, order_moves
from layerfit.fleet.screen import pin_conflicts, screen, with_stops_first
from layerfit.fleet.sequential import heuristic_layout, plan_sequential
from layerfit.fleet.tiers import TIER_NAMES, TierOutcome, solve_tiers
from layerfit.memory import claims as compute_claims


def _pin_reasons(
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
    together, conflicts = pin_conflicts(fleet.cluster, fitting)
    for placement in together:
        pins[placement.deployment][placement.layout] += 1
    return pins, [*reasons, *conflicts]


def _candidates(
    fleet: Fleet,
    profiles: Mapping[str, MemoryProfile],
    config: FleetConfig,
    planner_config: PlannerConfig,
    deadline: Deadline | None = None,
) -> tuple[list[CandidateSet], list[str]]:
    """Every deployment's candidates, one task per group of identical deployments; and the
    deployments whose candidates were cut short at ``deadline`` (no multi-GPU or planner layouts
    looked for past it)."""
    current_layouts: dict[str, list[Layout]] = defaultdict(list)
    for placement in fleet.current:
        current_layouts[placement.deployment].append(placement.layout)
    groups = identical_groups(fleet.deployments, profiles)
    # time.time(), not the deadline's perf_counter: the tasks may run in other processes
    until = None if deadline is None else time.time() + deadline.remaining()
    tasks: list[GroupTask] = []
    for group in groups:
        first = fleet.deployments[group[0]]
        members = tuple(
            (tuple(dict.fromkeys(current_layouts[fleet.deployments[d].name])), d, fleet.deployments[d].replicas)
            for d in group
        )
        limit = config.max_single_gpu_candidates
        tasks.append((fleet.cluster, first, profiles[first.name], planner_config, members, limit, until))
    found: list[CandidateSet] = [()] * len(fleet.deployments)
    cut: list[str] = []
    for group, (sets, cut_short) in zip(groups, run_tasks(group_task, tasks, config), strict=True):
        for d, options in zip(group, sets, strict=True):
            found[d] = options
        cut += [fleet.deployments[d].name for d in group] if cut_short else []
    return found, cut


def _cut_candidates(cut: Sequence[str]) -> tuple[str, tuple[Reason, ...]]:
    """What the plan says of candidate generation: ``complete``, or cut short at its deadline."""
    if not cut:
        return "complete", ()
    named = ", ".join(cut[:5]) + (f" and {len(cut) - 5} more" if len(cut) > 5 else "")
    message = (
        f"candidate generation reached its share of the time limit: for {len(cut)} deployments ({named}) "
        "only their current and single-GPU layouts (and those column generation and the one-at-a-time seed "
        "find) are candidates; a larger time_limit_s gives them their multi-GPU and distributed layouts"
    )
    reason = Reason(kind=ReasonKind.STRATEGY_SKIPPED, resource="time_limit_s", severity=Severity.INFO, message=message)
    return f"cut short at the deadline for {len(cut)} deployments", (reason,)


def _with_sequential_seed(
    fleet: Fleet,
    profiles: Mapping[str, MemoryProfile],
    candidates: list[CandidateSet],
    config: FleetConfig,
    planner_config: PlannerConfig,
    deadline: Deadline | None = None,
) -> tuple[list[CandidateSet], list[tuple[str, Layout]], bool]:
    """One at a time, GPUStack's way: its layouts join the candidates and its assignment is one of
    the starting solutions, so the joint plan is never behind it on the tiers. Past ``deadline`` the
    replicas left are not tried (the last value: whether every replica was)."""
    if config.sequential_seed is None:
        return candidates, [], True
    seed_config = planner_config.model_copy(update={"policy": config.sequential_seed})
    placed, _ = plan_sequential(
        fleet, lambda c, d, p: heuristic_layout(c, d, p, seed_config, deadline), profiles, deadline
    )
    complete = deadline is None or not deadline.expired()
    seed = [(p.deployment, p.layout) for p in placed]
    extra: dict[str, list[Layout]] = defaultdict(list)
    for name, layout in seed:
        extra[name].append(layout)
    joined = [
        (
            *options,
            *valid_candidates(
                fleet.cluster,
                d,
                profiles[d.name],
                planner_config,
                [lay for lay in extra[d.name] if lay not in dict(options)],
            ),
        )
        for d, options in zip(fleet.deployments, candidates, strict=True)
    ]
    return joined, seed, complete


CANDIDATE_SHARE = 0.3
"""Share of the time limit candidate generation may take (past it, only cheap layouts are added)."""
SEED_SHARE = 0.4
"""Share of the time left after candidate generation the one-at-a-time seed may take (it is cut
short past it)."""
DECODE_SHARE = 0.05
"""Share of the time left kept for decoding the master's solution and ordering the moves."""
COMMANDS_SHARE = 0.03
"""Share of the time limit kept for writing every replica's command lines at the end."""
"""Share of the time left kept for decoding the master's solution and ordering the moves."""
AGAIN_SHARE = 0.25
"""With column generation and no column added: the master runs again (from its plan) only with at
least this share of ``time_limit_s`` left."""
LATER_SHARE = 0.25
"""With column generation: share of the time left after pricing the first two tiers that the
master over all columns leaves for the moves and GPUs tiers' bounds."""
FIRST_MASTER_SHARE = 0.5
"""With column generation: share of the time left for the master over the candidates alone (the
plan without pricing, kept unless the master over all columns beats it)."""


def plan_fleet(
    fleet: Fleet,
    config: FleetConfig = FleetConfig(),
    planner_config: PlannerConfig = PlannerConfig(time_limit_s=2.0),
) -> FleetPlan:
    """Place every replica that fits, jointly; then order the moves from the current placement.

    The plan carries the command lines of every placed replica (``planner_config`` says for which
    llama.cpp build), what each needs of its GPUs and workers, and the current placements on GPUs
    that are gone (``lost``).

    Bad input (a selection naming a missing GPU, a placement of the wrong size or on a missing GPU,
    pins that overflow together) is reported in ``reasons`` and the rest is planned (``screen``);
    replicas of a deployment left out keep running, their memory counted, or are stopped first.
    A context range is resolved to one context per deployment (``contexts``).
    """

    if any(d.has_ctx_range for d in fleet.deployments):
        from layerfit.fleet.contexts import plan_with_contexts

        half = config.model_copy(update={"time_limit_s": config.time_limit_s / 2})  # up to two fleet plans
        return plan_with_contexts(fleet, planner_config, lambda fixed: plan_fleet(fixed, half, planner_config))
    original = fleet
    started = time.perf_counter()
    deadline = Deadline.after(config.time_limit_s)
    screened = screen(fleet)
    fleet, profiles = screened.fleet, screened.profiles
    candidates, cut = _candidates(fleet, profiles, config, planner_config, deadline.share(CANDIDATE_SHARE))
    generation, generation_reasons = _cut_candidates(cut)
    candidates, seed, seed_complete = _with_sequential_seed(
        fleet, profiles, candidates, config, planner_config, deadline.share(SEED_SHARE)
    )
    generation_s = time.perf_counter() - started
    # the command lines are written after the master, within the same limit
    master_deadline = Deadline(deadline.at - config.time_limit_s * COMMANDS_SHARE)
    if config.column_generation:
        result = _with_column_generation(fleet, profiles, candidates, config, planner_config, seed, master_deadline)
    else:
        result = choose(fleet, profiles, candidates, config, planner_config, seed, master_deadline)
    stats = result.stats[0].model_copy(
        update={
            "details": {
                **result.stats[0].details,
                "candidate_generation_s": round(generation_s, 3),
                "candidate_generation": generation,
                "sequential_seed": "complete" if seed_complete else f"cut short at {len(seed)} replicas",
            },
        }
    )
    unplaced = [
        UnplacedReplica(deployment=d.name, replica=r, reasons=(screened.unplaceable[d.name],))
        for d in original.deployments
        if d.name in screened.unplaceable
        for r in range(d.replicas)
    ]
    result = result.model_copy(
        update={
            "stats": (stats,),
            "reasons": (*screened.reasons, *generation_reasons, *result.reasons),
            "unplaced": (*result.unplaced, *unplaced),
        }
    )
    planned = with_commands(original, with_stops_first(result, screened.stop_first, original.cluster), planner_config)
    timed = planned.stats[0].model_copy(update={"wall_time_s": time.perf_counter() - started})
    return planned.model_copy(update={"stats": (timed, *planned.stats[1:])})


def _with_column_generation(
    fleet: Fleet,
    profiles: Mapping[str, MemoryProfile],
    candidates: Sequence[CandidateSet],
    config: FleetConfig,
    planner_config: PlannerConfig,
    seed: Sequence[tuple[str, Layout]],
    deadline: Deadline,
) -> FleetPlan:
    """The integer master over the candidates alone (the plan without pricing); column generation
    on the placement tier, then on the layers tier (floor: that plan's placed weight); the master
    over all columns, started from the first plan, when columns were added or the first plan is not
    proven. The better plan on the tiers in order is kept, so pricing never makes the plan worse
    than the first one. The bounds hold over all layouts."""
    weights = priority_weights(fleet.deployments)
    trivial_placed, trivial_layers = trivial_bounds(fleet.deployments, profiles, weights)
    pins, _ = _pin_reasons(fleet, profiles, planner_config)
    cg = ColumnGeneration(
        fleet.cluster,
        fleet.deployments,
        profiles,
        candidates,
        weights,
        config,
        planner_config,
        pins,
        current_counts(fleet),
    )
    # A seed that places every replica with every layer on GPUs leaves pricing nothing to better on
    # the first two tiers: the master over the candidates gets the whole time, as without pricing.
    seed_values = (sum(weights[name] for name, _ in seed), sum(layout.gpu_layers for _, layout in seed))
    first_share = 1.0 if seed_values >= (trivial_placed, trivial_layers) else FIRST_MASTER_SHARE
    plan = choose(fleet, profiles, candidates, config, planner_config, seed, deadline.share(first_share))
    share = config.column_generation_share
    nominal = config.time_limit_s * (1 - FIRST_MASTER_SHARE) * share
    values = plan.objective
    placed_bound = (
        reached(Goal(PLACED), trivial_placed)
        if values and values[0] >= trivial_placed
        else cg.run(Goal(PLACED), deadline.share(share * 0.6).at, trivial_placed, budget_s=nominal * 0.6)
    )
    layers_goal = Goal(LAYERS, placed_floor=values[0] if values else 0)
    layers_bound = (
        reached(layers_goal, trivial_layers)
        if len(values) > 1 and values[1] >= trivial_layers
        else cg.run(layers_goal, deadline.share(share * 0.4).at, trivial_layers, budget_s=nominal * 0.4)
    )
    # Again over all columns when pricing added some, or to go on with a plan not proven while a
    # good part of the time is left; the moves and GPUs tiers' bounds get the rest.
    unproven = plan.status is not Status.OPTIMAL and deadline.remaining() > config.time_limit_s * AGAIN_SHARE
    if (cg.added and deadline.remaining() > 0.2) or unproven:
        start = [(p.deployment, p.layout) for p in plan.placements]
        again = choose(
            fleet, profiles, cg.candidate_sets(), config, planner_config, start, deadline.share(1 - LATER_SHARE)
        )
        if again.objective > plan.objective:
            plan = again
    bounds = (
        tier_bound(placed_bound, plan.bounds[0].value),
        tier_bound(layers_bound, plan.bounds[1].value),
        *later_bounds(cg, plan, deadline, config.time_limit_s * LATER_SHARE * share),
    )
    gap = next((b.gap for b in bounds if b.tier == plan.gap_tier), None)
    stats = plan.stats[0].model_copy(
        update={
            "details": {
                **plan.stats[0].details,
                "pricing_rounds": sum(b.rounds for b in bounds),
                "columns_added": cg.added,
                "pricing_groups": len(cg.groups),
            }
        }
    )
    return plan.model_copy(update={"bounds": bounds, "gap": gap, "stats": (stats,)})


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
) -> FleetPlan:
    """The master problem over given candidates (one set per deployment, in fleet order), and the moves.

    ``seed`` (deployment, layout) pairs, such as a one-at-a-time placement, start the search. The
    master's tiers stop at ``deadline`` (less a share for decoding), else after ``config.time_limit_s``.
    """
    started = time.perf_counter()
    cluster, deployments = fleet.cluster, fleet.deployments
    current_by: dict[str, dict[int, Layout]] = defaultdict(dict)
    for placement in fleet.current:
        current_by[placement.deployment][placement.replica] = placement.layout
    pins, reasons = _pin_reasons(fleet, profiles, planner_config)
    seeded: dict[str, Counter[Layout]] = defaultdict(Counter)
    for name, layout in seed:
        seeded[name][layout] += 1
    master = Master(cluster, deployments, candidates, current_counts(fleet), pins, seeded)
    if deadline is not None:
        config = config.model_copy(update={"time_limit_s": max(0.05, deadline.remaining() * (1 - DECODE_SHARE))})
    outcome = solve_tiers(master, config)
    placed, unplaced = _replicas(deployments, candidates, outcome.counts, current_by)
    if capacity_reasons(cluster, *(p.claims for p in placed)):
        raise SolverError("fleet plan exceeds a capacity after decoding; this is a bug")
    # Replicas on workers or GPUs that are gone are not running any more: nothing to stop there.
    unified = unified_workers(cluster)
    current = [
        (p.deployment, p.replica, p.layout, compute_claims(profiles[p.deployment], p.layout, unified))
        for p in fleet.current
        if not reference_reasons(cluster, p.layout)
    ]
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
        },
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


def candidate_bounds(master: Master, outcome: TierOutcome) -> tuple[TierBound, ...]:
    """Every tier's value in its own units with the master's own bound, relative to the candidates
    only (each among the plans with the earlier tiers' values); a tier not solved (cut short) or
    whose bound is trivial has none. The GPUs and workers tier is given in GPUs."""
    counts = (*master.tier_values(outcome.counts), gpus_used(master, outcome.counts))
    bounds = []
    for position, name in enumerate(TIER_NAMES):
        maximised = name in MAXIMISED_TIERS
        solved = position < len(outcome.values)
        raw = outcome.master_bounds[position] if solved and position < len(outcome.master_bounds) else None
        raw = raw if raw is not None and math.isfinite(raw) else None
        if position == 3 and raw is not None:
            raw = float(gpus_bound(raw, master.n_workers))
        proven = solved and position < len(outcome.proven) and outcome.proven[position]
        bounds.append(gap_bound(name, UNITS[name], counts[position], raw, maximised, proven))
    return tuple(bounds)


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
