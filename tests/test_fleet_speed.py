"""The fleet under ``min_decode_tokens_per_s`` and ``objective: speed``: a replica's minimum holds
with every replica on its GPUs decoding at once (``fleet.busy``), and the speed tier prefers idle
GPUs to stacking servers on one."""

from __future__ import annotations

from pathlib import Path

import pytest
from fleet_builders import alike_gpus_fleet

from layerfit.domain import Cluster, Deployment, GiB, Gpu, MemoryProfile, MiB, Worker
from layerfit.domain.config import Objective, PlannerConfig
from layerfit.domain.fleet import Fleet, FleetConfig, FleetPlan, Placement
from layerfit.domain.layout import DeviceAssignment
from layerfit.domain.plan import ReasonKind
from layerfit.errors import InputError
from layerfit.fleet import plan_fleet
from layerfit.fleet.busy import BUSY_TIER, busy_time, gpu_sharing
from layerfit.io.documents import load_file
from layerfit.memory import make_layout
from layerfit.planning.profiles import resolve_profile
from layerfit.speed.deployment import deployment_speed

EXAMPLES = Path(__file__).parent.parent / "layerfit" / "examples"
CONFIG = FleetConfig(time_limit_s=4.0)


def one_worker(n_gpus: int) -> Cluster:
    """A worker with ``n_gpus`` RTX 4090s (a GPU of the speed table: 1008 GB/s)."""
    gpus = tuple(
        Gpu(index=g, name="NVIDIA GeForce RTX 4090", total_vram_bytes=24 * GiB, allocatable_vram_bytes=24 * GiB)
        for g in range(n_gpus)
    )
    return Cluster(
        workers=(Worker(id=0, name="w0", total_ram_bytes=64 * GiB, allocatable_ram_bytes=64 * GiB, gpus=gpus),)
    )


def small_model(**fields: object) -> Deployment:
    """A 4 GiB model of 32 blocks, three replicas: all three fit on one 24 GiB GPU."""
    profile = MemoryProfile.uniform(32, 128 * MiB, 0, gpu_fixed_bytes=600 * MiB, host_fixed_bytes=256 * MiB)
    return Deployment(name="m", profile=profile, replicas=3, **fields)  # type: ignore[arg-type]


def busy_speeds(cluster: Cluster, deployment: Deployment) -> list[float]:
    """The model's decode speed on GPU 0 with 1, 2 and 3 replicas decoding there."""
    profile = resolve_profile(deployment)
    device = DeviceAssignment(worker="w0", gpu_index=0, blocks=profile.n_blocks)
    layout = make_layout("w0", profile.n_blocks, [device])
    return [
        deployment_speed(cluster, deployment, profile, layout, {("w0", 0): n}).decode_tokens_per_s for n in (1, 2, 3)
    ]


def per_gpu(plan: FleetPlan) -> list[int]:
    return sorted(gpu_sharing(plan.placements).values())


def assert_busy_minimums(fleet: Fleet, plan: FleetPlan) -> None:
    """Every placed replica meets its minimum with every replica on its GPUs busy, recomputed here."""
    shared = gpu_sharing(plan.placements)
    deployments = {d.name: d for d in fleet.deployments}
    for placed in plan.placements:
        deployment = deployments[placed.deployment]
        if deployment.min_decode_tokens_per_s is None:
            continue
        sharing = {(d.worker, d.gpu_index): shared[(d.worker, d.gpu_index)] for d in placed.layout.devices}
        speed = deployment_speed(fleet.cluster, deployment, resolve_profile(deployment), placed.layout, sharing)
        assert speed.decode_tokens_per_s >= deployment.min_decode_tokens_per_s


def test_the_busy_time_is_linear_in_the_replicas_sharing_a_gpu() -> None:
    # t(n) = rest + n x share: the busy rule's arithmetic is the speed model's (to a µs rounded up)
    cluster, deployment = one_worker(1), small_model()
    speeds = busy_speeds(cluster, deployment)
    profile = resolve_profile(deployment)
    layout = make_layout("w0", 32, [DeviceAssignment(worker="w0", gpu_index=0, blocks=32)])
    time = busy_time(cluster, deployment, profile, layout)
    for n, speed in zip((1, 2, 3), speeds, strict=True):
        exact_us = 1e6 / speed
        assert exact_us <= time.time_us({("w0", 0): n}) <= exact_us + 2
    # the GPU's share is most of the time: three busy replicas are well under half as fast as one
    assert speeds[2] < speeds[0] / 2


def test_a_minimum_that_three_replicas_on_one_gpu_break_spreads_them() -> None:
    cluster = one_worker(2)
    _, two, three = busy_speeds(cluster, small_model())
    # predicted 172.3, 95.6 and 66.2 tokens/s with 1, 2 and 3 replicas decoding on the GPU: the
    # minimum is 80.9
    minimum = (two + three) / 2  # two on a GPU keep it, three do not
    assert two >= minimum > three
    fleet = Fleet(cluster=cluster, deployments=(small_model(min_decode_tokens_per_s=minimum),))
    plan = plan_fleet(fleet, CONFIG)
    assert len(plan.placements) == 3
    assert per_gpu(plan) == [1, 2]
    assert_busy_minimums(fleet, plan)
    # without the minimum the GPUs tier stacks all three on one GPU
    stacked = plan_fleet(Fleet(cluster=cluster, deployments=(small_model(),)), CONFIG)
    assert per_gpu(stacked) == [3]


