"""The spread tie-break's bounds against brute force on tiny clusters (``tie_break_bound``,
``ordered_reserve``).

Every layout with every layer on GPUs is enumerated and checked in bytes; its headroom in the
model's units is the least of allocatable VRAM less its claim over its GPUs (the unit is exact on
these sizes).

* ``spread_bound`` is at least the headroom of every valid layout of ``g`` GPUs on ``w`` workers.
* ``pair_bound`` (one main worker, one rpc-server worker, every device order) is at least the
  headroom of every valid layout of that pair; with RAM to spare and no unified memory its order
  and split, where every device holds a block, is a valid layout of exactly that headroom, so the
  bound is the brute-force optimum: one unit more or less fails.
"""

from __future__ import annotations

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from test_solver_properties import SLOW, all_layouts, clusters, profiles

from layerfit.check import check_layout, unified_workers
from layerfit.domain import Cluster, Deployment, DeviceAssignment, Layout, MemoryProfile, PlannerConfig, Policy
from layerfit.memory import claims
from layerfit.solver.model.instance import Instance, build_instance
from layerfit.solver.shortcuts.ordered_reserve import ORDER_LIMIT, pair_bound, pair_orders
from layerfit.solver.shortcuts.tie_break_bound import spread_bound

CONFIG = PlannerConfig(policy=Policy.SPREAD, max_rpc_servers=3, time_limit_s=20.0, seed=0)


def _deployment(profile: MemoryProfile) -> Deployment:
    return Deployment(name="d", profile=profile, cpu_offloading=False, distributed_inference_across_workers=True)


def _headroom(where: Cluster, profile: MemoryProfile, layout: Layout, unit: int) -> int:
    needed = claims(profile, layout, unified_workers(where))
    free = [
        where.worker(claim.worker).gpu(claim.gpu_index).allocatable_vram_bytes - claim.total_bytes
        for claim in needed.devices
    ]
    assert all(f % unit == 0 for f in free)
    return min(free) // unit


def _valid_full_layouts(where: Cluster, dep: Deployment, profile: MemoryProfile) -> list[Layout]:
    return [
        layout
        for layout in all_layouts(where, profile.n_blocks)
        if layout.devices
        and layout.gpu_layers == profile.n_layers
        and check_layout(where, dep, profile, layout, CONFIG) == ()
    ]


def _exact_instance(where: Cluster, dep: Deployment, profile: MemoryProfile) -> Instance:
    instance = build_instance(where, dep, profile, CONFIG)
    assume(instance.scale.exact)
    return instance


@settings(SLOW, max_examples=60)
@given(data=st.data())
def test_the_spread_bound_is_at_least_every_layouts_headroom(data: st.DataObject) -> None:
    profile = data.draw(profiles(max_blocks=4))
    where = data.draw(clusters(max_gpus=4, max_workers=3, top=900))
    dep = _deployment(profile)
    instance = _exact_instance(where, dep, profile)
    best: dict[tuple[int, int], int] = {}
    for layout in _valid_full_layouts(where, dep, profile):
        key = (len(layout.devices), len(layout.workers))
        best[key] = max(best.get(key, -(1 << 62)), _headroom(where, profile, layout, instance.scale.unit_bytes))
    event(f"layout shapes: {len(best)}")
    for (gpus, workers), headroom in best.items():
        for known in (None, headroom - 1, headroom):
            found = spread_bound(instance, gpus, workers, known=known)
            assert found.headroom is not None and found.headroom >= headroom, (gpus, workers, known)
            if found.headroom == headroom:
                event("bound met")


def _roomy(where: Cluster) -> Cluster:
    """``where`` without unified memory and with RAM to spare: only VRAM decides."""
    ram = 1 << 40
    return Cluster(
        workers=tuple(
            w.model_copy(update={"unified_memory": False, "total_ram_bytes": ram, "allocatable_ram_bytes": ram})
            for w in where.workers
        )
    )


@settings(SLOW, max_examples=80)
@given(data=st.data())
def test_the_pair_bound_is_the_best_headroom_of_the_pair(data: st.DataObject) -> None:
    profile = data.draw(profiles(max_blocks=4))
    drawn = data.draw(clusters(max_gpus=4, max_workers=3, top=900))
    roomy = data.draw(st.booleans())
    where = _roomy(drawn) if roomy else drawn
    dep = _deployment(profile)
    instance = _exact_instance(where, dep, profile)
    unit = instance.scale.unit_bytes
    best: dict[tuple[int, str, str], int] = {}
    for layout in _valid_full_layouts(where, dep, profile):
        if len(layout.workers) != 2:
            continue
        (server,) = set(layout.workers) - {layout.main_worker}
        key = (len(layout.devices), layout.main_worker, server)
        best[key] = max(best.get(key, -(1 << 62)), _headroom(where, profile, layout, unit))
    for main, view in enumerate(instance.workers):
        for server, other in enumerate(instance.workers):
            if main == server or not (view.main_ok and other.rpc_ok):
                continue
            for gpus in range(1, 5):
                assert pair_orders(instance, gpus, main, server) <= ORDER_LIMIT
                found = pair_bound(instance, gpus, main, server)
                brute = best.get((gpus, view.name, other.name))
                if brute is not None:
                    assert found is not None and found.reserve >= brute
                if found is None or not roomy or 0 in found.blocks[:-1]:
                    continue
                # every device holds a block: the order and split are a layout, of that headroom
                devices = tuple(
                    DeviceAssignment(worker=d.worker, gpu_index=d.gpu_index, blocks=b)
                    for d, b in zip(found.order.devices, found.blocks, strict=True)
                )
                witness = found.order.model_copy(update={"devices": devices})
                assert check_layout(where, dep, profile, witness, CONFIG) == ()
                assert _headroom(where, profile, witness, unit) >= found.reserve
                assert brute == found.reserve
                event("pair bound is the optimum")
