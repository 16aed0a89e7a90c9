"""Experts on the host as a dense profile: it prices every layout exactly as the real claims do."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from layerfit.check import check
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    DeviceAssignment,
    Gpu,
    Layout,
    MemoryProfile,
    PlannerConfig,
    RoleCosts,
    Worker,
)
from layerfit.memory import claims, make_layout
from layerfit.memory.experts import first_expert_blocks, profile_with_host_experts, with_host_experts
from layerfit.planning.planner import plan


def role(fixed: int, full: int, partial: int, multi: int) -> RoleCosts:
    compute = ComputeBuffer(full_offload_bytes=full, partial_offload_bytes=partial, multi_device_bytes=multi)
    return RoleCosts(fixed_bytes=fixed, compute=compute)


@st.composite
def moe_profiles(draw: st.DrawFn) -> MemoryProfile:
    n = draw(st.integers(1, 6))
    dense = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
    experts = draw(st.lists(st.integers(0, 200), min_size=n, max_size=n))
    experts[-1] = max(experts[-1], 1)
    host_experts = [draw(st.integers(0, size)) for size in experts]
    sizes = st.integers(0, 60)
    return MemoryProfile(
        block_weight_bytes=tuple(d + e for d, e in zip(dense, experts, strict=True)),
        block_kv_bytes=tuple(draw(st.lists(sizes, min_size=n, max_size=n))),
        block_host_weight_bytes=tuple(d + h for d, h in zip(dense, host_experts, strict=True)),
        block_expert_bytes=tuple(experts),
        block_host_expert_bytes=tuple(host_experts),
        output_weight_bytes=draw(sizes),
        token_embedding_bytes=draw(sizes),
        main=role(*draw(st.tuples(sizes, sizes, sizes, sizes))),
        local=role(*draw(st.tuples(sizes, sizes, sizes, sizes))),
        rpc=role(*draw(st.tuples(sizes, sizes, sizes, sizes))),
        host_fixed_bytes=draw(sizes),
        host_compute=ComputeBuffer(full_offload_bytes=draw(sizes), partial_offload_bytes=draw(sizes)),
        first_device_compute_bytes=draw(sizes),
        output_compute_bytes=draw(sizes),
        host_output_compute_bytes=draw(sizes),
        rpc_host_fixed_bytes=draw(sizes),
    )


@st.composite
def layouts(draw: st.DrawFn, n_blocks: int) -> Layout:
    """CPU-only, or 1-3 GPUs (the first ones RPC servers of worker r) with any block counts."""
    count = draw(st.integers(0, 3))
    if count == 0:
        return Layout(main_worker="m", n_blocks=n_blocks)
    blocks = draw(
        st.lists(st.integers(0, n_blocks), min_size=count, max_size=count).filter(lambda b: sum(b) <= n_blocks)
    )
    rpc = draw(st.integers(0, count - 1))
    devices = [
        DeviceAssignment(worker="r" if i < rpc else "m", gpu_index=i, blocks=b)
        for i, b in enumerate(blocks)
        if b or i == count - 1
    ]
    return make_layout("m", n_blocks, devices)


def totals(needed: object) -> tuple[list[int], list[int]]:
    assert hasattr(needed, "devices") and hasattr(needed, "workers")
    return [d.total_bytes for d in needed.devices], [w.ram_bytes for w in needed.workers]


@given(st.data())
def test_dense_stand_in_prices_every_layout_as_the_real_claims(data: st.DataObject) -> None:
    profile = data.draw(moe_profiles())
    layout = data.draw(layouts(profile.n_blocks))
    chosen = data.draw(st.sets(st.sampled_from(profile.expert_blocks)))
    stand_in = profile_with_host_experts(profile, chosen)
    real = with_host_experts(layout, chosen)
    assert set(real.experts_on_host) >= chosen
    assert totals(claims(stand_in, layout)) == totals(claims(profile, real))


def test_first_expert_blocks_skip_dense_blocks() -> None:
    profile = MemoryProfile(block_weight_bytes=(5, 9, 9), block_kv_bytes=(0, 0, 0), block_expert_bytes=(0, 4, 4))
    assert first_expert_blocks(profile, 1) == (1,)
    assert first_expert_blocks(profile, 9) == (1, 2)


def test_user_overrides_are_planned_and_named_in_the_layout() -> None:
    # 4 MoE blocks of 400 (300 experts) + KV 10, output 50, GPU fixed 100: full offload needs 1790.
    # The GPU has 1200: with --n-cpu-moe 2 (experts of blocks 0-1 on the host) 1190 fits.
    profile = MemoryProfile(
        block_weight_bytes=(400,) * 4,
        block_kv_bytes=(10,) * 4,
        block_expert_bytes=(300,) * 4,
        output_weight_bytes=50,
        main=RoleCosts(fixed_bytes=100),
        local=RoleCosts(fixed_bytes=100),
        rpc=RoleCosts(fixed_bytes=100),
        fixed_host_experts=(0, 1),
    )
    gpu = Gpu(index=0, total_vram_bytes=1200, allocatable_vram_bytes=1200)
    cluster = Cluster(
        workers=(Worker(id=1, name="a", total_ram_bytes=10_000, allocatable_ram_bytes=10_000, gpus=(gpu,)),)
    )
    deployment = Deployment(name="m", profile=profile)
    result = plan(cluster, deployment, PlannerConfig(time_limit_s=2))
    assert result.best is not None and result.best.layout.full_offload
    assert result.best.layout.host_expert_blocks == (0, 1)
    assert result.best.claims.devices[0].total_bytes == 1190
    assert result.best.claims.workers[0].expert_bytes == 600
    assert check(cluster, deployment, result, profile) == ()
    argv = result.commands[-1].argv
    assert argv[argv.index("--n-cpu-moe") + 1] == "2"
