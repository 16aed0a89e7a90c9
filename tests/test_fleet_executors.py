"""Candidate generation gives the same fleet plan on every executor: serial, local processes, Ray."""

from __future__ import annotations

import pytest

from layerfit.domain import Cluster, Deployment, GiB, Gpu, MemoryProfile, PlannerConfig, Worker
from layerfit.domain.fleet import Executor, Fleet, FleetConfig
from layerfit.fleet import plan_fleet


def fleet() -> Fleet:
    workers = tuple(
        Worker(
            id=i,
            name=f"w{i}",
            total_ram_bytes=64 * GiB,
            allocatable_ram_bytes=64 * GiB,
            gpus=tuple(
                Gpu(index=g, total_vram_bytes=v * GiB, allocatable_vram_bytes=v * GiB) for g, v in enumerate(sizes)
            ),
        )
        for i, sizes in enumerate([(24, 24), (16,), (48, 8)])
    )
    deployments = tuple(
        Deployment(
            name=f"d{i}",
            profile=MemoryProfile.uniform(16, size * GiB // 16, 0),
            replicas=replicas,
            priority=i % 2,
            distributed_inference_across_workers=True,
        )
        for i, (size, replicas) in enumerate([(6, 2), (20, 1), (30, 1), (10, 2), (60, 1)])
    )
    return Fleet(cluster=Cluster(workers=workers), deployments=deployments)


def run(executor: Executor) -> tuple[object, ...]:
    config = FleetConfig(time_limit_s=5.0, executor=executor, processes=2, num_search_workers=1)
    result = plan_fleet(fleet(), config, PlannerConfig(time_limit_s=2.0))
    return result.placements, result.unplaced, result.moves, result.objective


@pytest.fixture(scope="module")
def serial() -> tuple[object, ...]:
    return run(Executor.SERIAL)


def test_local_process_pool_matches_serial(serial: tuple[object, ...]) -> None:
    assert run(Executor.LOCAL) == serial


def test_ray_matches_serial(serial: tuple[object, ...]) -> None:
    import ray  # the ray extra is part of the test extra

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert run(Executor.RAY) == serial
    finally:
        ray.shutdown()
