"""Why a deployment does not fit, and the smallest single changes that place it.

Every change offered is one a user can make, and makes the model placed: the deployment is planned
with the change applied as the user would apply it (``applied``: the same inputs), and the change is
offered only when that plan places it. A change to the request (``changes``): CPU offloading,
distribution, experts in host RAM, a smaller context (an explicit profile's KV cache with it: the
planner takes a given profile as it is). Memory to free (``memory``), only up to what the hardware
has in all; past that, what the hardware lacks is said as such (``more_hardware``), not offered as
a change. The stage's work budget: ``budget``.

A deployment whose layouts fit in memory but are all predicted slower than its
``min_decode_tokens_per_s`` (``speed``): the fastest of them and the term that dominates it
(``SpeedShortfall``), and the changes that meet the minimum: the minimum lowered to what it reaches,
fewer experts kept on the host by the deployment's flags, and beyond this hardware a GPU of more
memory bandwidth. Every other change is planned with the minimum kept, so one that places the
model in memory but too slowly is not offered.
"""

from __future__ import annotations

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.plan import Relaxation, SpeedShortfall
from layerfit.domain.profile import MemoryProfile
from layerfit.planning.explain.applied import CLUSTER_KINDS, MEMORY_KINDS, applied
from layerfit.planning.explain.budget import DEADLINE, SCAN_LAYOUT_S, SPEED_PLANS, WORK, ExplainBudget
from layerfit.planning.explain.changes import (
    PlanFunction,
    ProfileOf,
    block_ranges,
    ctx_relaxation,
    expert_relaxation,
    switch_relaxations,
)
from layerfit.planning.explain.memory import memory_relaxation
from layerfit.planning.explain.speed import experts_on_gpus, faster_gpu, fastest_fitting, lower_minimum, shortfall

__all__ = [
    "CLUSTER_KINDS",
    "DEADLINE",
    "MEMORY_KINDS",
    "SCAN_LAYOUT_S",
    "SPEED_PLANS",
    "WORK",
    "ExplainBudget",
    "PlanFunction",
    "ProfileOf",
    "applied",
    "block_ranges",
    "explanation",
    "relaxations",
]


def explanation(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    plan: PlanFunction,
    profile_of: ProfileOf | None = None,
    budget: ExplainBudget | None = None,
) -> tuple[tuple[Relaxation, ...], SpeedShortfall | None]:
    """``relaxations``, and for a deployment that does not place only because of its
    ``min_decode_tokens_per_s`` (the deployment without it places), what the fastest layout that
    fits reaches (``SpeedShortfall``), with the changes that meet the minimum first and a GPU of
    more bandwidth, beyond this hardware, last."""
    fastest = fastest_fitting(cluster, deployment, profile, config, plan)
    if fastest is None or fastest.best is None or fastest.best.speed is None:
        return relaxations(cluster, deployment, profile, config, plan, profile_of, budget), None
    found: list[Relaxation] = []
    lower = lower_minimum(cluster, deployment, profile, config, plan, fastest.best.speed)
    if lower is not None:
        found.append(lower)
    if profile_of is not None:
        experts = experts_on_gpus(cluster, deployment, profile, config, plan, profile_of)
        if experts is not None:
            found.append(experts)
    found += relaxations(cluster, deployment, profile, config, plan, profile_of, budget)
    faster = faster_gpu(cluster, deployment, profile, config, plan, fastest.best)
    if faster is not None:
        found.append(faster)
    return tuple(found), shortfall(fastest, deployment, profile, cluster)


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
