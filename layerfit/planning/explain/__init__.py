"""Why a deployment does not fit, and the smallest single changes that place it.

Every change offered is one a user can make, and makes the model placed: the deployment is planned
with the change applied as the user would apply it (``applied``: the same inputs), and the change is
offered only when that plan places it. A change to the request (``changes``): CPU offloading,
distribution, experts in host RAM, a smaller context (an explicit profile's KV cache with it: the
planner takes a given profile as it is). Memory to free (``memory``), only up to what the hardware
has in all; past that, what the hardware lacks is said as such (``more_hardware``), not offered as
a change. The stage's work budget: ``budget``.
"""

from __future__ import annotations

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.plan import Relaxation
from layerfit.domain.profile import MemoryProfile
from layerfit.planning.explain.applied import MEMORY_KINDS, applied
from layerfit.planning.explain.budget import DEADLINE, SCAN_LAYOUT_S, WORK, ExplainBudget
from layerfit.planning.explain.changes import (
    PlanFunction,
    ProfileOf,
    block_ranges,
    ctx_relaxation,
    expert_relaxation,
    switch_relaxations,
)
from layerfit.planning.explain.memory import memory_relaxation

__all__ = [
    "DEADLINE",
    "MEMORY_KINDS",
    "SCAN_LAYOUT_S",
    "WORK",
    "ExplainBudget",
    "PlanFunction",
    "ProfileOf",
    "applied",
    "block_ranges",
    "relaxations",
]


def relaxations(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    plan: PlanFunction,
    profile_of: ProfileOf | None = None,
    budget: ExplainBudget | None = None,
) -> tuple[Relaxation, ...]:
    """Every single change that places the deployment (switches, experts in host RAM, ctx, memory
    to free), or what the hardware lacks. ``profile_of``: the profile a re-plan of a changed
    deployment uses (an explicit one as given, else estimated; without it, no change that needs a
    new profile is tried).

    With a ``budget``, the layouts scanned for memory to free stop when it is spent (``plan`` is
    expected to honour the budget itself)."""
    found = switch_relaxations(cluster, deployment, profile, config, plan)
    if profile_of is not None:
        experts = expert_relaxation(cluster, deployment, profile, config, plan, profile_of)
        if experts is not None:
            found.append(experts)
        ctx = ctx_relaxation(cluster, deployment, config, plan, profile_of)
        if ctx is not None:
            found.append(ctx)
    memory = memory_relaxation(cluster, deployment, profile, config, plan, budget)
    if memory is not None:
        found.append(memory)
    return tuple(found)
