"""Column generation's bounds against brute force, on fleets small enough to list every layout.

Every valid layout of every deployment is enumerated (full offloads on any ordered set of GPUs
of one worker, any split of the blocks), the integer master over all of them is the brute-force
optimum, and ``plan_fleet`` with column generation starts from its usual candidates only.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from test_fleet import worker

from layerfit.domain import Cluster, Deployment, DeviceAssignment, GiB, Layout, MemoryProfile, PlannerConfig
from layerfit.domain.fleet import Fleet, FleetConfig, FleetPlan, Placement
from layerfit.fleet import choose, plan_fleet, valid_candidates
from layerfit.fleet.candidates import CandidateSet
from layerfit.fleet.master import priority_weights
from layerfit.fleet.tiers import TIER_NAMES
from layerfit.memory import make_layout

PLANNER = PlannerConfig(time_limit_s=2.0, num_search_workers=1)
EXACT = FleetConfig(time_limit_s=30.0, executor="serial", num_search_workers=1, column_generation=False)
WITH_CG = FleetConfig(
    time_limit_s=20.0, executor="serial", num_search_workers=1, sequential_seed=None, pricing_time_limit_s=5.0
)
N_BLOCKS = 4


def deployment(name: str, size_gib: int, replicas: int, priority: int) -> Deployment:
    # no CPU offload, no distribution: every valid layout is a full offload on one worker's GPUs
    profile = MemoryProfile.uniform(N_BLOCKS, size_gib * GiB // N_BLOCKS, 0, output_weight_bytes=GiB // 2)
    return Deployment(name=name, profile=profile, replicas=replicas, priority=priority, cpu_offloading=False)


def splits(n: int, k: int) -> list[tuple[int, ...]]:
    """Blocks over ``k`` devices: every device but the last holds one at least."""
    return [(*cuts, n - sum(cuts)) for cuts in itertools.product(range(1, n + 1), repeat=k - 1) if sum(cuts) <= n]


def every_layout(cluster: Cluster, n_blocks: int) -> list[Layout]:
    layouts = []
    for w in cluster.workers:
        for k in range(1, len(w.gpus) + 1):
            for gpus in itertools.permutations(w.gpus, k):
                for blocks in splits(n_blocks, k):
                    devices = [
                        DeviceAssignment(worker=w.name, gpu_index=g.index, blocks=b)
                        for g, b in zip(gpus, blocks, strict=True)
                    ]
                    layouts.append(make_layout(w.name, n_blocks, devices, PLANNER.offload_order))
    return layouts


def all_columns(fleet: Fleet) -> list[CandidateSet]:
    layouts = every_layout(fleet.cluster, N_BLOCKS)
    return [valid_candidates(fleet.cluster, d, d.profile, PLANNER, layouts) for d in fleet.deployments]  # type: ignore[arg-type]


def brute_force(fleet: Fleet) -> FleetPlan:
    profiles = {d.name: d.profile for d in fleet.deployments if d.profile is not None}
    return choose(fleet, profiles, all_columns(fleet), EXACT, PLANNER)


def knapsack_bound(fleet: Fleet, columns: list[CandidateSet]) -> float:
    """Fractional knapsack over the total VRAM, each replica at least its smallest layout's VRAM."""
    weights = priority_weights(fleet.deployments)
    room = float(sum(g.allocatable_vram_bytes for w in fleet.cluster.workers for g in w.gpus))
    items = []
    for d, options in zip(fleet.deployments, columns, strict=True):
        if options:
            size = min(sum(c.total_bytes for c in claims.devices) for _, claims in options)
            items += [(weights[d.name] / size, size, weights[d.name])] * d.replicas
    total = 0.0
    for _density, size, weight in sorted(items, reverse=True):
        take = min(1.0, room / size)
        total += take * weight
        room -= take * size
        if room <= 0:
            break
    return total


@st.composite
def small_fleets(draw: st.DrawFn) -> Fleet:
    n_workers = draw(st.integers(2, 3))
    gpus = [draw(st.lists(st.sampled_from([8, 12, 16, 24]), min_size=1, max_size=2)) for _ in range(n_workers)]
    workers = tuple(worker(f"w{i}", *sizes) for i, sizes in enumerate(gpus))
    deployments = tuple(
        deployment(
            f"d{i}", draw(st.sampled_from([6, 10, 14, 20, 28])), draw(st.integers(1, 2)), draw(st.integers(0, 1))
        )
        for i in range(draw(st.integers(2, 4)))
    )
    return Fleet(cluster=Cluster(workers=workers), deployments=deployments)


