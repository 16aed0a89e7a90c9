"""A relaxation applied: the cluster and deployment as they are once its change is made.

Explain offers a change only when the deployment, re-planned with the change applied here, is
placed; a user (or a test) that makes the change gets these very inputs.
"""

from __future__ import annotations

from collections.abc import Iterable

from layerfit.domain.cluster import Cluster, Gpu, Worker
from layerfit.domain.deployment import Deployment
from layerfit.domain.params import LlamaParams
from layerfit.domain.plan import MemoryNeed, Relaxation
from layerfit.errors import InputError
from layerfit.planning.profiles import profile_at_ctx

MEMORY_KINDS = ("free_vram", "free_ram", "more_hardware")
"""The relaxations that change the cluster's memory: memory freed, or hardware it does not have."""
CLUSTER_KINDS = (*MEMORY_KINDS, "faster_gpu")
"""The relaxations that change the cluster: its memory, or a GPU's memory bandwidth."""


def applied(cluster: Cluster, deployment: Deployment, relaxation: Relaxation) -> tuple[Cluster, Deployment]:
    """``cluster`` and ``deployment`` with ``relaxation``'s change made."""
    kind = relaxation.kind
    if kind == "allow_cpu_offloading":
        return cluster, deployment.model_copy(update={"cpu_offloading": True})
    if kind == "allow_distribution":
        return cluster, deployment.model_copy(update={"distributed_inference_across_workers": True})
    if kind == "ctx_size" and relaxation.value is not None:
        return cluster, with_ctx(deployment, relaxation.value)
    if kind == "experts_on_host":
        return cluster, with_host_experts(deployment, relaxation)
    if kind == "experts_on_gpus":
        return cluster, with_fewer_host_experts(deployment, relaxation)
    if kind == "min_decode_tokens_per_s" and relaxation.tokens_per_s is not None:
        return cluster, deployment.model_copy(update={"min_decode_tokens_per_s": relaxation.tokens_per_s})
    if kind in MEMORY_KINDS:
        return with_memory(cluster, relaxation.memory), deployment
    if kind == "faster_gpu" and relaxation.worker is not None and relaxation.value is not None:
        return with_bandwidth(cluster, relaxation.worker, relaxation.gpu_index or 0, relaxation.value), deployment
    raise InputError("relaxation.kind", f"{kind!r} is no change explain makes")


def with_ctx(deployment: Deployment, ctx: int) -> Deployment:
    """The deployment at a smaller context. A range's least context becomes ``ctx`` (``ctx_auto``
    turns into ``ctx_min``; the largest stays the training context); a fixed ``--ctx-size`` becomes
    ``ctx``, and an explicit profile, which the planner takes as given, gets the KV cache of that
    context (``profile_at_ctx``: scaled with it)."""
    if deployment.has_ctx_range:
        return deployment.model_copy(update={"ctx_auto": False, "ctx_min": ctx})
    params = deployment.params.model_copy(update={"ctx_size": ctx})
    if deployment.profile is None:
        return deployment.model_copy(update={"params": params})
    return deployment.model_copy(update={"params": params, "profile": profile_at_ctx(deployment, ctx)})


def with_host_experts(deployment: Deployment, relaxation: Relaxation) -> Deployment:
    """The deployment whose experts of ``relaxation.host_expert_blocks`` stay in host RAM: its
    flags (``relaxation.parameters``) added for a GGUF file, its profile's ``fixed_host_experts``
    for an explicit profile; CPU offloading allowed where the relaxation says so."""
    update: dict[str, object] = {"cpu_offloading": True} if relaxation.cpu_offloading else {}
    if deployment.profile is not None:
        fixed = tuple(relaxation.host_expert_blocks)
        update["profile"] = deployment.profile.model_copy(update={"fixed_host_experts": fixed})
    else:
        fields = deployment.params.model_dump()
        update["params"] = LlamaParams.model_validate(
            {**fields, "extra": (*deployment.params.extra, *relaxation.parameters)}
        )
    return deployment.model_copy(update=update)


def without_expert_flags(deployment: Deployment) -> Deployment:
    """The deployment without what keeps experts on the host: its expert flags (``-ot``,
    ``--cpu-moe``, ``--n-cpu-moe``) out of a GGUF file's parameters, or an explicit profile's
    ``fixed_host_experts`` unset."""
    if deployment.profile is not None:
        return deployment.model_copy(
            update={"profile": deployment.profile.model_copy(update={"fixed_host_experts": None})}
        )
    from layerfit.llamacpp.expert_flags import parse_expert_flags

    rest = parse_expert_flags(deployment.params.extra)[1]
    params = LlamaParams.model_validate({**deployment.params.model_dump(), "extra": rest})
    return deployment.model_copy(update={"params": params})


def with_fewer_host_experts(deployment: Deployment, relaxation: Relaxation) -> Deployment:
    """The deployment whose experts stay on the host only in ``relaxation.host_expert_blocks``: a GGUF
    file's expert flags replaced by ``relaxation.parameters``, an explicit profile's
    ``fixed_host_experts`` set to those blocks."""
    if deployment.profile is not None:
        fixed = tuple(relaxation.host_expert_blocks)
        return deployment.model_copy(
            update={"profile": deployment.profile.model_copy(update={"fixed_host_experts": fixed})}
        )
    free = without_expert_flags(deployment)
    fields = free.params.model_dump()
    params = LlamaParams.model_validate({**fields, "extra": (*free.params.extra, *relaxation.parameters)})
    return free.model_copy(update={"params": params})


def with_bandwidth(cluster: Cluster, worker: str, gpu_index: int, gbps: float) -> Cluster:
    """The cluster with one GPU's memory bandwidth given as ``gbps`` (the cluster file's
    ``memory_bandwidth_gbps``), all else as it is."""
    workers = tuple(
        w.model_copy(
            update={
                "gpus": tuple(
                    g.model_copy(update={"memory_bandwidth_gbps": gbps}) if g.index == gpu_index else g for g in w.gpus
                )
            }
        )
        if w.name == worker
        else w
        for w in cluster.workers
    )
    return cluster.model_copy(update={"workers": workers})


def with_memory(cluster: Cluster, needs: Iterable[MemoryNeed]) -> Cluster:
    """The cluster with each need's GPU (or worker RAM) allocatable at what it needs; a total below
    that grows to it (hardware the cluster does not have: ``more_hardware``)."""
    vram = {(need.worker, need.gpu_index): need.needed_bytes for need in needs if need.gpu_index is not None}
    ram = {need.worker: need.needed_bytes for need in needs if need.gpu_index is None}
    return cluster.model_copy(update={"workers": tuple(_worker_with(worker, vram, ram) for worker in cluster.workers)})


def _worker_with(worker: Worker, vram: dict[tuple[str, int], int], ram: dict[str, int]) -> Worker:
    gpus = tuple(_gpu_with(gpu, vram.get((worker.name, gpu.index))) for gpu in worker.gpus)
    update: dict[str, object] = {"gpus": gpus}
    needed = ram.get(worker.name)
    if needed is not None:
        update["allocatable_ram_bytes"] = needed
        update["total_ram_bytes"] = max(worker.total_ram_bytes, needed)
    return worker.model_copy(update=update)


def _gpu_with(gpu: Gpu, needed: int | None) -> Gpu:
    if needed is None:
        return gpu
    return gpu.model_copy(
        update={"allocatable_vram_bytes": needed, "total_vram_bytes": max(gpu.total_vram_bytes, needed)}
    )
