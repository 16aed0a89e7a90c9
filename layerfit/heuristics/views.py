"""What the heuristic sees of the cluster: workers and GPUs with what is allocatable, pre-sorted.

GPUStack's selector works on allocatable numbers sorted by VRAM, largest first; ties keep the
cluster's order. A manual GPU selection hides every GPU it does not name (GPUStack filters the
worker list the same way), and GPUs with nothing allocatable are left out of the search.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from layerfit.domain.cluster import Cluster, Worker


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU, with the numbers of its worker the capacity check needs."""

    worker: str
    index: int
    type: str
    vram_bytes: int
    worker_ram_bytes: int
    unified: bool

    @property
    def ref(self) -> str:
        """GPUStack's GPU id: ``worker:type:index``."""
        return f"{self.worker}:{self.type}:{self.index}"


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One worker: allocatable RAM, usable GPUs (VRAM descending) and every GPU by index."""

    name: str
    ram_bytes: int
    unified: bool
    gpus: tuple[GpuView, ...]
    """GPUs the search may use: allocatable VRAM above zero and, with a selection, selected."""
    all_gpus: tuple[GpuView, ...]
    """Every GPU of the worker in index order (a ``--tensor-split`` maps onto these)."""

    @property
    def vram_bytes(self) -> int:
        return sum(gpu.vram_bytes for gpu in self.gpus)

    def gpu_at(self, index: int) -> GpuView | None:
        return next((gpu for gpu in self.all_gpus if gpu.index == index), None)


Selection = Mapping[str, tuple[int, ...]]
"""Manually selected GPU indexes per worker name."""


def by_vram(gpus: tuple[GpuView, ...]) -> tuple[GpuView, ...]:
    """Largest allocatable VRAM first; equal sizes keep their order."""
    return tuple(sorted(gpus, key=lambda gpu: -gpu.vram_bytes))


def worker_view(worker: Worker, selection: Selection | None) -> WorkerView:
    """The worker as the search sees it."""
    all_gpus = tuple(
        GpuView(
            worker=worker.name,
            index=gpu.index,
            type=gpu.type,
            vram_bytes=gpu.allocatable_vram_bytes,
            worker_ram_bytes=worker.allocatable_ram_bytes,
            unified=worker.unified_memory,
        )
        for gpu in sorted(worker.gpus, key=lambda gpu: gpu.index)
    )
    chosen = None if selection is None else set(selection.get(worker.name, ()))
    usable = tuple(gpu for gpu in all_gpus if gpu.vram_bytes > 0 and (chosen is None or gpu.index in chosen))
    return WorkerView(
        name=worker.name,
        ram_bytes=worker.allocatable_ram_bytes,
        unified=worker.unified_memory,
        gpus=by_vram(usable),
        all_gpus=all_gpus,
    )


def worker_views(cluster: Cluster, selection: Selection | None) -> tuple[WorkerView, ...]:
    """Workers that have anything allocatable, most usable VRAM first."""
    views = (worker_view(worker, selection) for worker in cluster.workers)
    kept = tuple(view for view in views if view.ram_bytes > 0 or view.gpus)
    return tuple(sorted(kept, key=lambda view: -view.vram_bytes))


def gpu_views(workers: tuple[WorkerView, ...], cluster: Cluster) -> tuple[GpuView, ...]:
    """Every usable GPU, largest first; ties in the cluster's worker order, then index order."""
    order = {worker.name: position for position, worker in enumerate(cluster.workers)}
    in_cluster_order = sorted(workers, key=lambda view: order[view.name])
    gpus = tuple(gpu for view in in_cluster_order for gpu in sorted(view.gpus, key=lambda gpu: gpu.index))
    return by_vram(gpus)
