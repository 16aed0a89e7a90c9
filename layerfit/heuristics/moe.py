"""The MoE stage: llama.cpp's fit for mixture-of-experts models, between full and partial offload.

When GPUStack's full-offload strategies find no layout with every layer on GPUs, a MoE model
keeps the experts of some blocks in host RAM instead (``--n-cpu-moe``): every block's dense part
on the GPUs, the experts of the first ``k`` expert blocks on the host, ``k`` as small as fits (a
bisection over ``k``, each step GPUStack's strategies over the stand-in profile of
``layerfit.memory.experts``; a scan upwards when ``--cpu-moe`` itself overflows host RAM). Only when even
``--cpu-moe`` leaves layers on the host does layer-level partial offload follow, with the experts
where they give the most layers on GPUs.

Under ``objective: speed`` the stage keeps whichever of the two is predicted faster: the fewest
experts on the host with every layer on GPUs, or the plan with none there (a partial or
distributed layout).

Off (GPUStack's order, experts always with their blocks) with ``PlannerConfig.expert_offload``
false, for dense models, without CPU offloading, and when the user's own tensor overrides fix the
experts (they are planned as given).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from layerfit.budget.deadline import Deadline
from layerfit.budget.heuristic import DEADLINE, WORK
from layerfit.budget.work import Work
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import Objective, PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.plan import Plan
from layerfit.domain.profile import MemoryProfile
from layerfit.heuristics.selector import plan
from layerfit.memory.experts import (
    engine_blocks,
    experts_are_a_decision,
    first_expert_blocks,
    profile_with_host_experts,
)
from layerfit.speed import speed_shape
from layerfit.speed.deployment import deployment_decode_ms, deployment_settings


def stand_in(deployment: Deployment, profile: MemoryProfile, blocks: tuple[int, ...]) -> MemoryProfile:
    """``memory.experts.profile_with_host_experts``, keeping what a token reads per block: a profile
    given as numbers derives it from its bytes (``speed.speed_shape``), which the stand-in changes
    (its experts' bytes leave the blocks), so the real profile's derived shape goes with it."""
    dense = profile_with_host_experts(profile, blocks)
    if dense is profile or profile.speed is not None:
        return dense
    shape, _ = speed_shape(profile, deployment_settings(deployment, profile))
    return dense.model_copy(update={"speed": shape})


def wanted_gpu_layers(deployment: Deployment, profile: MemoryProfile) -> int:
    """Layers on GPUs the deployment asks for: all of them, or its ``--n-gpu-layers``."""
    asked = deployment.params.n_gpu_layers
    return profile.n_layers if asked is None else min(asked, profile.n_layers)


def _gpu_layers(result: Plan) -> int:
    return -1 if result.best is None else result.best.layout.gpu_layers


def plan_with_experts(
    cluster: Cluster,
    deployment: Deployment,
    config: PlannerConfig,
    profile: MemoryProfile,
    *,
    deadline: Deadline | None = None,
    work: Work | None = None,
) -> tuple[Plan, tuple[int, ...]]:
    """GPUStack's strategies with the MoE stage; the plan (over the stand-in profile) and the blocks
    whose experts it keeps on the host. Every heuristic run charges ``work`` (default
    ``Work.of(config.time_limit_s)``); the search over expert counts stops when it is spent, or at
    its safety stop (``work``'s deadline, or ``deadline`` when sooner)."""
    if work is None:
        work = Work.of(config.time_limit_s, deadline)
    elif deadline is not None:
        work = work.part(work.left(), deadline)
    fixed = engine_blocks(profile)
    if not experts_are_a_decision(deployment, profile, config):
        return plan(cluster, deployment, config, stand_in(deployment, profile, fixed), work=work), fixed
    wanted = wanted_gpu_layers(deployment, profile)

    def attempt(count: int) -> tuple[Plan, tuple[int, ...]]:
        blocks = first_expert_blocks(profile, count)
        return plan(cluster, deployment, config, stand_in(deployment, profile, blocks), work=work), blocks

    base = attempt(0)
    if _gpu_layers(base[0]) >= wanted:
        return base
    everything = attempt(len(profile.expert_blocks))
    if _gpu_layers(everything[0]) >= wanted:
        fewest = _fewest(attempt, len(profile.expert_blocks), everything, wanted, work)
        if config.objective_for(deployment) is Objective.SPEED:
            return _faster(cluster, deployment, profile, fewest, base)
        return fewest
    # host RAM may be what --cpu-moe overflows: fewer experts on the host may still fit
    fallback = everything if _gpu_layers(everything[0]) > _gpu_layers(base[0]) else base
    for count in range(1, len(profile.expert_blocks)):
        if limit := _limit_hit(work):
            return _cut(fallback, limit)
        found = attempt(count)
        if _gpu_layers(found[0]) >= wanted:
            return found
    return fallback


def _faster(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    *found: tuple[Plan, tuple[int, ...]],
) -> tuple[Plan, tuple[int, ...]]:
    """Under ``objective: speed``: of the stage's plans (the fewest experts on the host with every
    layer on GPUs, the one with none there), the one whose best layout is predicted fastest."""

    def ms(option: tuple[Plan, tuple[int, ...]]) -> float:
        result, blocks = option
        if result.best is None:
            return math.inf
        return deployment_decode_ms(cluster, deployment, stand_in(deployment, profile, blocks), result.best.layout)

    return min(found, key=ms)


def _limit_hit(work: Work) -> str:
    """``work`` spent (checked first: the same on every run), its safety stop fired, or ``""``."""
    if work.left() <= 0:
        return WORK
    return DEADLINE if work.expired() else ""


def _cut(found: tuple[Plan, tuple[int, ...]], limit: str) -> tuple[Plan, tuple[int, ...]]:
    """The plan of a search over expert counts a limit stopped: its stats say ``truncated`` (and,
    stopped by the clock, ``safety_stops``: another run may have tried more counts)."""
    result, blocks = found
    stops = (limit,) if limit == DEADLINE else ()
    stats = tuple(
        s.model_copy(update={"details": {**s.details, "truncated": limit}, "safety_stops": stops}) for s in result.stats
    )
    return result.model_copy(update={"stats": stats}), blocks


def _fewest(
    attempt: Callable[[int], tuple[Plan, tuple[int, ...]]],
    fits: int,
    best: tuple[Plan, tuple[int, ...]],
    wanted: int,
    work: Work,
) -> tuple[Plan, tuple[int, ...]]:
    """Bisection for the fewest expert blocks on the host that still give ``wanted`` GPU layers
    (0 is known to miss, ``fits`` to fit); stopped by ``work``, the best so far, ``truncated``."""
    misses = 0
    while fits - misses > 1:
        if limit := _limit_hit(work):
            return _cut(best, limit)
        middle = (fits + misses) // 2
        found = attempt(middle)
        if _gpu_layers(found[0]) >= wanted:
            fits, best = middle, found
        else:
            misses = middle
    return best