@settings(max_examples=25)
@given(small_fleets())
def test_bounds_against_brute_force(fleet: Fleet) -> None:
    best = brute_force(fleet)
    assert best.status.value == "optimal"
    plan = plan_fleet(fleet, WITH_CG, PLANNER)
    placed, layers = plan.bounds[:2]
    assert placed.over == "all layouts" and layers.over == "all layouts"
    optimum = best.objective[:2]
    # no plan is better than the optimum; the bounds are never below it
    assert plan.objective[:2] <= optimum
    assert placed.bound >= optimum[0] - 1e-6
    assert layers.bound >= optimum[1] - 1e-6 and layers.placed_floor <= optimum[0]
    # and never above the trivial capacity bounds
    trivial = sum(priority_weights(fleet.deployments)[d.name] * d.replicas for d in fleet.deployments)
    assert placed.bound <= trivial + 1e-6
    if placed.closed:
        assert placed.bound <= knapsack_bound(fleet, all_columns(fleet)) + 1e-6
    # every tier, in its own units; moves and GPUs: a lower bound (over all layouts:
    # ``test_fleet_later_bounds``), never above the count, or none
    assert [b.tier for b in plan.bounds] == list(TIER_NAMES)
    assert plan.bounds[2].value == -plan.objective[2]
    assert plan.bounds[3].value == len({(d.worker, d.gpu_index) for p in plan.placements for d in p.layout.devices})
    for tier in plan.bounds:
        assert tier.bound is None or (tier.gap is not None and 0 <= tier.gap <= 1)
    for tier in plan.bounds[2:]:
        assert tier.bound is None or tier.bound <= tier.value + 1e-6
    # where column generation closes the gap, the plan is the brute-force optimum
    if placed.gap == 0:
        assert plan.objective[0] == optimum[0]
        if layers.gap == 0:
            assert plan.objective[:2] == optimum


def test_pricing_finds_the_layout_no_generator_proposes() -> None:
    # One worker with GPUs of 24, 12 and 12 GiB; a (20.5 GiB) and b (23.5 GiB) each fit on the 24 GiB
    # GPU alone, or split over the two 12 GiB GPUs, a split no candidate generator proposes (they
    # try the largest GPUs first). Column generation prices it and places both.
    fleet = Fleet(
        cluster=Cluster(workers=(worker("w", 24, 12, 12),)),
        deployments=(deployment("a", 20, 1, 0), deployment("b", 23, 1, 0)),
    )
    without = plan_fleet(fleet, WITH_CG.model_copy(update={"column_generation": False}), PLANNER)
    assert len(without.placements) == 1 and without.bounds[0].over == "candidates"
    plan = plan_fleet(fleet, WITH_CG, PLANNER)
    assert len(plan.placements) == 2
    # one takes the 24 GiB GPU, the other both 12 GiB GPUs (with or without what is left of the
    # 24 GiB one: the same tiers)
    alone, split = sorted(({d.gpu_index for d in p.layout.devices} for p in plan.placements), key=len)
    assert alone == {0} and {1, 2} <= split
    placed = plan.bounds[0]
    assert placed.over == "all layouts" and placed.closed and placed.gap == 0.0 and placed.columns_added >= 1


@settings(max_examples=15)
@given(
    small_fleets(),
    st.lists(st.sampled_from([0.0, 0.0, 1e-4, 1e-3, 0.05]), min_size=6, max_size=6),
    st.sampled_from([0.0, 1.0]),
    st.lists(st.sampled_from([0.0, 0.0, 0.3, 1.5, 4.0]), min_size=9, max_size=9),
    st.sampled_from([5.0, 1e-4]),
)
def test_pricing_against_every_layout(
    fleet: Fleet, gpu_prices: list[float], layer_value: float, opening: list[float], limit: float
) -> None:
    # a problem cut short (deterministic limit 1e-4) still bounds every layout
    from layerfit.fleet.prices import Prices, claim_value
    from layerfit.fleet.pricing import price

    gpus = [(w.name, g.index) for w in fleet.cluster.workers for g in w.gpus]
    workers = [w.name for w in fleet.cluster.workers]
    prices = Prices(
        gpu=dict(zip(gpus, gpu_prices, strict=False)),
        layer_value=layer_value,
        gpu_open=dict(zip(gpus, opening, strict=False)),
        worker_open=dict(zip(workers, opening[6:], strict=False)),
    )
    for d, options in zip(fleet.deployments, all_columns(fleet), strict=True):
        assert d.profile is not None
        priced = price(fleet.cluster, d, d.profile, PLANNER, prices, limit)
        assert priced.complete
        if not options:  # proven to have no layout, unless cut short
            assert not priced.layouts and (priced.bound == float("-inf") or not priced.proven)
            continue
        best = max(claim_value(fleet.cluster, prices, layout, claims) for layout, claims in options)
        assert priced.bound >= best - 1e-9
        if priced.proven:
            (found,) = priced.layouts
            assert found in options
            assert claim_value(fleet.cluster, prices, *found) >= best - 2e-3


def test_pins_bound_the_lp() -> None:
    # Workers of one GPU each, 24 and 12 GiB: a (20.5 GiB) fits only on the 24 GiB GPU, b (10.5 GiB)
    # on either, neither across workers. With b pinned on the 24 GiB GPU a cannot be placed: the LP
    # with the pin as a lower bound proves the plan (one replica) optimal; without it, it bounds two.
    cluster = Cluster(workers=(worker("w", 24), worker("v", 12)))
    a, b = deployment("a", 20, 1, 0), deployment("b", 10, 1, 0)
    whole = [DeviceAssignment(worker="w", gpu_index=0, blocks=N_BLOCKS)]
    on_big = make_layout("w", N_BLOCKS, whole, PLANNER.offload_order)
    free = Fleet(cluster=cluster, deployments=(a, b))
    assert len(plan_fleet(free, WITH_CG, PLANNER).placements) == 2
    pinned = free.model_copy(update={"current": (Placement(deployment="b", layout=on_big, pinned=True),)})
    plan = plan_fleet(pinned, WITH_CG, PLANNER)
    assert [p.deployment for p in plan.placements] == ["b"]
    placed = plan.bounds[0]
    assert placed.over == "all layouts" and placed.bound < 2 and placed.gap == 0.0
