"""The multi-worker step's greedy witness and the proof it gives when it meets the step's bound.

* ``multi_worker_witness`` returns only valid layouts of the asked shape (workers, GPUs, every
  layer on GPUs or a given number of them), on random clusters.
* A step whose witness meets ``fewest_gpus`` is proven without a search (``-bound-met`` in the
  steps): its strict tiers equal those of the full solve, which runs CP-SAT on every step.
* On a cluster of uneven blocks where only three workers hold the model, the witness is found and
  proves the optimum.
"""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_solver_properties import SLOW, assert_valid, clusters, configs, profiles, result_key, tier_key

from layerfit import heuristics
from layerfit.check import check_layout
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    Gpu,
    Layout,
    MemoryProfile,
    MiB,
    PlannerConfig,
    RoleCosts,
    Status,
    Worker,
)
from layerfit.solver import solve
from layerfit.solver.model.capacity import layer_ceiling
from layerfit.solver.model.instance import build_instance
from layerfit.solver.shortcuts.gpu_count import fewest_gpus
from layerfit.solver.shortcuts.witness import multi_worker_witness


def _deployment(profile: MemoryProfile, *, offload: bool) -> Deployment:
    return Deployment(name="d", profile=profile, cpu_offloading=offload, distributed_inference_across_workers=True)


