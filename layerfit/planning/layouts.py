"""Layout generators shared by the fleet planner and the explanations: simple, valid-by-construction
layouts for one deployment that callers then check with the memory model."""

from __future__ import annotations

from collections.abc import Iterator

from layerfit.domain.cluster import Cluster, Worker
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.memory import layout_from_flags, make_layout


def single_gpu_layouts(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig
) -> Iterator[Layout]:
    """A full offload on each (selected) GPU of the cluster, fitting or not; made one at a time, so
    that a caller with a deadline can stop between them."""
    selected = None if deployment.gpu_selection is None else {(r.worker, r.index) for r in deployment.gpu_selection}
    for worker in cluster.workers:
        for gpu in worker.gpus:
            if selected is not None and (worker.name, gpu.index) not in selected:
                continue
            block = DeviceAssignment(worker=worker.name, gpu_index=gpu.index, blocks=profile.n_blocks)
            yield make_layout(worker.name, profile.n_blocks, [block], config.offload_order)


def worker_layouts(worker: Worker, profile: MemoryProfile, config: PlannerConfig) -> list[Layout]:
    """Full offloads on the fewest GPUs of one worker: the k largest GPUs, blocks split in proportion
    to what each GPU has left after its fixed and compute costs (llama.cpp's split rule decides)."""
    gpus = sorted(worker.gpus, key=lambda g: (-g.allocatable_vram_bytes, g.index))
    layouts = []
    for count in range(2, len(gpus) + 1):
        chosen = sorted(gpus[:count], key=lambda g: g.index)
        shares = [max(1, g.allocatable_vram_bytes - profile.local.fixed_bytes) for g in chosen]
        layouts.append(
            layout_from_flags(
                worker.name,
                [(worker.name, g.index) for g in chosen],
                profile.n_blocks,
                profile.n_layers,
                [float(share) for share in shares],
                config.offload_order,
            )
        )
    return layouts
