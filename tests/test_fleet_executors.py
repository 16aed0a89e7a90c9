"""The same fleet plan on every executor (serial, local processes, Ray) and on every run, with the
defaults too, as long as no time limit is hit."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from layerfit.cli import EXIT_PLACED, main
from layerfit.domain import Cluster, Deployment, GiB, Gpu, MemoryProfile, MiB, PlannerConfig, Status, Worker
from layerfit.domain.fleet import Executor, Fleet, FleetConfig
from layerfit.fleet import plan_fleet

FLEET = str(Path(__file__).parent.parent / "layerfit" / "examples" / "fleet.yaml")


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
    # the limit counts every stage, Ray's start included: ample, so that no stage hits it
    config = FleetConfig(time_limit_s=20.0, executor=executor, processes=2, num_search_workers=1)
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


MODELS = [(2.5, 16), (5.0, 32), (9.0, 40), (19.0, 64)]
"""(GiB of weights, blocks) of the generated deployments."""


def generated_fleet(seed: int) -> Fleet:
    """Four workers of two GPUs of a few alike sizes (so that equally good plans abound) and six deployments."""
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
        for w in range(4)
    )
    deployments = tuple(
        Deployment(
            name=f"d{i}",
            profile=MemoryProfile.uniform(
                n_blocks, int(size * GiB) // n_blocks, 0, gpu_fixed_bytes=600 * MiB, host_fixed_bytes=256 * MiB
            ),
            replicas=rng.choice([1, 1, 2, 3]),
            priority=rng.choice([0, 0, 1, 2]),
            cpu_offloading=rng.random() < 0.3,
            distributed_inference_across_workers=rng.random() < 0.2,
        )
        for i, (size, n_blocks) in enumerate(rng.choice(MODELS) for _ in range(6))
    )
    return Fleet(cluster=Cluster(workers=workers), deployments=deployments)


def plan_json(fleet: Fleet, **config: object) -> str:
    """The fleet plan as ``replan --json`` prints it, less wall-clock times and the executor's name."""
    plan = plan_fleet(fleet, FleetConfig(time_limit_s=60.0, **config))  # type: ignore[arg-type]
    assert plan.status is Status.OPTIMAL  # no limit was hit: the answer must not depend on how it was computed
    data = json.loads(plan.model_dump_json())
    for stats in data["stats"]:
        del stats["wall_time_s"]
        stats["details"] = {k: v for k, v in stats["details"].items() if not k.endswith("_s") and k != "executor"}
    return json.dumps(data, sort_keys=True)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_default_executor_gives_the_serial_plan_json(seed: int) -> None:
    fleet = generated_fleet(seed)
    serial = plan_json(fleet, executor=Executor.SERIAL)
    assert plan_json(fleet) == serial
    assert plan_json(fleet, executor=Executor.SERIAL) == serial


def test_replan_json_is_the_same_on_every_run_and_executor(capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for executor in ([], ["--executor", "serial"], [], ["--executor", "serial"]):
        assert main(["replan", FLEET, "--json", *executor]) == EXIT_PLACED
        data = json.loads(capsys.readouterr().out)
        assert data["status"] == "optimal"
        for stats in data["stats"]:
            del stats["wall_time_s"]
            stats["details"] = {k: v for k, v in stats["details"].items() if not k.endswith("_s") and k != "executor"}
        outputs.append(json.dumps(data, sort_keys=True))
    assert outputs == [outputs[0]] * 4