def test_with_one_gpu_a_busy_minimum_places_fewer_replicas() -> None:
    cluster = one_worker(1)
    alone, two, three = busy_speeds(cluster, small_model())
    fleet = Fleet(cluster=cluster, deployments=(small_model(min_decode_tokens_per_s=(two + three) / 2),))
    for config in (CONFIG, CONFIG.model_copy(update={"column_generation": False})):
        plan = plan_fleet(fleet, config)
        assert len(plan.placements) == 2 and len(plan.unplaced) == 1
        assert_busy_minimums(fleet, plan)
    # a minimum above the speed alone: no candidate at all (the single-GPU layouts are checked too)
    too_fast = Fleet(cluster=cluster, deployments=(small_model(min_decode_tokens_per_s=alone * 1.01),))
    refused = plan_fleet(too_fast, CONFIG)
    assert refused.placements == ()
    assert "does not fit anywhere in this cluster, even alone" in refused.unplaced[0].reasons[0].message


@pytest.mark.parametrize("where", ["deployment", "config"])
def test_objective_speed_prefers_idle_gpus_to_stacking(where: str) -> None:
    cluster = one_worker(2)
    by_layers = plan_fleet(Fleet(cluster=cluster, deployments=(small_model(),)), CONFIG)
    if where == "deployment":
        fleet, planner = Fleet(cluster=cluster, deployments=(small_model(objective="speed"),)), PlannerConfig()
    else:
        fleet, planner = Fleet(cluster=cluster, deployments=(small_model(),)), PlannerConfig(objective=Objective.SPEED)
    fast = plan_fleet(fleet, CONFIG, planner)
    assert per_gpu(by_layers) == [3] and BUSY_TIER not in [b.tier for b in by_layers.bounds]
    assert per_gpu(fast) == [1, 2]
    tier = next(b for b in fast.bounds if b.tier == BUSY_TIER)
    # its value is the three replicas' busy times: 2 x t(2) + t(1), in µs
    _, two, _ = busy_speeds(cluster, small_model())
    alone = busy_speeds(cluster, small_model())[0]
    assert 2 * 1e6 / two + 1e6 / alone <= tier.value <= 2 * 1e6 / two + 1e6 / alone + 6
    assert tier.proven
    names = [b.tier for b in fast.bounds]
    assert names.index("replicas moved") < names.index(BUSY_TIER) < names.index("GPUs and workers used")


def test_the_bundled_speed_fleet_stacks_no_servers() -> None:
    layers = load_file(Fleet, EXAMPLES / "fleet.yaml")
    speed = load_file(Fleet, EXAMPLES / "fleet-speed.yaml")
    stacked = plan_fleet(layers, CONFIG)
    spread = plan_fleet(speed, CONFIG)
    assert max(gpu_sharing(stacked.placements).values()) == 3
    assert max(gpu_sharing(spread.placements).values()) == 1
    assert len(spread.placements) == len(stacked.placements)
    assert all(placed.busy_speed is None for placed in spread.placements)
    assert_busy_minimums(speed, spread)


@pytest.mark.parametrize("seed", range(4))
def test_every_engine_keeps_the_busy_minimums_on_random_fleets(seed: int) -> None:
    fleet = alike_gpus_fleet(seed, n_workers=2, n_deployments=4, replicas=(2, 3))
    # each deployment's minimum: two thirds of its speed alone on a GPU of the fleet
    worker = fleet.cluster.workers[0]
    limited = []
    for deployment in fleet.deployments:
        profile = resolve_profile(deployment)
        device = DeviceAssignment(worker=worker.name, gpu_index=0, blocks=profile.n_blocks)
        layout = make_layout(worker.name, profile.n_blocks, [device])
        alone = deployment_speed(fleet.cluster, deployment, profile, layout).decode_tokens_per_s
        limited.append(deployment.model_copy(update={"min_decode_tokens_per_s": alone * 2 / 3}))
    fleet = fleet.model_copy(update={"deployments": tuple(limited)})
    for config in (CONFIG, CONFIG.model_copy(update={"column_generation": False, "sequential_seed": None})):
        plan = plan_fleet(fleet, config)
        assert_busy_minimums(fleet, plan)


@pytest.mark.parametrize(
    ("field", "value"), [("min_decode_tokens_per_s", -1), ("min_decode_tokens_per_s", "fast"), ("objective", "quick")]
)
def test_a_bad_speed_field_in_a_fleet_file_names_it(tmp_path: Path, field: str, value: object) -> None:
    text = (EXAMPLES / "fleet.yaml").read_text()
    bad = tmp_path / "fleet.yaml"
    bad.write_text(text.replace("  - name: qwen-30b\n", f"  - name: qwen-30b\n    {field}: {value}\n"))
    with pytest.raises(InputError, match=field):
        load_file(Fleet, bad)


def test_pins_that_together_break_a_busy_minimum_are_a_warning_not_an_error() -> None:
    # three pinned replicas on GPU 0 of two: with two of them busy there the minimum still holds,
    # with three it does not; the third pin is not enforced (PIN_BROKEN, named), the plan goes on
    cluster = one_worker(2)
    speeds = busy_speeds(cluster, small_model())
    deployment = small_model(min_decode_tokens_per_s=(speeds[1] + speeds[2]) / 2)
    layout = make_layout("w0", 32, [DeviceAssignment(worker="w0", gpu_index=0, blocks=32)])
    pins = tuple(Placement(deployment="m", replica=r, layout=layout, pinned=True) for r in range(3))
    fleet = Fleet(cluster=cluster, deployments=(deployment,), current=pins)
    plan = plan_fleet(fleet, CONFIG)
    broken = [reason for reason in plan.reasons if reason.kind is ReasonKind.PIN_BROKEN]
    assert len(broken) == 1 and "pinned replica 2 of m" in broken[0].message
    assert "with its GPUs busy, below min_decode_tokens_per_s" in broken[0].message
    assert len(plan.placements) == 3 and per_gpu(plan) == [1, 2]
    assert_busy_minimums(fleet, plan)
