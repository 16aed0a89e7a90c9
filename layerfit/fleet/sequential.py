"""One replica at a time, GPUStack's way: the baseline the joint plan is compared with and seeded by."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from layerfit.budget.deadline import Deadline
from layerfit.check import unified_workers
from layerfit.domain.cluster import Cluster, Worker
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.fleet import Fleet, PlacedReplica, ReplicaChange, UnplacedReplica
from layerfit.domain.layout import Claims, Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.memory import claims as compute_claims


def resolve_profiles(deployments: Sequence[Deployment]) -> list[MemoryProfile]:
    from layerfit.planning.profiles import resolve_profile

    return [resolve_profile(deployment) for deployment in deployments]


def _worker_less(worker: Worker, claims: Claims) -> Worker:
    """One worker with ``claims`` taken out of its GPUs' VRAM and its RAM (or pool)."""
    gpus = tuple(
        gpu.model_copy(
            update={
                "allocatable_vram_bytes": max(0, gpu.allocatable_vram_bytes - claims.vram_bytes(worker.name, gpu.index))
            }
        )
        if claims.vram_bytes(worker.name, gpu.index)
        else gpu
        for gpu in worker.gpus
    )
    claim = claims.worker(worker.name)
    used = 0 if claim is None else (claim.pool_bytes if worker.unified_memory else claim.ram_bytes)
    return worker.model_copy(
        update={"gpus": gpus, "allocatable_ram_bytes": max(0, worker.allocatable_ram_bytes - used)}
    )


def subtract(cluster: Cluster, claims: Claims) -> Cluster:
    """The cluster with ``claims`` taken out of its allocatable memory (for one-at-a-time placement).
    Only the workers the claims touch are copied: on a large cluster that is a few of many."""
    touched = {claim.worker for claim in claims.workers} | {device.worker for device in claims.devices}
    workers = tuple(_worker_less(worker, claims) if worker.name in touched else worker for worker in cluster.workers)
    return cluster.model_copy(update={"workers": workers})


def plan_sequential(
    fleet: Fleet,
    planner: Callable[[Cluster, Deployment, MemoryProfile], Layout | None],
    profiles: Mapping[str, MemoryProfile] | None = None,
    deadline: Deadline | None = None,
) -> tuple[list[PlacedReplica], list[UnplacedReplica]]:
    """GPUStack's way: one replica at a time in arrival order, each taking what is left.

    Past ``deadline`` no more replicas are tried: those left come back unplaced."""
    cluster = fleet.cluster
    placed: list[PlacedReplica] = []
    unplaced: list[UnplacedReplica] = []
    unified = unified_workers(cluster)
    if profiles is None:
        profiles = dict(zip((d.name for d in fleet.deployments), resolve_profiles(fleet.deployments), strict=True))
    for deployment in fleet.deployments:
        profile = profiles[deployment.name]
        for replica in range(deployment.replicas):
            layout = None if deadline is not None and deadline.expired() else planner(cluster, deployment, profile)
            if layout is None:
                unplaced.append(UnplacedReplica(deployment=deployment.name, replica=replica))
                continue
            claims = compute_claims(profile, layout, unified)
            placed.append(
                PlacedReplica(
                    deployment=deployment.name,
                    replica=replica,
                    layout=layout,
                    claims=claims,
                    change=ReplicaChange.STARTED,
                )
            )
            cluster = subtract(cluster, claims)
    return placed, unplaced


def heuristic_layout(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    deadline: Deadline | None = None,
) -> Layout | None:
    """The GPUStack-order heuristic's layout for one deployment on what is left."""
    from layerfit import heuristics

    return heuristics.plan(cluster, deployment, config, profile, deadline=deadline).layout
