"""llama.cpp's limit on the devices of one process (``domain.limits.MAX_DEVICES``: 15).

Every plan layerfit emits must be one llama.cpp starts: at most 15 devices (RPC servers + local
GPUs) and a ``-ts`` of at most 15 shares. Measured with the b11434 CPU build: 16 rpc devices abort
with ``GGML_ASSERT(n_backends <= GGML_SCHED_MAX_BACKENDS)``; a 16-share ``-ts`` is refused.

The profile is ``P40``: 40 blocks of 100 bytes (weights 90 + KV 10), an output layer of 50 and 200
of fixed cost on every GPU; no compute buffers, no host costs. A GPU of 460 holds two blocks (400)
and the output layer besides (450), never three (500). So 15 GPUs hold 30 blocks and the output
(``-ngl 31``), 16 GPUs 32 blocks and the output (``-ngl 33``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layerfit import heuristics
from layerfit.check import check_layout
from layerfit.cli import EXIT_BAD_INPUT, main
from layerfit.domain import (
    Cluster,
    Deployment,
    DeviceAssignment,
    GiB,
    Gpu,
    GpuRef,
    Layout,
    MemoryProfile,
    MiB,
    PlannerConfig,
    ReasonKind,
    Status,
    Worker,
)
from layerfit.domain.fleet import Fleet, Placement, ReplicaChange
from layerfit.domain.limits import MAX_DEVICES
from layerfit.errors import InputError
from layerfit.fleet import plan_fleet
from layerfit.memory import gpu_layers_flag
from layerfit.planning.planner import evaluate, plan
from layerfit.solver import solve

P40 = MemoryProfile.uniform(40, 90, 10, output_weight_bytes=50, gpu_fixed_bytes=200)
P32 = MemoryProfile.uniform(32, 90, 10, output_weight_bytes=50, gpu_fixed_bytes=200)
CONFIG = PlannerConfig(time_limit_s=10.0, seed=1, alternatives=0)
ROOM = 460


def worker(name: str, gpus: int, ram: int = 100_000) -> Worker:
    devices = tuple(Gpu(index=i, total_vram_bytes=ROOM, allocatable_vram_bytes=ROOM) for i in range(gpus))
    return Worker(id=name, name=name, total_ram_bytes=ram, allocatable_ram_bytes=ram, gpus=devices)


def shares_of(argv: tuple[str, ...]) -> list[str]:
    return argv[argv.index("-ts") + 1].split(",")


def test_the_limit_is_fifteen() -> None:
    assert MAX_DEVICES == 15


@pytest.mark.parametrize(
    ("workers", "distributed"),
    [
        ((worker("a", 16),), False),  # the old plan: 16 local GPUs, -ngl 33, a 16-share -ts
        ((worker("a", 20),), False),  # the old plan: 20 local GPUs, -ngl 41
        ((worker("a", 12), worker("b", 8)), True),  # the old plan: 8 RPC servers + 12 local GPUs
        ((worker("a", 8), *(worker(f"r{i}", 1) for i in range(8))), True),  # the old plan: 8 + 8
    ],
)
def test_a_cluster_offering_more_gpus_gets_a_plan_on_fifteen(workers: tuple[Worker, ...], distributed: bool) -> None:
    where = Cluster(workers=workers)
    dep = Deployment(name="m", profile=P40, distributed_inference_across_workers=distributed)
    answer = plan(where, dep, CONFIG)
    assert answer.status is Status.OPTIMAL and answer.best is not None
    layout = answer.best.layout
    assert len(layout.devices) == MAX_DEVICES
    assert gpu_layers_flag(layout) == 31  # 15 GPUs x 2 blocks + the output layer
    (server,) = (command.argv for command in answer.commands if command.program == "llama-server")
    assert len(shares_of(server)) == MAX_DEVICES
    assert len(server[server.index("--device") + 1].split(",")) == MAX_DEVICES


def test_a_model_that_needs_sixteen_gpus_does_not_fit_and_says_why() -> None:
    """32 blocks with no CPU offloading need 16 GPUs (the old plan used them all)."""
    where = Cluster(workers=(worker("a", 16),))
    dep = Deployment(name="m", profile=P32, cpu_offloading=False)
    answer = plan(where, dep, CONFIG)
    assert answer.status is Status.INFEASIBLE and answer.best is None and not answer.commands
    capped = [reason for reason in answer.reasons if reason.kind is ReasonKind.TOO_MANY_DEVICES]
    assert capped and "at most 15" in capped[0].message, answer.reasons


def test_a_selection_of_sixteen_used_whole_is_refused_and_a_pool_of_sixteen_uses_fifteen() -> None:
    where = Cluster(workers=(worker("a", 16),))
    dep = Deployment(name="m", profile=P40, gpu_selection=tuple(GpuRef(worker="a", index=i) for i in range(16)))
    whole = plan(where, dep, CONFIG)
    assert whole.status is Status.INFEASIBLE
    assert any(reason.kind is ReasonKind.TOO_MANY_DEVICES for reason in whole.reasons), whole.reasons
    pool = plan(where, dep, CONFIG.model_copy(update={"selection_is_pool": True}))
    assert pool.status is Status.OPTIMAL and pool.best is not None
    assert len(pool.best.layout.devices) == MAX_DEVICES


def test_the_heuristic_drops_a_gpustack_candidate_over_the_limit_naming_why() -> None:
    """GPUStack's distributed search would take all 8 RPC servers beside 12 local GPUs (20 devices):
    the candidate is kept in the search but not emitted, and a smaller strategy's answer stands."""
    where = Cluster(workers=(worker("a", 12), worker("b", 8)))
    dep = Deployment(name="m", profile=P40, distributed_inference_across_workers=True)
    quick = heuristics.plan(where, dep, CONFIG, P40)
    assert quick.best is not None and len(quick.best.layout.devices) <= MAX_DEVICES
    dropped = [reason for reason in quick.reasons if reason.kind is ReasonKind.TOO_MANY_DEVICES]
    assert dropped and dropped[0].strategy is not None
    assert "20 devices (8 RPC servers + 12 local GPUs)" in dropped[0].message


