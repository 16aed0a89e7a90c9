"""plan_fleet(): candidates, the master problem, replicas and moves, put together.

The stages: ``generate`` (the fleet's candidates and the one-at-a-time seed), ``joint`` (the
master over given candidates: ``choose``), ``colgen`` and ``later_bounds`` (pricing and the bounds
over all layouts), ``commands`` (every replica's command lines)."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from layerfit.budget.deadline import Deadline
from layerfit.budget.fleet import Budget, parallel_reason, safety_reason
from layerfit.domain.config import PlannerConfig
from layerfit.domain.fleet import Fleet, FleetConfig, FleetPlan, UnplacedReplica
from layerfit.domain.layout import Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import expect
from layerfit.fleet.candidates import CandidateSet
from layerfit.fleet.colgen import LAYERS, PLACED, Bound, ColumnGeneration, Goal, reached, tier_bound, trivial_bounds
from layerfit.fleet.commands import with_commands
from layerfit.fleet.gaps import with_proven_status
from layerfit.fleet.generate import cut_candidates, fleet_candidates, with_sequential_seed
from layerfit.fleet.joint import DECODE_SHARE, candidate_bounds, choose, current_counts, pin_reasons
from layerfit.fleet.later_bounds import later_bounds
from layerfit.fleet.master import priority_weights
from layerfit.fleet.screen import screen, with_stops_first

__all__ = ["DECODE_SHARE", "candidate_bounds", "choose", "current_counts", "plan_fleet"]

GC_THRESHOLDS = (50_000, 50, 1_000)
"""The garbage collector's thresholds while a fleet is planned (``fewer_collections``)."""
CANDIDATE_SHARE = 0.3
"""Share of the time limit candidate generation may take (past it, only cheap layouts are added)."""
SEED_SHARE = 0.5
"""Share of the work budget left after candidate generation the one-at-a-time seed may take (it is
cut short past it; at 1,024 GPUs / 530 replicas it needs 13.6 of the 16 nominal seconds it gets
with a 60 s limit)."""
COMMANDS_SHARE = 0.03
"""Share of the time limit kept for writing every replica's command lines at the end."""
FINAL_PER_REPLICA_S = 0.3e-3
"""Seconds kept per replica for what follows the master (decoding, moves, commands)."""
FINAL_SHARE = 0.5
"""The most of the time limit kept for it."""
LATER_SHARE = 0.25
"""With column generation: share of the time left after pricing the first two tiers that the
master over all columns leaves for the moves and GPUs tiers' bounds."""
PRICING_SHARE = 0.6
"""With column generation: nominal seconds per second of ``time_limit_s`` (times
``column_generation_share``) for pricing the first two tiers and the master over all columns,
beyond the master's own budget, which stays what it is without pricing: the plan without pricing
is the incumbent, and pricing only replaces it with a better one. The wall clock still ends both
at the time limit (a safety stop, which the plan reports)."""
PLACED_PRICING = 0.3
LAYERS_PRICING = 0.2
"""Shares of the pricing budget for the placement and layers tiers' column generation (the
master over all columns gets the rest)."""