@st.composite
def shared_clusters(draw: st.DrawFn, profile: MemoryProfile) -> Cluster:
    """Workers whose GPUs each hold, besides any fixed cost, between a tenth and half of the
    model's blocks (so that a layout usually needs several of them); at most 15 GPUs."""
    total = sum(profile.block_weight_bytes) + sum(profile.block_kv_bytes)
    roles = [profile.main, profile.local, profile.rpc, *([profile.unified] if profile.unified else [])]
    fixed = max(
        role.fixed_bytes
        + max(role.compute.full_offload_bytes, role.compute.partial_offload_bytes, role.compute.multi_device_bytes or 0)
        for role in roles
    )
    fixed += profile.output_weight_bytes + profile.extra_main_gpu_bytes + profile.output_compute_bytes
    fixed += profile.first_device_compute_bytes
    workers = []
    for i in range(draw(st.integers(2, 5))):
        vram = draw(st.lists(st.integers(fixed + total // 10, fixed + total // 2 + 1), min_size=1, max_size=3))
        gpus = tuple(Gpu(index=j, total_vram_bytes=v, allocatable_vram_bytes=v) for j, v in enumerate(vram))
        ram = draw(st.integers(total // 4, 2 * total))
        name = f"w{i}"
        workers.append(
            Worker(
                id=name,
                name=name,
                unified_memory=draw(st.integers(0, 4)) == 0,
                total_ram_bytes=ram,
                allocatable_ram_bytes=ram,
                gpus=gpus,
            )
        )
    return Cluster(workers=tuple(workers))


def _draw_case(data: st.DataObject) -> tuple[Cluster, Deployment, MemoryProfile, PlannerConfig]:
    """A profile, a cluster (mostly ``shared_clusters``), a distributed deployment and a config."""
    profile = data.draw(profiles(max_blocks=16, unit=16 * MiB))
    if data.draw(st.integers(0, 3)) == 0:
        where = data.draw(clusters(max_gpus=12, max_workers=5, top=1200, unit=16 * MiB))
    else:
        where = data.draw(shared_clusters(profile))
    return where, _deployment(profile, offload=data.draw(st.booleans())), profile, data.draw(configs())


@settings(SLOW, max_examples=60)
@given(data=st.data())
def test_a_witness_is_valid_and_of_the_asked_shape(data: st.DataObject) -> None:
    where, dep, profile, config = _draw_case(data)
    instance = build_instance(where, dep, profile, config)
    checked: list[Layout] = []

    def valid(layout: Layout) -> bool:
        checked.append(layout)
        return not check_layout(where, dep, profile, layout, config)

    workers = data.draw(st.integers(2, 3))
    gpus = data.draw(st.integers(workers - 1, 8))
    layers = data.draw(st.none() | st.integers(min(gpus + 1, profile.n_layers), profile.n_layers))  # fewer: partial
    found = multi_worker_witness(instance, workers, gpus, valid, layers)
    event(
        f"witness: {'found' if found else 'none'}, {'every layer' if layers in (None, profile.n_layers) else 'partial'}"
    )
    for layout in checked:
        assert len(layout.workers) == workers and len(layout.devices) == gpus
        assert layout.gpu_layers == (profile.n_layers if layers is None else layers)
    if found is not None:
        assert found in checked and check_layout(where, dep, profile, found, config) == ()


@settings(SLOW, max_examples=40)
@given(data=st.data())
def test_a_met_bound_agrees_with_the_full_solve(data: st.DataObject) -> None:
    where, dep, profile, config = _draw_case(data)
    hint = heuristics.plan(where, dep, config, profile).layout
    fast = solve(where, dep, profile, config, hint=hint)
    assert_valid(where, dep, profile, config, fast)
    met = "-bound-met" in str(fast.stats.details["steps"])
    event(f"bound met: {met}")
    if not met:
        return
    assert fast.strict_optimal
    full = solve(where, dep, profile, config, hint=hint, shortcuts=False)
    assert full.strict_optimal
    assert result_key(fast) == result_key(full)


def _uneven_cluster() -> tuple[Cluster, Deployment, MemoryProfile]:
    """12 blocks, every fourth one heavier (as in large llama models), on 4 workers of which only
    three together hold them: the main worker's two GPUs and two single-GPU rpc servers."""
    weights = tuple((130 if b % 4 == 3 else 100) * MiB for b in range(12))
    none = ComputeBuffer(full_offload_bytes=0, partial_offload_bytes=0, multi_device_bytes=None)
    role = RoleCosts(fixed_bytes=20 * MiB, compute=none)
    profile = MemoryProfile(
        block_weight_bytes=weights,
        block_kv_bytes=(10 * MiB,) * 12,
        output_weight_bytes=30 * MiB,
        token_embedding_bytes=0,
        main=role,
        local=role,
        rpc=role,
        host_fixed_bytes=0,
        host_compute=none,
        rpc_host_fixed_bytes=0,
        extra_main_gpu_bytes=0,
        output_compute_bytes=0,
        first_device_compute_bytes=0,
    )

    def worker(name: str, vram_mib: tuple[int, ...]) -> Worker:
        gpus = tuple(
            Gpu(index=i, total_vram_bytes=v * MiB, allocatable_vram_bytes=v * MiB) for i, v in enumerate(vram_mib)
        )
        return Worker(id=name, name=name, total_ram_bytes=8192 * MiB, allocatable_ram_bytes=8192 * MiB, gpus=gpus)

    where = Cluster(
        workers=(worker("a", (400, 400)), worker("b", (400,)), worker("c", (420,)), worker("d", (200, 200)))
    )
    return where, _deployment(profile, offload=False), profile


def test_the_witness_proves_a_three_worker_optimum() -> None:
    where, dep, profile = _uneven_cluster()
    config = PlannerConfig(time_limit_s=20.0, seed=1, alternatives=0)
    instance = build_instance(where, dep, profile, config)
    assert fewest_gpus(instance, 2, layer_ceiling(instance)) is None  # two workers hold too little
    fast = solve(where, dep, profile, config)
    assert fast.status is Status.OPTIMAL and fast.best is not None
    assert "3-workers-bound-met" in str(fast.stats.details["steps"])
    assert tier_key(fast.best.layout) == (13, -3, -4)
    full = solve(where, dep, profile, config, shortcuts=False)
    assert result_key(full) == result_key(fast)


def test_a_partial_witness_proves_the_most_layers() -> None:
    """The uneven cluster without its fourth worker and with a smaller third GPU holds 12 of the 13
    layers: the layer bound allows no more, the 3-worker step's witness (the host keeping the first
    block) meets its GPU-count bound, and the full solve agrees."""
    where, _, profile = _uneven_cluster()
    smaller = Gpu(index=0, total_vram_bytes=300 * MiB, allocatable_vram_bytes=300 * MiB)
    where = Cluster(workers=(*where.workers[:2], where.workers[2].model_copy(update={"gpus": (smaller,)})))
    dep = _deployment(profile, offload=True)
    config = PlannerConfig(time_limit_s=20.0, seed=1, alternatives=0)
    fast = solve(where, dep, profile, config)
    assert fast.status is Status.OPTIMAL and fast.best is not None
    assert fast.stats.details["proof"] == "layer-bound"
    assert "3-workers-bound-met" in str(fast.stats.details["steps"])
    assert tier_key(fast.best.layout) == (12, -3, -4)
    full = solve(where, dep, profile, config, shortcuts=False)
    assert result_key(full) == result_key(fast)


def test_presolve_does_not_prove_a_layout_that_fits_infeasible() -> None:
    """Four 4 GiB blocks on three unified-memory workers, sizes to the byte: with the model in
    1-byte units CP-SAT 9.15's presolve proved the full model infeasible, while the bound-met
    witness (valid, checked in bytes) held them and a search without presolve found a solution
    satisfying every constraint (``solver.scale`` keeps sizes under 2**30)."""
    none = ComputeBuffer(full_offload_bytes=0, partial_offload_bytes=0)
    profile = MemoryProfile(
        block_weight_bytes=(4294967296,) * 4,
        block_kv_bytes=(251658240,) * 4,
        output_weight_bytes=0,
        token_embedding_bytes=0,
        main=RoleCosts(fixed_bytes=0, compute=none),
        local=RoleCosts(fixed_bytes=87445629, compute=none),
        rpc=RoleCosts(fixed_bytes=0, compute=none),
        extra_main_gpu_bytes=436207616,
        output_compute_bytes=989855744,
    )

    def worker(name: str, ram: int, vram: tuple[int, ...]) -> Worker:
        gpus = tuple(Gpu(index=i, total_vram_bytes=v, allocatable_vram_bytes=v) for i, v in enumerate(vram))
        return Worker(
            id=int(name[1:]), name=name, unified_memory=True, total_ram_bytes=ram, allocatable_ram_bytes=ram, gpus=gpus
        )

    where = Cluster(
        workers=(
            worker("w0", 10143096199, (4238128867, 4238128867, 10143096199)),
            worker("w1", 10143096199, (4546625536, 6878658560)),
            worker("w2", 5587751037, (4634071165,)),
        )
    )
    dep = _deployment(profile, offload=False)
    config = PlannerConfig(max_rpc_servers=2, alternatives=0, time_limit_s=20.0, seed=0)
    hint = heuristics.plan(where, dep, config, profile).layout
    fast = solve(where, dep, profile, config, hint=hint)
    full = solve(where, dep, profile, config, hint=hint, shortcuts=False)
    assert fast.best is not None and not check_layout(where, dep, profile, fast.best.layout, config)
    assert full.status is Status.OPTIMAL and full.strict_optimal
    assert result_key(fast) == result_key(full)
