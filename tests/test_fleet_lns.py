"""The search by groups of workers on the GPUs and workers tier: never worse on any tier, in order,
within every capacity and pin, fewer GPUs where a group allows it, and the same plan every time."""

from __future__ import annotations

from collections import Counter, defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st
from test_fleet import CONFIG, PLANNER, model, worker

from layerfit.budget.deadline import Deadline
from layerfit.domain import Cluster, Deployment
from layerfit.domain.fleet import Fleet
from layerfit.domain.layout import Layout
from layerfit.fleet import valid_candidates
from layerfit.fleet.greedy import greedy
from layerfit.fleet.lns import footprint, improve_footprint
from layerfit.fleet.master import Counts, Master
from layerfit.fleet.tiers import solve_tiers
from layerfit.planning.layouts import single_gpu_layouts


def master_of(fleet: Fleet, pins: dict[str, Counter[Layout]] | None = None) -> Master:
    candidates = [
        valid_candidates(fleet.cluster, d, d.profile, PLANNER, single_gpu_layouts(fleet.cluster, d, d.profile, PLANNER))  # type: ignore[arg-type]
        for d in fleet.deployments
    ]
    return Master(fleet.cluster, fleet.deployments, candidates, {}, pins or {})


def spread(master: Master) -> Counts:
    """Every replica on a GPU of its own while there is one (the fleet's worst footprint)."""
    counts = [[0] * len(row) for row in master.x]
    taken: set[tuple[str, int]] = set()
    for d, deployment in enumerate(master.deployments):
        for _ in range(deployment.replicas):
            for c, (layout, _) in enumerate(master.candidates[d]):
                gpu = (layout.devices[0].worker, layout.devices[0].gpu_index)
                if gpu not in taken:
                    taken.add(gpu)
                    counts[d][c] += 1
                    break
    return counts


def within_capacity(master: Master, counts: Counts) -> bool:
    used: dict[object, int] = defaultdict(int)
    for d, row in enumerate(counts):
        for c, n in enumerate(row):
            for key, n_bytes in master.loads[d][c]:
                used[key] += n * n_bytes
    return all(n_bytes <= master.capacity[key] for key, n_bytes in used.items())


def test_groups_of_workers_pack_a_spread_plan() -> None:
    cluster = Cluster(workers=tuple(worker(f"w{i}", 24) for i in range(8)))
    fleet = Fleet(cluster=cluster, deployments=tuple(model(f"d{i}", 5) for i in range(8)))
    master = master_of(fleet)
    start = spread(master)
    assert footprint(master, start) == 8 * 9 + 8
    packed = improve_footprint(master, start, Deadline.after(30.0))
    assert master.tier_values(packed) == master.tier_values(start) and within_capacity(master, packed)
    # four 5 GiB models share a 24 GiB GPU: two GPUs on two workers at best; groups of four workers get there
    assert footprint(master, packed) == 2 * 9 + 2
    assert improve_footprint(master, start, Deadline.after(30.0)) == packed


def test_pins_stay_where_they_are() -> None:
    cluster = Cluster(workers=tuple(worker(f"w{i}", 24) for i in range(6)))
    fleet = Fleet(cluster=cluster, deployments=tuple(model(f"d{i}", 5) for i in range(6)))
    plain = master_of(fleet)
    start = spread(plain)
    pinned_layout = next(layout for (layout, _), n in zip(plain.candidates[5], start[5], strict=True) if n)
    master = master_of(fleet, {"d5": Counter({pinned_layout: 1})})
    packed = improve_footprint(master, start, Deadline.after(30.0))
    assert master.satisfies_pins(packed) and footprint(master, packed) < footprint(master, start)


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    workers = tuple(
        worker(f"w{i}", *draw(st.lists(st.sampled_from([8, 16, 24]), min_size=1, max_size=2))) for i in range(6)
    )
    deployments: tuple[Deployment, ...] = tuple(
        model(f"d{i}", draw(st.sampled_from([2, 4, 6, 8])), replicas=draw(st.integers(1, 2)), priority=i % 2)
        for i in range(draw(st.integers(2, 6)))
    )
    return Fleet(cluster=Cluster(workers=workers), deployments=deployments)


@settings(max_examples=20, deadline=None)
@given(fleets())
def test_never_worse_on_any_tier(fleet: Fleet) -> None:
    master = master_of(fleet)
    start = greedy(master)
    better = improve_footprint(master, start, Deadline.after(20.0))
    placed, layers, moved = master.tier_values(start)
    assert master.tier_values(better)[:2] == (placed, layers) and master.tier_values(better)[2] <= moved
    assert footprint(master, better) <= footprint(master, start) and within_capacity(master, better)
    # the tiers solved in order with almost no time: never behind the greedy start, in order
    outcome = solve_tiers(master_of(fleet), CONFIG.model_copy(update={"time_limit_s": 0.06}))
    reached = (*master.tier_values(outcome.counts)[:2], -footprint(master, outcome.counts))
    assert reached >= (placed, layers, -footprint(master, start))
