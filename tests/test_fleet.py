"""Fleet planning: the master problem over given candidates, move ordering, pins, priorities."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from layerfit.check import capacity_reasons
from layerfit.domain import (
    Cluster,
    Deployment,
    GiB,
    Gpu,
    Layout,
    MemoryProfile,
    PlannerConfig,
    ReasonKind,
    Status,
    Worker,
)
from layerfit.domain.fleet import Fleet, FleetConfig, FleetPlan, Placement
from layerfit.errors import InputError
from layerfit.fleet import choose, priority_weights, valid_candidates
from layerfit.io.documents import load_model
from layerfit.planning.layouts import single_gpu_layouts

CONFIG = FleetConfig(time_limit_s=5.0, executor="serial", num_search_workers=1)
PLANNER = PlannerConfig()


def worker(name: str, *vram_gib: int, ram_gib: int = 256) -> Worker:
    gpus = tuple(Gpu(index=i, total_vram_bytes=v * GiB, allocatable_vram_bytes=v * GiB) for i, v in enumerate(vram_gib))
    return Worker(id=name, name=name, total_ram_bytes=ram_gib * GiB, allocatable_ram_bytes=ram_gib * GiB, gpus=gpus)


def model(name: str, size_gib: int, *, replicas: int = 1, priority: int = 0) -> Deployment:
    # 8 blocks of size/8 GiB, nothing else: a single-GPU layout needs exactly size_gib.
    profile = MemoryProfile.uniform(8, size_gib * GiB // 8, 0)
    return Deployment(name=name, profile=profile, replicas=replicas, priority=priority)


def solve(fleet: Fleet) -> FleetPlan:
    profiles = {d.name: d.profile for d in fleet.deployments if d.profile is not None}
    candidates = [
        valid_candidates(
            fleet.cluster,
            d,
            profiles[d.name],
            PLANNER,
            [
                *(p.layout for p in fleet.current if p.deployment == d.name),
                *single_gpu_layouts(fleet.cluster, d, profiles[d.name], PLANNER),
            ],
        )
        for d in fleet.deployments
    ]
    return choose(fleet, profiles, candidates, CONFIG, PLANNER)


def replay(fleet: Fleet, plan: FleetPlan) -> None:
    """Apply the moves in order; capacity must hold after every step."""
    profiles = {d.name: d.profile for d in fleet.deployments}
    from layerfit.memory import claims

    running = {(p.deployment, p.replica): claims(profiles[p.deployment], p.layout) for p in fleet.current}  # type: ignore[arg-type]
    target = {(p.deployment, p.replica): p.claims for p in plan.placements}
    for move in plan.moves:
        key = (move.deployment, move.replica)
        if move.action == "stop":
            del running[key]
        else:
            running[key] = target[key]
        assert not capacity_reasons(fleet.cluster, *running.values()), f"over capacity after step {move.step}"
    assert set(running) == set(target)


def test_joint_placement_beats_arrival_order() -> None:
    # GPUs of 16 and 8 GiB. Arrival order a (8 GiB) then b (16 GiB): one at a time, binpack puts a on the
    # 8 GiB GPU only if it looks there first; the joint plan always places both: a on 8, b on 16.
    fleet = Fleet(cluster=Cluster(workers=(worker("w", 16, 8),)), deployments=(model("a", 8), model("b", 16)))
    plan = solve(fleet)
    assert plan.status is Status.OPTIMAL and not plan.unplaced
    where = {p.deployment: p.layout.devices[0].gpu_index for p in plan.placements}
    assert where == {"a": 1, "b": 0}


def test_priority_wins_room() -> None:
    # One 16 GiB GPU; low (12 GiB, priority 0) and high (12 GiB, priority 5): only high fits.
    fleet = Fleet(
        cluster=Cluster(workers=(worker("w", 16),)), deployments=(model("low", 12), model("high", 12, priority=5))
    )
    plan = solve(fleet)
    assert [p.deployment for p in plan.placements] == ["high"]
    assert [u.deployment for u in plan.unplaced] == ["low"]


def test_priority_weights_dominate() -> None:
    deployments = [model("a", 1, replicas=3), model("b", 1, replicas=2, priority=1), model("c", 1, priority=7)]
    weights = priority_weights(deployments)
    # priority 0: weight 1 (3 replicas = 3); priority 1: 3 + 1 = 4 (2 replicas = 8); priority 7: 3 + 8 + 1 = 12
    assert weights == {"a": 1, "b": 4, "c": 12}


def test_pins_are_honoured_and_broken_pins_reported() -> None:
    cluster = Cluster(workers=(worker("w", 16, 16),))
    base = Fleet(cluster=cluster, deployments=(model("a", 8),))
    free_plan = solve(base)
    (placed,) = free_plan.placements
    other_gpu = 1 - placed.layout.devices[0].gpu_index
    pinned_layout = placed.layout.model_copy(
        update={"devices": (placed.layout.devices[0].model_copy(update={"gpu_index": other_gpu}),)}
    )
    pinned = Fleet(
        cluster=cluster,
        deployments=(model("a", 8),),
        current=(Placement(deployment="a", layout=pinned_layout, pinned=True),),
    )
    plan = solve(pinned)
    assert plan.placements[0].layout == pinned_layout and not plan.moves
    # the pinned worker shrank: the pin is reported, and the replica is placed elsewhere if possible
    small = Cluster(workers=(worker("w", 16, 4),)) if other_gpu == 1 else Cluster(workers=(worker("w", 4, 16),))
    shrunk = Fleet(
        cluster=small,
        deployments=(model("a", 8),),
        current=(Placement(deployment="a", layout=pinned_layout, pinned=True),),
    )
    plan = solve(shrunk)
    assert [r.kind for r in plan.reasons] == [ReasonKind.PIN_BROKEN]
    assert len(plan.placements) == 1 and plan.placements[0].layout != pinned_layout
    replay(shrunk, plan)


def test_worker_failure_moves_only_what_must_move() -> None:
    cluster = Cluster(workers=(worker("w1", 24), worker("w2", 24), worker("w3", 24)))
    fleet = Fleet(cluster=cluster, deployments=(model("a", 10), model("b", 10), model("c", 10)))
    first = solve(fleet)
    current = tuple(Placement(deployment=p.deployment, replica=p.replica, layout=p.layout) for p in first.placements)
    # the fewest GPUs: two 10 GiB models share one 24 GiB GPU, the third has one of its own
    assert len({p.layout.main_worker for p in first.placements}) == 2
    lost = next(p.layout.main_worker for p in first.placements)
    on_lost = sorted(p.deployment for p in first.placements if p.layout.main_worker == lost)
    survivors = Cluster(workers=tuple(w for w in cluster.workers if w.name != lost))
    after = solve(Fleet(cluster=survivors, deployments=fleet.deployments, current=current))
    assert not after.unplaced
    assert sorted(p.deployment for p in after.placements if p.moved) == on_lost
    # the replicas on the lost worker are gone already: only starts, nothing else is touched
    assert sorted(m.deployment for m in after.moves) == on_lost and {m.action for m in after.moves} == {"start"}


def test_duplicate_names_and_unknown_placements_rejected() -> None:
    cluster = Cluster(workers=(worker("w", 16),))
    with pytest.raises(ValidationError, match="duplicate deployment name 'a'"):
        Fleet(cluster=cluster, deployments=(model("a", 1), model("a", 2)))
    with pytest.raises(ValidationError, match="placement of unknown deployment 'ghost'"):
        Fleet(
            cluster=cluster,
            deployments=(model("a", 1),),
            current=(Placement(deployment="ghost", layout=Layout(main_worker="w", n_blocks=8)),),
        )
    with pytest.raises(InputError, match="duplicate deployment name"):
        load_model(
            Fleet,
            {
                "cluster": {"workers": []},
                "deployments": [
                    {"name": "a", "profile": {"block_weight_bytes": [1], "block_kv_bytes": [0]}},
                    {"name": "a", "profile": {"block_weight_bytes": [1], "block_kv_bytes": [0]}},
                ],
            },
            "fleet.yaml",
        )


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    workers = tuple(
        worker(f"w{i}", *draw(st.lists(st.sampled_from([8, 16, 24]), min_size=1, max_size=3)))
        for i in range(draw(st.integers(1, 3)))
    )
    deployments = tuple(
        model(
            f"d{i}",
            draw(st.sampled_from([2, 4, 6, 8, 12, 20])),
            replicas=draw(st.integers(1, 3)),
            priority=draw(st.integers(0, 2)),
        )
        for i in range(draw(st.integers(1, 5)))
    )
    return Fleet(cluster=Cluster(workers=workers), deployments=deployments)


def needs(fleet: Fleet, name: str) -> int:
    deployment = next(d for d in fleet.deployments if d.name == name)
    assert deployment.profile is not None
    return sum(deployment.profile.block_weight_bytes)


@given(fleets())
def test_fleet_properties(fleet: Fleet) -> None:
    plan = solve(fleet)
    assert plan.status is Status.OPTIMAL
    # no device over capacity with all claims added up
    assert not capacity_reasons(fleet.cluster, *(p.claims for p in plan.placements))
    # a higher priority replica is never left out while a lower priority one with the same or larger needs is placed
    priority = {d.name: d.priority for d in fleet.deployments}
    for missing in plan.unplaced:
        for placed in plan.placements:
            if priority[placed.deployment] < priority[missing.deployment]:
                assert needs(fleet, placed.deployment) < needs(fleet, missing.deployment)
    # re-planning the optimal fleet moves nothing, and replaying moves never exceeds capacity
    current = tuple(Placement(deployment=p.deployment, replica=p.replica, layout=p.layout) for p in plan.placements)
    again = solve(fleet.model_copy(update={"current": current}))
    assert again.moves == () and not any(p.moved for p in again.placements)
    replay(fleet, plan)


def test_swap_needs_one_stop_first_and_says_so() -> None:
    from layerfit.domain import DeviceAssignment
    from layerfit.fleet import order_moves
    from layerfit.memory import claims, make_layout

    cluster = Cluster(workers=(worker("w", 16, 16),))
    a, b = model("a", 12), model("b", 12)
    assert a.profile is not None and b.profile is not None

    def on(gpu: int) -> Layout:
        return make_layout("w", 8, [DeviceAssignment(worker="w", gpu_index=gpu, blocks=8)])

    current = [("a", 0, on(0), claims(a.profile, on(0))), ("b", 0, on(1), claims(b.profile, on(1)))]
    target = [("a", 0, on(1), claims(a.profile, on(1))), ("b", 0, on(0), claims(b.profile, on(0)))]
    moves = order_moves(cluster, current, target)
    # a is stopped first (neither start fits next to both), b moves without downtime, a restarts after.
    assert [(m.action, m.deployment, m.downtime) for m in moves] == [
        ("stop", "a", False),
        ("start", "b", False),
        ("stop", "b", False),
        ("start", "a", True),
    ]


def test_fast_single_gpu_candidates_equal_the_memory_model() -> None:
    from layerfit.fleet.single_gpu import single_gpu_candidates

    cluster = Cluster(
        workers=(worker("w", 16, 8, 4), worker("u", 24, ram_gib=20).model_copy(update={"unified_memory": True}))
    )
    for deployment in (model("a", 6), model("b", 12), model("c", 18)):
        assert deployment.profile is not None
        slow = valid_candidates(
            cluster,
            deployment,
            deployment.profile,
            PLANNER,
            single_gpu_layouts(cluster, deployment, deployment.profile, PLANNER),
        )
        assert single_gpu_candidates(cluster, deployment, deployment.profile, PLANNER, 0, 0) == list(slow)


@pytest.mark.parametrize("seed", [1, 4, 5])
def test_joint_plan_is_never_behind_one_at_a_time(seed: int) -> None:
    """The one-at-a-time placement (GPUStack's way) seeds the joint plan: never fewer replicas or weight."""
    import random

    from layerfit import heuristics
    from layerfit.domain import Policy
    from layerfit.fleet import plan_fleet, plan_sequential

    rng = random.Random(seed)
    workers = tuple(worker(f"w{i}", *rng.choices([16, 24, 48], k=2)) for i in range(4))
    deployments = tuple(
        model(f"d{i}", rng.choice([4, 6, 10, 14, 20, 30]), replicas=rng.choice([1, 2])) for i in range(10)
    )
    fleet = Fleet(cluster=Cluster(workers=workers), deployments=deployments)
    spread = PlannerConfig(policy=Policy.SPREAD)
    sequential, _ = plan_sequential(fleet, lambda c, d, p: heuristics.plan(c, d, spread, p).layout)
    joint = plan_fleet(fleet, FleetConfig(time_limit_s=2.0, executor="serial", num_search_workers=1), PLANNER)
    assert len(joint.placements) >= len(sequential)
    assert not capacity_reasons(fleet.cluster, *(p.claims for p in joint.placements))
