"""What a layout leaves free: each GPU under its two names, each worker's RAM or unified pool."""

from __future__ import annotations

from layerfit.domain.cluster import Cluster
from layerfit.domain.layout import Claims, Layout
from layerfit.domain.plan import DeviceUse, WorkerUse
from layerfit.llamacpp.launch import llama_device_names


def device_use(cluster: Cluster, layout: Layout, claims: Claims) -> tuple[DeviceUse, ...]:
    """One entry per device of the layout, in llama.cpp device order."""
    names = llama_device_names(cluster, layout)
    result = []
    for claim, llama_name in zip(claims.devices, names, strict=True):
        gpu = cluster.worker(claim.worker).gpu(claim.gpu_index)
        result.append(
            DeviceUse(
                gpu_id=cluster.gpu_id(claim.worker, claim.gpu_index),
                llama_device=llama_name,
                gpu_name=gpu.name,
                allocatable_bytes=gpu.allocatable_vram_bytes,
                needed_bytes=claim.total_bytes,
            )
        )
    return tuple(result)


def worker_use(cluster: Cluster, claims: Claims) -> tuple[WorkerUse, ...]:
    """One entry per worker the layout uses, main first; a unified-memory worker is one pool."""
    result = []
    for claim in claims.workers:
        worker = cluster.worker(claim.worker)
        result.append(
            WorkerUse(
                worker=claim.worker,
                unified_memory=worker.unified_memory,
                allocatable_bytes=worker.allocatable_ram_bytes,
                needed_bytes=claim.pool_bytes if worker.unified_memory else claim.ram_bytes,
            )
        )
    return tuple(result)


def known_to(cluster: Cluster, layout: Layout) -> bool:
    """Every worker and GPU of the layout exists in the cluster (a hand-written layout may not)."""
    return all(
        cluster.has_worker(device.worker) and cluster.worker(device.worker).has_gpu(device.gpu_index)
        for device in layout.devices
    ) and cluster.has_worker(layout.main_worker)


UseFields = dict[str, tuple[DeviceUse, ...] | tuple[WorkerUse, ...]]


def use_of(cluster: Cluster, layout: Layout, claims: Claims) -> UseFields:
    """``Plan``'s ``device_use`` and ``worker_use`` for a layout (empty when it names unknown GPUs)."""
    if not known_to(cluster, layout):
        return {}
    return {"device_use": device_use(cluster, layout, claims), "worker_use": worker_use(cluster, claims)}