def _layout(devices: int) -> Layout:
    return Layout(
        main_worker="a",
        n_blocks=40,
        devices=tuple(DeviceAssignment(worker="a", gpu_index=i, blocks=2) for i in range(devices)),
        output_offloaded=True,
    )


@pytest.mark.parametrize(("devices", "refused"), [(15, False), (16, True)])
def test_the_checker_refuses_a_layout_over_the_limit(devices: int, refused: bool) -> None:
    where = Cluster(workers=(worker("a", 16),))
    dep = Deployment(name="m", profile=P40)
    kinds = {reason.kind for reason in check_layout(where, dep, P40, _layout(devices), CONFIG)}
    assert (ReasonKind.TOO_MANY_DEVICES in kinds) is refused


def test_evaluate_refuses_a_given_layout_over_the_limit() -> None:
    where = Cluster(workers=(worker("a", 16),))
    with pytest.raises(InputError, match=r"16 devices .* one llama\.cpp process runs at most 15"):
        evaluate(where, Deployment(name="m", profile=P40), _layout(16), CONFIG)


def test_the_cli_exits_two_on_a_layout_over_the_limit(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(Cluster(workers=(worker("a", 16),)).model_dump_json())
    deployment = tmp_path / "deployment.json"
    deployment.write_text(json.dumps({"name": "m", "profile": json.loads(P40.model_dump_json())}))
    layout = tmp_path / "layout.json"
    layout.write_text(_layout(16).model_dump_json())
    argv = ["plan", "--cluster", str(cluster), "--deployment", str(deployment), "--layout", str(layout)]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT and not out and "Traceback" not in err, err
    assert "16 devices (0 RPC servers + 16 local GPUs); one llama.cpp process runs at most 15" in err, err


def test_a_tensor_split_over_the_limit_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(Cluster(workers=(worker("a", 16),)).model_dump_json())
    deployment = tmp_path / "deployment.json"
    profile = json.loads(P40.model_dump_json())
    deployment.write_text(json.dumps({"name": "m", "profile": profile, "backend_parameters": ["-ts", "1" + ",1" * 15]}))
    code = main(["plan", "--cluster", str(cluster), "--deployment", str(deployment)])
    _, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT and "Traceback" not in err and "at most 15" in err, err


def _fleet_worker(gpus: int) -> Worker:
    """``worker`` in MiB (the fleet's packing model works in coarser units than a byte)."""
    room = ROOM * MiB
    devices = tuple(Gpu(index=i, total_vram_bytes=room, allocatable_vram_bytes=room) for i in range(gpus))
    return Worker(id="a", name="a", total_ram_bytes=100 * GiB, allocatable_ram_bytes=100 * GiB, gpus=devices)


def _in_mib(blocks: int) -> MemoryProfile:
    return MemoryProfile.uniform(blocks, 90 * MiB, 10 * MiB, output_weight_bytes=50 * MiB, gpu_fixed_bytes=200 * MiB)


@pytest.mark.parametrize("pinned", [False, True])
def test_the_fleet_moves_a_replica_running_on_sixteen_devices_to_fifteen(pinned: bool) -> None:
    """The old fleet plan kept it where it was (16 devices, which llama.cpp refuses to start)."""
    fleet = Fleet(
        cluster=Cluster(workers=(_fleet_worker(16),)),
        deployments=(Deployment(name="m", profile=_in_mib(40)),),
        current=(Placement(deployment="m", layout=_layout(16), pinned=pinned),),
    )
    answer = plan_fleet(fleet)
    (placed,) = answer.placements
    assert len(placed.layout.devices) == MAX_DEVICES and placed.change is ReplicaChange.MOVED
    broken = [reason for reason in answer.reasons if reason.kind is ReasonKind.PIN_BROKEN]
    assert bool(broken) is pinned
    assert all("one llama.cpp process runs at most 15" in reason.message for reason in broken)


def test_the_fleet_names_the_limit_when_a_deployment_needs_sixteen_devices() -> None:
    fleet = Fleet(
        cluster=Cluster(workers=(_fleet_worker(16),)),
        deployments=(Deployment(name="m", profile=_in_mib(32), cpu_offloading=False),),
    )
    answer = plan_fleet(fleet)
    assert not answer.placements
    (unplaced,) = answer.unplaced
    assert ReasonKind.TOO_MANY_DEVICES in {reason.kind for reason in unplaced.reasons}, unplaced.reasons


@pytest.mark.parametrize(
    ("workers", "cpu_offloading", "status", "proof"),
    [
        # 8 RPC servers + 8 local GPUs would hold 32 blocks; 15 devices hold 30 (-ngl 31)
        (tuple(worker(f"w{i}", 8) for i in range(8)), True, Status.OPTIMAL, "layer-bound"),
        # 40 blocks on GPUs need 20 devices: the capacity bound over 15 rules it out
        (tuple(worker(f"w{i}", 16) for i in range(2)), False, Status.INFEASIBLE, "gpu-capacity"),
        (tuple(worker(f"w{i}", 16) for i in range(2)), True, Status.OPTIMAL, "layer-bound"),
    ],
)
def test_the_solver_bounds_know_the_limit(
    workers: tuple[Worker, ...], cpu_offloading: bool, status: Status, proof: str
) -> None:
    """The capacity bounds count at most 15 devices, so a bound proves the answer (before, the
    bounds counted 16 or 32 GPUs, and CP-SAT's search had to prove it)."""
    where = Cluster(workers=workers)
    dep = Deployment(name="m", profile=P40, distributed_inference_across_workers=True, cpu_offloading=cpu_offloading)
    result = solve(where, dep, P40, CONFIG)
    assert result.status is status and result.stats.details["proof"] == proof
    if result.best is not None:
        assert len(result.best.layout.devices) == MAX_DEVICES and gpu_layers_flag(result.best.layout) == 31
