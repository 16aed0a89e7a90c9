"""Small fleets the fleet tests share: workers from a list of GPU sizes, and seeded fleets of
workers with two alike GPUs (so that equally good plans abound)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from layerfit.domain import Cluster, Deployment, GiB, Gpu, MemoryProfile, MiB, Worker
from layerfit.domain.fleet import Fleet

MODELS = ((2.5, 16), (5.0, 32), (9.0, 40), (19.0, 64))
"""(GiB of weights, blocks) of the generated deployments."""


def cluster_of(gpu_gib: Sequence[Sequence[int]], ram_gib: int = 64) -> Cluster:
    """Workers ``w0``, ``w1``, ... with these GPUs (GiB, all allocatable) and ``ram_gib`` of RAM each."""
    workers = tuple(
        Worker(
            id=i,
            name=f"w{i}",
            total_ram_bytes=ram_gib * GiB,
            allocatable_ram_bytes=ram_gib * GiB,
            gpus=tuple(
                Gpu(index=g, total_vram_bytes=v * GiB, allocatable_vram_bytes=v * GiB) for g, v in enumerate(sizes)
            ),
        )
        for i, sizes in enumerate(gpu_gib)
    )
    return Cluster(workers=workers)


def alike_gpus_fleet(
    seed: int,
    n_workers: int = 4,
    n_deployments: int = 6,
    replicas: Sequence[int] = (1, 1, 2, 3),
    priorities: Sequence[int] = (0, 0, 1, 2),
    cpu_offload_share: float = 0.3,
    distributed_share: float = 0.2,
) -> Fleet:
    """``n_workers`` workers of two alike GPUs (24 or 48 GiB each, 96 of 128 GiB RAM allocatable)
    and ``n_deployments`` deployments drawn from ``MODELS``, all from ``seed``."""
    rng = random.Random(seed)
    workers = tuple(
        Worker(
            id=w,
            name=f"w{w}",
            total_ram_bytes=128 * GiB,
            allocatable_ram_bytes=96 * GiB,
            gpus=tuple(
                Gpu(index=g, total_vram_bytes=size * GiB, allocatable_vram_bytes=size * GiB)
                for g, size in enumerate([rng.choice([24, 48])] * 2)
            ),
        )
        for w in range(n_workers)
    )
    deployments = tuple(
        Deployment(
            name=f"d{i}",
            profile=MemoryProfile.uniform(
                n_blocks, int(size * GiB) // n_blocks, 0, gpu_fixed_bytes=600 * MiB, host_fixed_bytes=256 * MiB
            ),
            replicas=rng.choice(list(replicas)),
            priority=rng.choice(list(priorities)),
            cpu_offloading=rng.random() < cpu_offload_share,
            distributed_inference_across_workers=rng.random() < distributed_share,
        )
        for i, (size, n_blocks) in enumerate(rng.choice(MODELS) for _ in range(n_deployments))
    )
    return Fleet(cluster=Cluster(workers=workers), deployments=deployments)
