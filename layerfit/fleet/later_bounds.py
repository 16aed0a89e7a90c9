"""Bounds over all layouts for the moves and GPUs tiers, by column generation on the final plan.

The moves tier counts only replicas with a current placement: its LP maximises the replicas kept
among the plans placing at least the plan's weight and layers. The GPUs tier minimises
``GPUs * (workers + 1) + workers`` among the plans also moving at most the plan's replicas; its
pricing charges each GPU and worker a layout opens. A tier whose column generation ran no
pricing round, or whose LP failed, keeps the master's bound over the candidates (so does one whose
bound over all layouts says nothing, a lower bound of 0, where the master's does): no bound over
all layouts is printed that pricing did not earn.

Where the busy decode time tier (``objective: speed``) sits between the two, the GPUs tier's
column generation does not fix it, nor does any LP here keep ``min_decode_tokens_per_s`` with the
GPUs busy: each LP is over more plans than the master allows, so its bound is still a bound (a
relaxation). The busy tier keeps the master's own bound over the candidates.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from layerfit.budget.deadline import Deadline
from layerfit.domain.fleet import FleetPlan, TierBound
from layerfit.errors import SolverError
from layerfit.fleet.colgen import TOLERANCE, Bound, ColumnGeneration, reached, tier_bound
from layerfit.fleet.gaps import gpus_bound
from layerfit.fleet.lp import GPUS, MOVES, Goal
from layerfit.fleet.tiers import FOOTPRINT

MIN_TIME_S = 0.1
"""Column generation for a tier starts only with this much time left."""
MOVES_SHARE = 0.4
"""Share of the time left that the moves tier's column generation may take (the GPUs tier: the rest)."""


def _trivial_kept(cg: ColumnGeneration) -> float:
    """Every current replica kept where it is (only valid current layouts, all among the columns)."""
    total = 0
    for d, deployment in enumerate(cg.deployments):
        now = cg.fleet.current.get(deployment.name, Counter())
        total += sum(min(now[layout], deployment.replicas) for layout in cg.known[d] if layout in now)
    return float(total)


def _earned(bound: Bound | None) -> bool:
    """A bound over all layouts that pricing earned (or the LP reached the trivial bound)."""
    return bound is not None and (bound.closed or bound.rounds > 0)


def _better(over_all: TierBound, candidates: TierBound) -> TierBound:
    """The bound over all layouts, unless it says nothing (a minimised tier's 0) where the
    master's own over the candidates does."""
    return over_all if over_all.bound is not None or candidates.bound is None else candidates


def _run(cg: ColumnGeneration, goal: Goal, deadline: Deadline, trivial: float, budget_s: float) -> Bound | None:
    if deadline.remaining() <= MIN_TIME_S:  # no time to price: not even the LP is built
        return None
    try:
        return cg.run(goal, deadline.at, trivial, budget_s=budget_s)
    except SolverError:
        return None


def later_bounds(cg: ColumnGeneration, plan: FleetPlan, deadline: Deadline, budget_s: float) -> list[TierBound]:
    """The moves and GPUs tiers' bounds (of the tiers the master solved), over all layouts where
    pricing earned one, else the master's own over the candidates."""
    values: Sequence[int] = plan.objective
    found = list(plan.bounds[2:])
    if len(values) < 3:
        return found
    moves_total = sum(sum(counts.values()) for counts in cg.fleet.current.values())
    moved = -values[2]
    kept_goal = Goal(MOVES, placed_floor=values[0], layers_floor=values[1])
    trivial = _trivial_kept(cg)
    if moves_total - moved >= trivial:
        moves: Bound | None = reached(kept_goal, trivial)
    else:
        moves = _run(cg, kept_goal, deadline.share(MOVES_SHARE), trivial, budget_s * MOVES_SHARE)
    if moves is not None and _earned(moves):
        # replicas kept at most the bound: moved at least the rest (an integer)
        fewest = math.ceil(moves_total - moves.value - TOLERANCE * max(1.0, moves_total))
        found[0] = _better(tier_bound(moves, moved, float(fewest), candidates_bound=found[0].bound), found[0])
    footprint_at = next((i for i, bound in enumerate(found) if bound.tier == FOOTPRINT), None)
    if footprint_at is None or len(values) < 3 + footprint_at:
        return found
    goal = Goal(GPUS, placed_floor=values[0], layers_floor=values[1], kept_floor=moves_total - moved)
    gpus = _run(cg, goal, deadline, 0.0, budget_s * (1 - MOVES_SHARE))
    if gpus is not None and _earned(gpus):
        # the LP bounds GPUs x (workers + 1) + workers from below: GPUs, with every worker used
        fewest_gpus = gpus_bound(-gpus.value, len(cg.cluster.workers))
        over_all = tier_bound(
            gpus,
            found[footprint_at].value,
            float(fewest_gpus),
            candidates_bound=found[footprint_at].bound,
            moved_ceiling=moved,
        )
        found[footprint_at] = _better(over_all, found[footprint_at])
    return found