def plan_fleet(
    fleet: Fleet,
    config: FleetConfig = FleetConfig(),
    planner_config: PlannerConfig = PlannerConfig(time_limit_s=2.0),
    *,
    deadline: Deadline | None = None,
) -> FleetPlan:
    """Place every replica that fits, jointly; then order the moves from the current placement.

    The plan carries the command lines of every placed replica (``planner_config`` says for which
    llama.cpp build), what each needs of its GPUs and workers, and the current placements on GPUs
    that are gone (``lost``).

    Bad input (a selection naming a missing GPU, a placement of the wrong size or on a missing GPU,
    pins that overflow together) is reported in ``reasons`` and the rest is planned (``screen``);
    the deployments left out are named in ``refused``, and their replicas keep running, their
    memory counted, or are stopped first.
    A context range is resolved to one context per deployment (``contexts``). Each GGUF file is
    read once (``files.reading_once``).

    ``deadline``: where ``time_limit_s`` ends when its clock started before the call (``replan``
    starts it before it reads the fleet file); by default the limit from now. It moves the
    wall-clock safety stops only: the work budget is the limit's, so the plan stays the same.
    """
    from layerfit.io.files import reading_once

    expect(fleet, Fleet, "fleet")
    expect(config, FleetConfig, "config")
    expect(planner_config, PlannerConfig, "planner_config")
    expect(deadline, (Deadline, type(None)), "deadline")
    with reading_once(), fewer_collections():
        return _plan_fleet(fleet, config, planner_config, deadline)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Python's garbage collector run less often while a fleet is planned: a 30,000-GPU fleet
    holds millions of objects, each full collection walks them all, and with the default
    thresholds collections took 1.1-1.3 s of the 7 s a plan of 8,192 replicas took there. The
    thresholds are put back afterwards (raised only: a caller's own higher ones stay)."""
    before = gc.get_threshold()
    gc.set_threshold(*(max(mine, theirs) for mine, theirs in zip(GC_THRESHOLDS, before, strict=False)))
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _plan_fleet(
    fleet: Fleet, config: FleetConfig, planner_config: PlannerConfig, deadline: Deadline | None
) -> FleetPlan:
    if any(d.has_ctx_range for d in fleet.deployments):
        from layerfit.fleet.contexts import plan_with_contexts

        half = config.model_copy(update={"time_limit_s": config.time_limit_s / 2})  # up to two fleet plans

        def plan_half(fixed: Fleet) -> FleetPlan:
            capped = None if deadline is None else Deadline.after(half.time_limit_s).earlier(deadline)
            return plan_fleet(fixed, half, planner_config, deadline=capped)

        return plan_with_contexts(fleet, planner_config, plan_half)
    original = fleet
    started = time.perf_counter()
    # every stage ends by ``end``; the time after it is kept for decoding, the moves and the commands
    limit_ends = deadline or Deadline.after(config.time_limit_s)
    end = Deadline(limit_ends.at - final_reserve(config.time_limit_s, fleet))
    budget = Budget.of(config.time_limit_s, end)
    screened = screen(fleet)
    fleet, profiles = screened.fleet, screened.profiles
    candidates, cut = fleet_candidates(fleet, profiles, config, planner_config, budget.part(CANDIDATE_SHARE))
    generation, generation_reasons = cut_candidates(cut)
    candidates, seed, seed_complete = with_sequential_seed(
        fleet, profiles, candidates, config, planner_config, budget.part(SEED_SHARE)
    )
    generation_s = time.perf_counter() - started
    master = budget.part(1.0)
    if config.column_generation:
        result = _with_column_generation(fleet, profiles, candidates, config, planner_config, seed, master)
    else:
        result = choose(fleet, profiles, candidates, config, planner_config, seed, budget=master)
    result = with_proven_status(result)
    stats = result.stats[0].model_copy(
        update={
            "details": {
                **result.stats[0].details,
                "candidate_generation_s": round(generation_s, 3),
                "candidate_generation": generation,
                "sequential_seed": "complete" if seed_complete else f"cut short at {len(seed)} replicas",
            },
            "safety_stops": tuple(budget.stops),
        }
    )
    said = [reason for reason in (safety_reason(budget.stops), parallel_reason(config.num_search_workers)) if reason]
    unplaced = [
        UnplacedReplica(deployment=d.name, replica=r, reasons=(screened.unplaceable[d.name],))
        for d in original.deployments
        if d.name in screened.unplaceable
        for r in range(d.replicas)
    ]
    result = result.model_copy(
        update={
            "stats": (stats,),
            "reasons": (*screened.reasons, *generation_reasons, *result.reasons, *said),
            "unplaced": (*result.unplaced, *unplaced),
            "refused": tuple(d.name for d in original.deployments if d.name in screened.unplaceable),
        }
    )
    planned = with_commands(original, with_stops_first(result, screened.stop_first, original.cluster), planner_config)
    timed = planned.stats[0].model_copy(update={"wall_time_s": time.perf_counter() - started})
    return planned.model_copy(update={"stats": (timed, *planned.stats[1:])})


def final_reserve(time_limit_s: float, fleet: Fleet) -> float:
    """Seconds of the limit kept after every stage for what must follow the master: replica
    numbers, the final check, the moves and every replica's command lines (``COMMANDS_SHARE`` of
    the limit, or ``FINAL_PER_REPLICA_S`` per replica where more; at most ``FINAL_SHARE`` of it)."""
    replicas = sum(deployment.replicas for deployment in fleet.deployments)
    needed = max(time_limit_s * COMMANDS_SHARE, FINAL_PER_REPLICA_S * replicas)
    return min(time_limit_s * FINAL_SHARE, needed)


def _with_column_generation(
    fleet: Fleet,
    profiles: Mapping[str, MemoryProfile],
    candidates: Sequence[CandidateSet],
    config: FleetConfig,
    planner_config: PlannerConfig,
    seed: Sequence[tuple[str, Layout]],
    budget: Budget,
) -> FleetPlan:
    """The integer master over the candidates alone, with the budget it has without pricing (the
    plan without pricing); column generation on the placement tier, then on the layers tier
    (floor: that plan's placed weight); the master over all columns, started from the first plan,
    when columns were added, on a budget of its own (``PRICING_SHARE``). The better plan on the
    tiers in order is kept, so pricing never makes the plan worse than without it. The bounds hold
    over all layouts. Every choice between stages is made on the work budget left, not on the
    clock, so that it is the same on every run."""
    weights = priority_weights(fleet.deployments)
    trivial_placed, trivial_layers = trivial_bounds(fleet.deployments, profiles, weights)
    pins, _ = pin_reasons(fleet, profiles, planner_config)
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
    # The master over the candidates gets the work budget it has without pricing: its plan is the
    # one without pricing, and the plan with pricing is never worse. Its wall-clock safety stop
    # leaves pricing its share of the time (a machine that keeps up never reaches it).
    share = config.column_generation_share
    first = budget.part(1.0, budget.deadline.share(1 - PRICING_SHARE * share))
    plan = choose(fleet, profiles, candidates, config, planner_config, seed, budget=first)
    pricing = Budget(config.time_limit_s * PRICING_SHARE * share, budget.deadline, stops=budget.stops)
    nominal = pricing.nominal_s
    values = plan.objective
    placed_bound = (
        reached(Goal(PLACED), trivial_placed)
        if values and values[0] >= trivial_placed
        else _priced(cg, Goal(PLACED), pricing, trivial_placed, nominal * PLACED_PRICING)
    )
    layers_goal = Goal(LAYERS, placed_floor=values[0] if values else 0)
    layers_bound = (
        reached(layers_goal, trivial_layers)
        if len(values) > 1 and values[1] >= trivial_layers
        else _priced(cg, layers_goal, pricing, trivial_layers, nominal * LAYERS_PRICING)
    )
    # Again over all columns, started from the plan, when pricing added some; the moves and GPUs
    # tiers' bounds get the time left.
    if cg.added and pricing.left() > 0.2:
        start = [(p.deployment, p.layout) for p in plan.placements]
        again = choose(fleet, profiles, cg.candidate_sets(), config, planner_config, start, budget=pricing.part(1.0))
        if again.objective > plan.objective:
            plan = again
    bounds = (
        tier_bound(placed_bound, plan.bounds[0].value),
        tier_bound(layers_bound, plan.bounds[1].value),
        *later_bounds(cg, plan, budget.deadline, config.time_limit_s * LATER_SHARE * share),
    )
    # their rounds end on the clock: the bounds, never the plan, may then differ from run to run
    later = "ended by the clock" if budget.deadline.expired() else "complete"
    gap = next((b.gap for b in bounds if b.tier == plan.gap_tier), None)
    stats = plan.stats[0].model_copy(
        update={
            "details": {
                **plan.stats[0].details,
                "pricing_rounds": sum(b.rounds for b in bounds),
                "columns_added": cg.added,
                "pricing_groups": len(cg.groups),
                "later_bounds": later,
            }
        }
    )
    return plan.model_copy(update={"bounds": bounds, "gap": gap, "stats": (stats,)})


def _priced(cg: ColumnGeneration, goal: Goal, budget: Budget, trivial: float, nominal: float) -> Bound:
    """Column generation on one tier, charged its nominal budget: its rounds end on the clock (it
    has no work budget of its own), after at most that many seconds; when they do, the plan says so."""
    stop = Deadline.after(nominal).earlier(budget.deadline)
    bound = cg.run(goal, stop.at, trivial, budget_s=nominal)
    budget.spend(min(budget.left(), nominal))
    if stop.expired():
        budget.safety_stop(f"column generation ({goal.tier})")
    return bound
