"""Gaps and bounds of the fleet's tiers in each tier's own units, only where they mean something.

A maximised tier (priority weight placed, layers on GPUs) has an upper bound, a minimised one
(replicas moved, GPUs used) a lower bound. A bound no better than the trivial one (a minimised
tier's 0) says nothing: such a tier is reported as not proven, with no bound and no gap, never a
percentage of nothing. The GPUs and workers tier is solved as ``GPUs x (workers + 1) + workers``;
it is reported in GPUs, its bound turned into a bound on GPUs.
"""

from __future__ import annotations

import math
from typing import Literal

from layerfit.domain.fleet import FleetPlan, TierBound
from layerfit.domain.plan import Status

TOLERANCE = 1e-6
UNITS = {
    "priority weight placed": "priority weight",
    "layers on GPUs": "layers",
    "replicas moved": "replicas",
    "busy decode time": "us per token, summed over the speed replicas",
    "GPUs and workers used": "GPUs",
}
"""What each tier's reported value and bound count."""


def gap(value: float, bound: float, maximised: bool) -> float:
    """Relative gap between an integral value and its bound, between 0 and 1 for bounds on the
    right side; 0 when no integer lies strictly between them."""
    diff = bound - value if maximised else value - bound
    if diff < 1 - TOLERANCE * max(1.0, abs(bound)):
        return 0.0
    return diff / max(1.0, abs(bound) if maximised else abs(value))


def gpus_bound(footprint_bound: float, n_workers: int) -> int:
    """A lower bound on GPUs used from one on ``GPUs x (workers + 1) + workers`` (workers used are
    at most ``n_workers``)."""
    return max(0, math.ceil((footprint_bound - n_workers) / (n_workers + 1) - TOLERANCE))


def tier_bound(
    tier: str,
    unit: str,
    value: int,
    bound: float | None,
    maximised: bool,
    proven: bool,
    over: Literal["all layouts", "candidates"] = "candidates",
) -> TierBound:
    """The tier's bound where it says something: a minimised tier's bound of 0 (or less) is no bound."""
    if proven:
        return TierBound(tier=tier, unit=unit, value=value, bound=float(value), gap=0.0, proven=True, over=over)
    if bound is None or (not maximised and bound <= TOLERANCE) or math.isinf(bound) or math.isnan(bound):
        return TierBound(tier=tier, unit=unit, value=value, bound=None, gap=None, over=over)
    tier_gap = gap(value, bound, maximised)
    return TierBound(
        tier=tier, unit=unit, value=value, bound=float(bound), gap=tier_gap, proven=tier_gap == 0.0, over=over
    )


def with_proven_status(plan: FleetPlan) -> FleetPlan:
    """The plan called optimal exactly when every tier is proven by its bound (each over what its
    bound says: all layouts or the candidates), else feasible; ``gap_tier`` and ``gap``: the first
    tier its bound does not prove. A plan without bounds, or not placed, keeps what it has."""
    if not plan.bounds or plan.status not in (Status.OPTIMAL, Status.FEASIBLE):
        return plan
    first = next((bound for bound in plan.bounds if not bound.proven), None)
    status = Status.OPTIMAL if first is None else Status.FEASIBLE
    tier, tier_gap = (None, None) if first is None else (first.tier, first.gap)
    return plan.model_copy(update={"status": status, "gap_tier": tier, "gap": tier_gap})
