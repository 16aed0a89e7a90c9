"""The MoE stage in the engines: experts of the first blocks on the host before layer-level offload."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerfit import heuristics
from layerfit.check import check
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    DeviceAssignment,
    Gpu,
    MemoryProfile,
    Plan,
    PlannerConfig,
    RoleCosts,
    Status,
    Worker,
)
from layerfit.heuristics.moe import plan_with_experts
from layerfit.memory import claims, make_layout
from layerfit.memory.experts import with_host_experts
from layerfit.planning.planner import plan

CONFIG = PlannerConfig(time_limit_s=5)


def moe_profile(n: int = 8, dense: int = 100, experts: int = 300, kv: int = 10) -> MemoryProfile:
    # the partial-offload compute is larger (30 vs 20), as llama.cpp's is with experts on the host
    role = RoleCosts(fixed_bytes=100, compute=ComputeBuffer(full_offload_bytes=20, partial_offload_bytes=30))
    return MemoryProfile(
        block_weight_bytes=(dense + experts,) * n,
        block_kv_bytes=(kv,) * n,
        block_expert_bytes=(experts,) * n,
        output_weight_bytes=50,
        main=role,
        local=role,
        rpc=role,
        host_fixed_bytes=10,
    )


def one_gpu_cluster(vram: int, ram: int = 100_000, gpus: int = 1) -> Cluster:
    devices = tuple(Gpu(index=i, total_vram_bytes=vram, allocatable_vram_bytes=vram) for i in range(gpus))
    worker = Worker(id=1, name="a", total_ram_bytes=ram, allocatable_ram_bytes=ram, gpus=devices)
    return Cluster(workers=(worker,))


def test_experts_of_the_fewest_first_blocks_go_to_the_host() -> None:
    # 8 blocks of 400 (300 experts) + KV 10, output 50, fixed 100: full offload 3280 + 50 + 100 + 20.
    # With k blocks' experts on the host: 3280 - 300 k + 50 + 100 + 30 (partial compute) <= 2000 -> k = 5.
    profile = moe_profile()
    cluster = one_gpu_cluster(2000)
    deployment = Deployment(name="m", profile=profile)
    _, blocks = plan_with_experts(cluster, deployment, CONFIG, profile)
    assert blocks == (0, 1, 2, 3, 4)
    result = plan(cluster, deployment, CONFIG)
    assert result.best is not None and result.best.layout.full_offload
    assert result.best.layout.host_expert_blocks == blocks
    assert result.best.claims.devices[0].total_bytes == 3280 - 1500 + 180
    assert check(cluster, deployment, result, profile) == ()
    argv = result.commands[-1].argv
    assert argv[argv.index("--n-cpu-moe") + 1] == "5" and "-ot" not in argv


@pytest.mark.parametrize("limit", ["work", "deadline"])
def test_a_search_over_expert_counts_stopped_by_a_limit_says_truncated(
    monkeypatch: pytest.MonkeyPatch, limit: str
) -> None:
    # The bisection over expert counts stops with the best so far when its work budget is spent
    # (truncated 'work': the same on every run) or at its safety stop (also in safety_stops: another
    # run may try more counts)
    from layerfit.budget.deadline import Deadline
    from layerfit.budget.work import Work
    from layerfit.heuristics import moe

    profile, cluster = moe_profile(), one_gpu_cluster(2000)
    deployment = Deployment(name="m", profile=profile)
    calls: list[int] = []
    real = moe.plan

    class AfterTwoPlans(Deadline):
        def expired(self) -> bool:
            return len(calls) >= 2

    def counted(*args: Any, work: Work, **options: Any) -> Plan:
        calls.append(1)
        found = real(*args, work=Work(work.left(), Deadline.after(60), parent=work), **options)
        if limit == "work" and len(calls) == 2:
            work.spend(work.left())
        return found

    monkeypatch.setattr(moe, "plan", counted)
    deadline = AfterTwoPlans(Deadline.after(60).at) if limit == "deadline" else Deadline.after(60)
    cut, blocks = plan_with_experts(cluster, deployment, CONFIG, profile, work=Work(10.0, deadline))
    assert len(calls) == 2 and blocks == tuple(range(8))  # no experts, then all of them: no bisection
    details = cut.stats[0].details
    assert details["truncated"] == limit
    assert cut.stats[0].safety_stops == (("deadline",) if limit == "deadline" else ())
    whole, blocks = plan_with_experts(cluster, deployment, CONFIG, profile)
    assert blocks == (0, 1, 2, 3, 4) and whole.stats[0].details["truncated"] == ""


def test_parity_switch_keeps_gpustack_order() -> None:
    profile = moe_profile()
    cluster = one_gpu_cluster(2000)
    deployment = Deployment(name="m", profile=profile)
    config = CONFIG.model_copy(update={"expert_offload": False})
    result = plan(cluster, deployment, config)
    assert result.best is not None and not result.best.layout.full_offload
    assert result.best.layout.host_expert_blocks == ()
    assert (
        heuristics.plan(cluster, deployment, config, profile).best
        == plan_with_experts(cluster, deployment, config, profile)[0].best
    )


def test_no_host_experts_without_cpu_offloading() -> None:
    profile = moe_profile()
    deployment = Deployment(name="m", profile=profile, cpu_offloading=False)
    result = plan(one_gpu_cluster(2000), deployment, CONFIG)
    assert result.status is Status.INFEASIBLE


def test_dense_models_are_planned_as_before() -> None:
    dense = moe_profile().model_copy(update={"block_expert_bytes": None})
    cluster = one_gpu_cluster(2000)
    deployment = Deployment(name="m", profile=dense)
    quick, blocks = plan_with_experts(cluster, deployment, CONFIG, dense)
    assert blocks == () and quick == heuristics.plan(cluster, deployment, CONFIG, dense).model_copy(
        update={"stats": quick.stats}
    )


def test_layer_offload_follows_when_even_all_experts_do_not_fit() -> None:
    # dense parts alone: 8 x 110 + 50 + 100 + 30 = 1060 > 1000: layers go to the host, with the
    # experts of the GPU blocks on the host too (more layers on GPUs than without).
    profile = moe_profile()
    result = plan(one_gpu_cluster(1000), Deployment(name="m", profile=profile), CONFIG)
    assert result.best is not None and not result.best.layout.full_offload
    plain = plan(
        one_gpu_cluster(1000),
        Deployment(name="m", profile=profile),
        CONFIG.model_copy(update={"expert_offload": False}),
    )
    assert plain.best is not None and result.best.layout.gpu_layers > plain.best.layout.gpu_layers


def fewest_host_experts(profile: MemoryProfile, cluster: Cluster, gpus: int) -> int | None:
    """Brute force: the fewest blocks whose experts must stay on the host for a full offload on
    ``gpus`` GPUs of the worker (every split of the blocks, every subset of expert blocks)."""
    n = profile.n_blocks
    vram = cluster.workers[0].gpus[0].allocatable_vram_bytes
    ram = cluster.workers[0].allocatable_ram_bytes
    splits: list[list[DeviceAssignment]] = [[DeviceAssignment(worker="a", gpu_index=0, blocks=n)]]
    if gpus == 2:  # GPU 0 the first blocks, GPU 1 the rest and the output layer
        splits += [
            [
                DeviceAssignment(worker="a", gpu_index=0, blocks=first),
                DeviceAssignment(worker="a", gpu_index=1, blocks=n - first),
            ]
            for first in range(1, n + 1)
        ]
    for count in range(n + 1):
        for chosen in combinations(range(n), count):
            for devices in splits:
                layout = with_host_experts(make_layout("a", n, devices), chosen)
                needed = claims(profile, layout)
                if all(d.total_bytes <= vram for d in needed.devices) and needed.workers[0].ram_bytes <= ram:
                    return count
    return None


@settings(max_examples=25)
@given(
    n=st.integers(1, 5),
    dense=st.integers(1, 200),
    experts=st.integers(1, 400),
    vram=st.integers(300, 3000),
    ram=st.integers(200, 3000),
    gpus=st.just(1),
)
def test_planner_keeps_as_few_experts_on_the_host_as_brute_force(
    n: int, dense: int, experts: int, vram: int, ram: int, gpus: int
) -> None:
    profile = moe_profile(n, dense, experts)
    cluster = one_gpu_cluster(vram, ram, gpus)
    best = fewest_host_experts(profile, cluster, gpus)
    result = plan(cluster, Deployment(name="m", profile=profile), CONFIG)
    full = result.best is not None and result.best.layout.full_offload
    assert full == (best is not None)
    if result.best is not None and best is not None:
        # one GPU, alike blocks: the first k blocks are as good as any k, so the bisection over
        # --n-cpu-moe is exact
        assert len(result.best.layout.host_expert_blocks) == best


def test_explain_names_the_blocks_whose_experts_would_stay_on_the_host() -> None:
    profile = moe_profile()
    cluster = one_gpu_cluster(2000)
    deployment = Deployment(name="m", profile=profile, cpu_offloading=False)
    # expert offload on: allowing CPU offloading is the change, and it keeps blocks 0-4's experts on the host
    on = plan(cluster, deployment, CONFIG)
    assert on.status is Status.INFEASIBLE
    (allow,) = [r for r in on.relaxations if r.kind == "allow_cpu_offloading"]
    assert allow.message.endswith("the experts of blocks 0–4 in host RAM") and allow.gpu_layers == profile.n_layers
    assert not [r for r in on.relaxations if r.kind == "experts_on_host"]
    # off (GPUStack's order): the experts are a change of their own, with CPU offloading
    off = plan(cluster, deployment, CONFIG.model_copy(update={"expert_offload": False}))
    assert off.status is Status.INFEASIBLE
    (experts,) = [r for r in off.relaxations if r.kind == "experts_on_host"]
    assert experts.message.startswith("allow CPU offloading and keep the experts of blocks 0–4 in host RAM")
    assert experts.value == 5 and experts.gpu_layers == profile.n_layers and experts.cpu_offloading
