"""``shortcuts.server_bound``: the fill bound by main worker and server count, worked by hand on
small cases, the narrowing it gives the several-workers step, and that step keeping the fastest
time with it (``test_solver_speed``'s bounds property checks it on every valid layout)."""

from __future__ import annotations

import math

from test_solver_speed_shortcuts import _model, solved_both_ways, speed_tiers_of

from layerfit.domain import Cluster, Deployment, GiB, Gpu, MemoryProfile, MiB, PlannerConfig, Status, Worker
from layerfit.domain.cluster import Network
from layerfit.domain.config import Objective
from layerfit.domain.deployment import ModelKind
from layerfit.memory.experts import experts_are_a_decision
from layerfit.solver import solve
from layerfit.solver.model.capacity import class_blocks
from layerfit.solver.model.instance import Instance, SlotKind, build_instance
from layerfit.solver.shortcuts.server_bound import (
    SERVER_BOUND,
    _alpha,
    _heaviest_runs,
    _tops,
    narrow,
    server_bound,
)

FAST, SLOWER = "NVIDIA GeForce RTX 4090", "NVIDIA RTX A6000"
LAN = Network(bandwidth_gbps=10, rtt_ms=0.2)


def test_the_heaviest_runs_of_each_length() -> None:
    # lengths 1..4 over weights 1 5 2 4: 5; 5+2; 5+2+4; all
    assert _heaviest_runs([1, 5, 2, 4]) == [0.0, 5.0, 7.0, 11.0, 12.0]


def test_a_tables_ratio_never_exceeds_a_blocks_time() -> None:
    assert _alpha([2, 10], [1, 5]) == 2.0
    assert _alpha([3, 10], [1, 5]) == 2.0  # the block of weight 5 sets it
    assert _alpha([7], [0]) == 0.0  # no weight: no ratio to use


def test_the_roomiest_gpus_at_least_that_fast() -> None:
    rooms = [(1.0, 5.0), (1.0, 3.0), (2.0, 10.0)]
    assert _tops(rooms, [1.0, 2.0], 2) == [[0.0, 5.0, 8.0], [0.0, 10.0, 15.0]]


def _worker(name: str, gpu: str, count: int, free_gib: int) -> Worker:
    gpus = tuple(
        Gpu(index=i, name=gpu, total_vram_bytes=48 * GiB, allocatable_vram_bytes=free_gib * GiB) for i in range(count)
    )
    return Worker(id=name, name=name, total_ram_bytes=64 * GiB, allocatable_ram_bytes=64 * GiB, gpus=gpus, network=LAN)


def _instance(cluster: Cluster, deployment: Deployment) -> Instance:
    config = PlannerConfig(objective=Objective.SPEED, seed=1, alternatives=0)
    profile = deployment.profile
    assert profile is not None
    return build_instance(
        cluster, deployment, profile, config, experts=experts_are_a_decision(deployment, profile, config)
    )


def test_the_bound_of_three_alike_gpus_by_hand() -> None:
    # three workers with one RTX 4090 each, 20 blocks: the main worker's GPU and r servers hold
    # what they can (every block alike, every GPU alike), the CPU the rest
    cluster = Cluster(workers=tuple(_worker(f"w{i}", FAST, 1, 12) for i in range(3)))
    instance = _instance(cluster, _model(20, 1000))
    found = server_bound(instance)
    assert found is not None and instance.speed is not None
    costs = instance.speed
    (local_table,) = {costs.local_table[c] for c in range(len(instance.classes))}
    (rpc_table,) = {costs.rpc_table[c] for c in range(len(instance.classes))}
    assert local_table is not None and rpc_table is not None
    gpu_step = costs.tables[local_table].block(0)
    assert all(costs.tables[t].block(b) == gpu_step for t in (local_table, rpc_table) for b in range(20))
    host = costs.hosts[costs.host_of[0] or 0]
    host_step = host.prefix[1]
    local_room = class_blocks(instance, instance.classes[0], SlotKind.LOCAL)
    server_room = class_blocks(instance, instance.classes[1], SlotKind.RPC)
    output = min([host.output] + [table.output for table in costs.tables])
    hop = costs.least_hop()
    for r, (bound, _price) in enumerate(found.bounds(0)):
        on_gpus = min(20, local_room + r * server_room)
        by_hand = host.fixed + output + on_gpus * gpu_step + (20 - on_gpus) * host_step + r * hop
        assert bound == max(0, math.floor(by_hand) - 1)


def _mixed() -> tuple[Cluster, Deployment]:
    # three workers with an RTX 4090, three with an RTX A6000, 40 blocks of 1,000 MiB: the
    # fastest layouts keep every block on RTX 4090s
    fast = [_worker(f"fast{i}", FAST, 1, 22) for i in range(3)]
    slower = [_worker(f"slow{i}", SLOWER, 1, 46) for i in range(3)]
    return Cluster(workers=(*fast, *slower)), _model(40, 1000)


def test_narrowing_at_the_optimum_leaves_only_what_a_layout_that_fast_can_use() -> None:
    cluster, deployment = _mixed()
    assert deployment.profile is not None
    config = PlannerConfig(objective=Objective.SPEED, time_limit_s=30.0, seed=1, alternatives=0)
    result = solve(cluster, deployment, deployment.profile, config, shortcuts=False)
    assert result.status is Status.OPTIMAL and result.tiers is not None and result.best is not None
    instance = _instance(cluster, deployment)
    narrowed = narrow(instance, result.tiers.decode_us or 0)
    assert narrowed is not None
    layout = result.best.layout
    main = instance.worker_index(layout.main_worker)
    assert main is not None and len(layout.rpc_devices) in narrowed.counts[main]
    assert narrowed.dropped > 0
    used = {cluster.worker(d.worker).gpu(d.gpu_index).name for d in layout.devices}
    assert used == {FAST}
    kept = {
        narrowed.instance.workers[cls.worker].name for cls in narrowed.instance.classes if cls.rpc_ok or cls.local_ok
    }
    assert kept and all(name.startswith("fast") for name in kept)  # the RTX A6000s are left out


def test_the_several_workers_step_keeps_the_fastest_time_with_the_bound() -> None:
    fast, plain = solved_both_ways(*_mixed())
    assert fast.strict_optimal and plain.strict_optimal
    assert SERVER_BOUND in str(fast.stats.details.get("shortcuts"))
    assert speed_tiers_of(fast) == speed_tiers_of(plain)


def test_no_bound_where_experts_may_leave_their_blocks() -> None:
    # with MoE blocks whose experts may stay on the host, a block's time and room depend on that
    # choice: the fill's figures would not bound them
    cluster, _ = _mixed()
    dense = MemoryProfile.uniform(8, 1000 * MiB, 8 * MiB, output_weight_bytes=300 * MiB)
    moe = dense.model_copy(update={"block_expert_bytes": (800 * MiB,) * 8})
    for profile, applies in ((dense, True), (moe, False)):
        dep = Deployment(name="m", profile=profile, objective=Objective.SPEED, cpu_offloading=True, kind=ModelKind.LLM)
        instance = _instance(cluster, dep)
        assert (instance.experts is None) is applies
        assert (server_bound(instance) is not None) is applies
