"""Scaled sizes stay small enough for CP-SAT's presolve to be right.

A 1-byte compute buffer makes the greatest common divisor of every size one byte, so a unit of one
byte left sizes of ~10**10 in the model. CP-SAT 9.15's presolve then proved feasible steps
infeasible: with shortcuts off, the 3-worker step below was "INFEASIBLE" (a valid 3-worker layout
exists, found by the witness with shortcuts on), and the answer used 4 workers. Sizes now stay
under ``MAX_SCALED`` (coarser units round claims up and capacities down; layouts are checked in
bytes), and both solves agree.
"""

from __future__ import annotations

from layerfit.check import check_layout
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    Gpu,
    MemoryProfile,
    MiB,
    PlannerConfig,
    Policy,
    RoleCosts,
    Status,
    Worker,
)
from layerfit.solver import solve
from layerfit.solver.model.instance import build_instance
from layerfit.solver.model.scale import MAX_SCALED

NONE = RoleCosts(fixed_bytes=0, compute=ComputeBuffer(full_offload_bytes=0, partial_offload_bytes=0))
PROFILE = MemoryProfile(
    block_weight_bytes=(976 * MiB,) * 9,
    block_kv_bytes=(960 * MiB,) * 9,
    main=NONE,
    local=NONE,
    rpc=NONE,
    host_compute=ComputeBuffer(full_offload_bytes=0, partial_offload_bytes=1),  # one byte: the unit
)


def _worker(name: str, ram_mib: int, *vram_mib: int) -> Worker:
    gpus = tuple(Gpu(index=i, total_vram_bytes=v * MiB, allocatable_vram_bytes=v * MiB) for i, v in enumerate(vram_mib))
    ram = ram_mib * MiB
    return Worker(id=name, name=name, unified_memory=True, total_ram_bytes=ram, allocatable_ram_bytes=ram, gpus=gpus)


WHERE = Cluster(
    workers=(
        _worker("w0", 0),
        _worker("n", 8576, 4800, 4800, 9600),
        *(_worker(f"t{i}", 9600, 4800, 4800, 9600) for i in range(4)),
    )
)
DEPLOYMENT = Deployment(name="d", profile=PROFILE, cpu_offloading=False, distributed_inference_across_workers=True)
CONFIG = PlannerConfig(policy=Policy.BINPACK, max_rpc_servers=3, alternatives=1, time_limit_s=20.0, seed=0)


def test_sizes_in_the_model_stay_under_the_limit() -> None:
    instance = build_instance(WHERE, DEPLOYMENT, PROFILE, CONFIG)
    assert max(cls.capacity for cls in instance.classes) <= MAX_SCALED
    assert max(instance.costs.block_prefix_up) <= MAX_SCALED * 9  # nine blocks of at most MAX_SCALED each
    assert MAX_SCALED <= 1 << 31


def test_the_full_solve_finds_the_three_worker_layout() -> None:
    fast = solve(WHERE, DEPLOYMENT, PROFILE, CONFIG)
    full = solve(WHERE, DEPLOYMENT, PROFILE, CONFIG, shortcuts=False)
    for result in (fast, full):
        assert result.status is Status.OPTIMAL and result.best is not None and result.tiers is not None
        assert check_layout(WHERE, DEPLOYMENT, PROFILE, result.best.layout, CONFIG) == ()
        assert (result.tiers.gpu_layers, result.tiers.workers, result.tiers.gpus) == (10, 3, 3)
    assert "3-workers:OPTIMAL" in str(full.stats.details["steps"])
