"""The solver's capacity bounds hold for every valid layout (brute force on tiny instances).

``mains_reaching`` keeps the main worker of every layout with at least a given number of GPU
layers: the general search leaves the others out once the incumbent has that many.

``layer_bound.layers_upper_bound`` is at least the layer count of every valid partial offload, and
``layer_bound.may_reach`` holds for the layer count of every valid layout (the search runs step 1
again at the most layers it allows, as a proof that no layout has more).

``fewest_gpus`` is a lower bound on the GPU count of any layout with a given worker count and
GPU-layer count: the multi-worker search adds it to its model and skips a worker count where it
is ``None``, so an overestimate would lose the optimum or claim a false infeasibility. Its last
step searches over orders of the largest rooms, coarsened to few values by rounding up only.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_solver_properties import SLOW, all_layouts, clusters, configs, deployments, profiles

from layerfit.check import check_layout
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    Gpu,
    GpuRef,
    MemoryProfile,
    MiB,
    PlannerConfig,
    RoleCosts,
    Worker,
)
from layerfit.solver.model.instance import build_instance
from layerfit.solver.shortcuts.gpu_count import ORDER_VALUES, coarse_rooms, fewest_gpus
from layerfit.solver.shortcuts.layer_bound import layers_upper_bound, may_reach, most_layers
from layerfit.solver.shortcuts.proofs import mains_reaching


@settings(SLOW, max_examples=200)
@given(data=st.data())
def test_bounds_never_exclude_a_valid_layout(data: st.DataObject) -> None:
    profile = data.draw(profiles(max_blocks=3, unit=16 * MiB))
    where = data.draw(clusters(max_gpus=4, max_workers=3, top=2500, unit=16 * MiB))
    dep = data.draw(deployments(where, profile, with_split=False))
    dep = dep.model_copy(update={"distributed_inference_across_workers": True})
    config = data.draw(configs())
    instance = build_instance(where, dep, profile, config)
    fewest: dict[tuple[int, int], int | None] = {}
    reachable: dict[int, bool] = {}
    checked = 0
    for layout in all_layouts(where, profile.n_blocks):
        if check_layout(where, dep, profile, layout, config):
            continue
        main = instance.worker_index(layout.main_worker)
        assert main in mains_reaching(instance, layout.gpu_layers), f"main left out, but {layout} is valid"
        if not layout.devices:
            continue
        if layout.gpu_layers < profile.n_layers:
            assert layout.gpu_layers <= layers_upper_bound(instance, profile.n_layers - 1), f"{layout} is valid"
        if layout.gpu_layers not in reachable:
            reachable[layout.gpu_layers] = may_reach(instance, layout.gpu_layers)
        assert reachable[layout.gpu_layers], f"{layout.gpu_layers} layers ruled out, but {layout} is valid"
        key = (len(layout.workers), layout.gpu_layers)
        if key not in fewest:
            fewest[key] = fewest_gpus(instance, *key)
        bound = fewest[key]
        assert bound is not None, f"{key}: no GPU count, but {layout} is valid"
        assert len(layout.devices) >= bound, f"{key}: bound {bound}, but {layout} is valid"
        checked += 1
    event(f"valid layouts with GPUs: {'none' if not checked else 'some'}")
    event(f"multi-worker keys: {sum(workers > 1 for workers, _ in fewest)}")


def test_a_single_device_pays_no_several_device_costs() -> None:
    """A GPU that holds the whole model only without the several-devices compute buffer: the bound
    is 1 GPU with one worker and with two (the main worker without a GPU), as brute force finds."""
    multi = ComputeBuffer(full_offload_bytes=0, partial_offload_bytes=0, multi_device_bytes=300)
    profile = MemoryProfile.uniform(4, 90, 10, gpu_fixed_bytes=100, compute=multi)
    host = Worker(id="a", name="a", total_ram_bytes=10_000, allocatable_ram_bytes=10_000)
    gpu = Gpu(index=0, total_vram_bytes=500, allocatable_vram_bytes=500)
    holder = Worker(id="b", name="b", total_ram_bytes=10_000, allocatable_ram_bytes=10_000, gpus=(gpu,))
    where = Cluster(workers=(host, holder))
    dep = Deployment(name="d", profile=profile, distributed_inference_across_workers=True, cpu_offloading=False)
    config = PlannerConfig()
    instance = build_instance(where, dep, profile, config)
    fewest: dict[int, int] = {}
    for layout in all_layouts(where, profile.n_blocks):
        if layout.gpu_layers == profile.n_layers and not check_layout(where, dep, profile, layout, config):
            workers = len(layout.workers)
            fewest[workers] = min(fewest.get(workers, len(layout.devices)), len(layout.devices))
    assert fewest == {1: 1, 2: 1}
    for workers, gpus in fewest.items():
        assert fewest_gpus(instance, workers, profile.n_layers) == gpus


@given(rooms=st.lists(st.integers(-50, 10_000), min_size=1, max_size=40).map(lambda r: sorted(r, reverse=True)))
def test_coarse_rooms_only_round_up_to_few_values(rooms: list[int]) -> None:
    """The order search's rooms are each at least the room they stand for (so its bound stays an
    upper bound), with few distinct values."""
    coarse = coarse_rooms(rooms)
    assert len(coarse) == len(rooms)
    assert all(c >= r for c, r in zip(coarse, rooms, strict=True))
    assert len(set(coarse)) <= ORDER_VALUES
    assert set(coarse) <= set(rooms)


@pytest.mark.parametrize(("pool", "server", "gpus"), [(410, 0, 3), (510, 70, 2)])
def test_a_unified_main_keeps_its_host_memory_out_of_its_pool(pool: int, server: int, gpus: int) -> None:
    """A unified-memory worker's one large GPU holds every block as an rpc-server (its pool less a
    server's small fixed cost) but not the output layer, nor as the main GPU (its pool less the main
    process's host memory); the other worker's small GPUs cannot be the main GPU (the main device's
    fixed cost leaves no room for a block or the output). With a pool of 410 the two workers need 3
    GPUs; with 510 (and a server's fixed cost of 70, so that the large GPU alone holds too little)
    only 2, as brute force finds: the bound must meet both (the largest-rooms order search alone,
    which lets the large GPU be the last device with its rpc-server room, says 2 for the first)."""
    profile = MemoryProfile.uniform(
        4, 100, 0, output_weight_bytes=50, host_fixed_bytes=100, rpc_host_fixed_bytes=server
    )
    profile = profile.model_copy(update={"main": RoleCosts(fixed_bytes=60)})
    big = Gpu(index=0, total_vram_bytes=1000, allocatable_vram_bytes=1000)
    apple = Worker(id="u", name="u", unified_memory=True, total_ram_bytes=pool, allocatable_ram_bytes=pool, gpus=(big,))
    small = tuple(Gpu(index=i, total_vram_bytes=100, allocatable_vram_bytes=100) for i in range(2))
    node = Worker(id="d", name="d", total_ram_bytes=10_000, allocatable_ram_bytes=10_000, gpus=small)
    where = Cluster(workers=(apple, node))
    dep = Deployment(name="d", profile=profile, distributed_inference_across_workers=True, cpu_offloading=False)
    config = PlannerConfig()
    fewest = min(
        len(layout.devices)
        for layout in all_layouts(where, profile.n_blocks)
        if len(layout.workers) == 2
        and layout.gpu_layers == profile.n_layers
        and not check_layout(where, dep, profile, layout, config)
    )
    assert fewest == gpus
    assert fewest_gpus(build_instance(where, dep, profile, config), 2, profile.n_layers) == gpus


def test_fewer_layers_than_the_model_pay_the_partial_offload_costs() -> None:
    """A layout with a block on the host is a partial offload and pays its larger compute buffer:
    the 300-byte GPU then holds two 100-byte blocks (and the free output layer), three layers in
    all, as brute force finds; with the full-offload buffer it would seem to hold three blocks."""
    compute = ComputeBuffer(full_offload_bytes=0, partial_offload_bytes=60)
    profile = MemoryProfile.uniform(4, 100, 0, compute=compute)
    gpu = Gpu(index=0, total_vram_bytes=300, allocatable_vram_bytes=300)
    where = Cluster(
        workers=(Worker(id="a", name="a", total_ram_bytes=10_000, allocatable_ram_bytes=10_000, gpus=(gpu,)),)
    )
    dep = Deployment(name="d", profile=profile, cpu_offloading=True)
    config = PlannerConfig()
    most = max(
        layout.gpu_layers
        for layout in all_layouts(where, profile.n_blocks)
        if not check_layout(where, dep, profile, layout, config)
    )
    assert most == 3
    instance = build_instance(where, dep, profile, config)
    assert most_layers(instance, 0, profile.n_layers) == most
    assert may_reach(instance, most) and not may_reach(instance, most + 1)


def test_a_selection_used_whole_fixes_the_gpu_count() -> None:
    """Two of the three selected GPUs hold the model, but a selection used whole puts every one of
    them in the layout: the bound for two workers is 3, as brute force finds (the capacity bound
    alone says 2)."""
    profile = MemoryProfile.uniform(4, 100, 0)
    gpu = Gpu(index=0, total_vram_bytes=300, allocatable_vram_bytes=300)
    pair = (gpu, gpu.model_copy(update={"index": 1}))
    a = Worker(id="a", name="a", total_ram_bytes=10_000, allocatable_ram_bytes=10_000, gpus=pair)
    b = Worker(id="b", name="b", total_ram_bytes=10_000, allocatable_ram_bytes=10_000, gpus=(gpu,))
    where = Cluster(workers=(a, b))
    chosen = (GpuRef(worker="a", index=0), GpuRef(worker="a", index=1), GpuRef(worker="b", index=0))
    dep = Deployment(
        name="d", profile=profile, distributed_inference_across_workers=True, cpu_offloading=False, gpu_selection=chosen
    )
    config = PlannerConfig()
    counts = {
        len(layout.devices)
        for layout in all_layouts(where, profile.n_blocks)
        if len(layout.workers) == 2
        and layout.gpu_layers == profile.n_layers
        and not check_layout(where, dep, profile, layout, config)
    }
    assert counts == {3}
    instance = build_instance(where, dep, profile, config)
    assert fewest_gpus(instance, 2, profile.n_layers) == 3
    assert fewest_gpus(instance.restricted(rpc_slots=1, local_slots=1), 2, profile.n_layers) is None
