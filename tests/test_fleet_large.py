"""What keeps plan_fleet within its time limit on large fleets: the fast paths give what the
straightforward ones gave, and the stages that may run long consult the deadline."""

from __future__ import annotations

import random
import time
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerfit.budget.deadline import Deadline
from layerfit.budget.fleet import COLUMN_S, Budget
from layerfit.check import capacity_reasons
from layerfit.domain import (
    Cluster,
    Deployment,
    DeviceAssignment,
    GiB,
    Gpu,
    Layout,
    LlamaParams,
    MemoryProfile,
    PlannerConfig,
    Worker,
)
from layerfit.domain.fleet import Fleet, FleetConfig, Move, Placement, ReplicaChange
from layerfit.domain.layout import Claims
from layerfit.errors import SolverError
from layerfit.fleet import colgen, generate_candidates, order_moves, plan_fleet, pricing_bound
from layerfit.fleet import plan as fleet_plan
from layerfit.fleet.candidates import Allowance, budgeted_candidates, identical_groups
from layerfit.fleet.colgen import ColumnGeneration
from layerfit.fleet.generate import single_quotas
from layerfit.fleet.gpu_table import GpuTable
from layerfit.fleet.greedy import greedy
from layerfit.fleet.joint import current_counts
from layerfit.fleet.lp import PLACED, Fleetwide, Goal, solve_lp
from layerfit.fleet.master import Master
from layerfit.fleet.moves import gpu_names
from layerfit.fleet.plan import final_reserve
from layerfit.fleet.prices import Prices
from layerfit.fleet.pricing import Priced, PricingTask, build_cost, relaxed_answer
from layerfit.fleet.pricing_bound import relaxed_bound
from layerfit.fleet.tiers import MODEL_STAGE, solve_tiers
from layerfit.memory import claims, make_layout

Replica = tuple[str, int, Layout, Claims]


def _cluster(rng: random.Random, workers: int) -> Cluster:
    return Cluster(
        workers=tuple(
            Worker(
                id=w,
                name=f"w{w}",
                total_ram_bytes=64 * GiB,
                allocatable_ram_bytes=rng.choice([8, 16, 64]) * GiB,
                unified_memory=rng.random() < 0.2,
                gpus=tuple(
                    Gpu(index=g, total_vram_bytes=24 * GiB, allocatable_vram_bytes=rng.choice([8, 12, 24]) * GiB)
                    for g in range(rng.choice([1, 2, 3]))
                ),
            )
            for w in range(workers)
        )
    )


def _replica(rng: random.Random, cluster: Cluster, name: str, replica: int, gib: int) -> Replica:
    worker = rng.choice(cluster.workers)
    gpu = rng.choice(worker.gpus)
    profile = MemoryProfile.uniform(4, gib * GiB // 4, 0)
    layout = make_layout(worker.name, 4, [DeviceAssignment(worker=worker.name, gpu_index=gpu.index, blocks=4)])
    return name, replica, layout, claims(profile, layout, cluster.unified_names)


def _reference(cluster: Cluster, current: list[Replica], target: list[Replica]) -> tuple[Move, ...]:
    """The ordering as it was written first: every start tried in order against every running replica."""
    running = {(d, r): c for d, r, _, c in current}
    layout_of = {(d, r): lay for d, r, lay, _ in current}
    wanted = {(d, r): (lay, c) for d, r, lay, c in target}
    placed_before = set(running)

    def changes(key: tuple[str, int]) -> bool:
        return key not in wanted or wanted[key][0] != layout_of.get(key)

    stops = [key for key in running if changes(key)]
    starts = [key for key in wanted if key not in running or changes(key)]
    moves: list[Move] = []
    first: set[tuple[str, int]] = set()

    def record(action: Literal["stop", "start"], key: tuple[str, int], layout: Layout) -> None:
        stopping = action == "stop"
        change = ReplicaChange.MOVED if (key in wanted if stopping else key in placed_before) else ReplicaChange.STARTED
        change = ReplicaChange.STOPPED if stopping and key not in wanted else change
        moves.append(
            Move(
                step=len(moves),
                action=action,
                deployment=key[0],
                replica=key[1],
                worker=layout.main_worker,
                gpus=gpu_names(cluster, layout),
                change=change,
                downtime=not stopping and key in first,
            )
        )

    def stop(key: tuple[str, int]) -> None:
        record("stop", key, layout_of[key])
        del running[key]
        stops.remove(key)

    while starts:
        ready = next((k for k in starts if not capacity_reasons(cluster, *running.values(), wanted[k][1])), None)
        if ready is None:
            blocker = next((k for k in starts if k in stops), None) or (stops[0] if stops else None)
            if blocker is None:
                raise SolverError("does not fit")
            stop(blocker)
            first.add(blocker)
            continue
        record("start", ready, wanted[ready][0])
        starts.remove(ready)
        if ready in stops:
            stop(ready)
        running[ready] = wanted[ready][1]
    for key in list(stops):
        stop(key)
    return tuple(moves)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_moves_are_ordered_as_by_trying_every_start_in_turn(seed: int) -> None:
    rng = random.Random(seed)
    cluster = _cluster(rng, rng.randint(1, 4))
    sizes = {f"d{i}": rng.choice([2, 4, 6, 10]) for i in range(4)}
    current = [_replica(rng, cluster, name, r, gib) for name, gib in sizes.items() for r in range(rng.randint(0, 3))]
    target: list[Replica] = []
    for name, gib in sizes.items():  # a target that fits: replicas kept or placed where they fit
        for r in range(rng.randint(0, 3)):
            kept = [c for c in current if c[:2] == (name, r)]
            option = kept[0] if kept and rng.random() < 0.5 else _replica(rng, cluster, name, r, gib)
            if not capacity_reasons(cluster, *(t[3] for t in target), option[3]):
                target.append(option)
    try:
        expected = _reference(cluster, current, target)
    except SolverError:
        with pytest.raises(SolverError):
            order_moves(cluster, current, target)
        return
    assert order_moves(cluster, current, target) == expected


def _priced(rng: random.Random, workers: int) -> tuple[Cluster, Deployment, Prices]:
    cluster = _cluster(rng, workers)
    profile = MemoryProfile.uniform(rng.choice([2, 4, 8]), rng.choice([1, 2, 3]) * GiB, 64 * 2**20)
    deployment = Deployment(
        name="d",
        profile=profile,
        cpu_offloading=rng.random() < 0.5,
        distributed_inference_across_workers=workers > 6,
        params=LlamaParams(n_gpu_layers=rng.choice([None, 1, 3, 9])),
    )
    gpus = [(w.name, g.index) for w in cluster.workers for g in w.gpus]
    prices = Prices(
        gpu={gpu: rng.choice([0.0, 0.0, 1e-4, 1e-3]) for gpu in gpus},
        layer_value=rng.choice([0.0, 1.0, 3.0]),
        gpu_open={gpu: rng.choice([0.0, 0.0, 0.5]) for gpu in gpus},
        worker_open={w.name: rng.choice([0.0, 0.0, 0.5, 2.0]) for w in cluster.workers},
    )
    return cluster, deployment, prices


def _rules(deployment: Deployment) -> tuple[int | None, bool, tuple[bool, ...]]:
    """``relaxed_bound``'s target layers, full offload and offload states."""
    profile = deployment.profile
    assert profile is not None
    target = None if deployment.params.n_gpu_layers is None else min(deployment.params.n_gpu_layers, profile.n_layers)
    full = not deployment.cpu_offloading
    return target, full, (False,) if full or target == profile.n_layers else (False, True)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_pricing_relaxation_passes_over_only_workers_that_cannot_be_best(seed: int) -> None:
    rng = random.Random(seed)
    cluster, deployment, prices = _priced(rng, rng.randint(1, 6))
    profile = deployment.profile
    assert profile is not None
    target, full, partial = _rules(deployment)
    values = [
        pricing_bound._best(pricing_bound._gpus(worker, profile, prices, partial), profile, prices, target, full)
        - prices.worker_open.get(worker.name, 0.0)
        for worker in cluster.workers
    ]
    ceilings = pricing_bound.worker_ceilings(cluster, profile, prices, partial, target, full)
    assert all(ceiling >= value - 1e-9 for ceiling, value in zip(ceilings, values, strict=True))
    # the same value as the best of every worker looked at in turn
    assert relaxed_bound(cluster, deployment, profile, prices) == max(values)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_relaxation_over_many_gpus_from_arrays_is_the_one_gpu_by_gpu(seed: int) -> None:
    rng = random.Random(seed)
    cluster, deployment, prices = _priced(rng, 40)  # distributed; past EXACT_GPUS usable GPUs or not
    profile = deployment.profile
    assert profile is not None
    target, full, partial = _rules(deployment)
    gpus = [gpu for worker in cluster.workers for gpu in pricing_bound._gpus(worker, profile, prices, partial)]
    opened = min(prices.worker_open.get(w.name, 0.0) for w in cluster.workers)
    expected = pricing_bound._best(gpus, profile, prices, target, full) - opened
    assert relaxed_bound(cluster, deployment, profile, prices) == pytest.approx(expected, rel=1e-12, abs=1e-9)


def _fleet(seed: int = 3, workers: int = 4, replicas: int = 2) -> Fleet:
    """Workers of one to three GPUs, four deployments of ``replicas`` replicas, some running now."""
    rng = random.Random(seed)
    cluster = _cluster(rng, workers)
    deployments = tuple(
        Deployment(name=f"d{i}", profile=MemoryProfile.uniform(4, gib * GiB // 4, 0), replicas=replicas)
        for i, gib in enumerate([2, 4, 6, 3])
    )
    current = tuple(
        Placement(deployment=name, replica=r, layout=layout)
        for name, r, layout, _ in (_replica(rng, cluster, "d0", r, 2) for r in range(replicas))
    )
    return Fleet(cluster=cluster, deployments=deployments, current=current)


CONFIG = FleetConfig(time_limit_s=10.0, executor="serial", num_search_workers=1)
PLANNER = PlannerConfig(time_limit_s=2.0, num_search_workers=1)


def test_a_plan_whose_limit_ended_before_it_began_keeps_within_reach_and_says_what_was_cut() -> None:
    fleet = _fleet()
    started = time.perf_counter()
    plan = plan_fleet(fleet, CONFIG, PLANNER, deadline=Deadline(started - 1.0))
    stops = plan.stats[0].safety_stops
    # every stage that checks the clock stopped: no search, no model; the greedy start is the plan
    assert "candidate generation" in stops and MODEL_STAGE in stops
    assert plan.stats[0].details["candidate_generation"].startswith("cut short")
    assert any(r.resource == "time_limit_s" and "safety stop" in r.message for r in plan.reasons)
    # the replicas running now keep their layouts (the only candidates left), and nothing overflows
    assert {(p.deployment, p.replica) for p in plan.placements if p.change is ReplicaChange.KEPT} == {
        ("d0", 0),
        ("d0", 1),
    }
    assert not capacity_reasons(fleet.cluster, *(p.claims for p in plan.placements))
    # and the commands of every placed replica are written
    assert len(plan.commands) == len(plan.placements)
    # the same fleet with its limit ahead: nothing is cut
    planned = plan_fleet(fleet, CONFIG, PLANNER)
    assert planned.stats[0].safety_stops == () and len(planned.placements) > len(plan.placements)


def test_the_master_model_is_not_built_past_its_deadline() -> None:
    fleet = _fleet()
    candidates = [generate_candidates(fleet.cluster, d, d.profile, PLANNER) for d in fleet.deployments]  # type: ignore[arg-type]
    counts = current_counts(fleet)
    assert all(candidates)
    late = Master(fleet.cluster, fleet.deployments, candidates, counts, {}, deadline=Deadline(time.perf_counter()))
    assert not late.built
    built = Master(fleet.cluster, fleet.deployments, candidates, counts, {}, deadline=Deadline.after(60.0))
    assert built.built and built.all_vars()
    # the tiers without a model: the greedy start, nothing proven, the stop named
    budget = Budget.of(10.0)
    outcome = solve_tiers(late, CONFIG, budget)
    assert outcome.counts == greedy(late) and MODEL_STAGE in budget.stops
    assert outcome.proven[0] is False or outcome.values[0] == late.simple_bounds()[0]


def test_past_the_plans_deadline_a_deployment_keeps_only_its_current_layouts() -> None:
    fleet = _fleet()
    d0 = fleet.deployments[0]
    assert d0.profile is not None
    current = tuple(dict.fromkeys(p.layout for p in fleet.current))
    members = ((current, 0, 2, 64),)
    table = GpuTable.of(fleet.cluster)
    (found,), allowance = budgeted_candidates(
        (fleet.cluster, table), (d0, d0.profile, PLANNER, members, Allowance(final=time.time() - 1.0))
    )
    assert allowance.stopped and {layout for layout, _ in found} <= set(current)
    (more,), allowance = budgeted_candidates(
        (fleet.cluster, table), (d0, d0.profile, PLANNER, members, Allowance(final=time.time() + 60.0))
    )
    assert not allowance.stopped and len(more) > len(found)


def test_each_deployment_gets_what_it_needs_and_the_budget_decides_the_rest() -> None:
    replicas = [1, 3, 40]
    # no budget, or no cap: every deployment its limit
    assert single_quotas(replicas, 64, None) == [64, 64, 64]
    assert single_quotas(replicas, 0, 0.0) == [0, 0, 0]
    # no budget left: twice the replicas and two, at most the limit
    assert single_quotas(replicas, 64, 0.0) == [4, 8, 64]
    # a budget for all of them: the limit
    assert single_quotas(replicas, 64, COLUMN_S * 64 * 3) == [64, 64, 64]
    # half of what the rest would cost: half of it each
    floors = 4 + 8 + 64
    half = COLUMN_S * (floors + (60 + 56) / 2)
    assert single_quotas(replicas, 64, half) == [4 + 30, 8 + 28, 64]


def test_the_lp_is_not_built_past_its_time() -> None:
    fleet = _fleet()
    candidates = [generate_candidates(fleet.cluster, d, d.profile, PLANNER) for d in fleet.deployments]  # type: ignore[arg-type]
    profiles = {d.name: d.profile for d in fleet.deployments}
    groups = identical_groups(fleet.deployments, profiles)  # type: ignore[arg-type]
    weights = {d.name: 1 for d in fleet.deployments}
    wide = Fleetwide(fleet.cluster, fleet.deployments, weights, groups)
    assert solve_lp(wide, candidates, Goal(PLACED), 60.0).value > 0
    with pytest.raises(SolverError, match="not built in time"):
        solve_lp(wide, [options * 300 for options in candidates], Goal(PLACED), 0.0)


def test_pricing_searches_only_the_problems_whose_builds_fit_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = _fleet(replicas=3)
    profiles = {d.name: d.profile for d in fleet.deployments}
    candidates = [generate_candidates(fleet.cluster, d, d.profile, PLANNER)[:1] for d in fleet.deployments]  # type: ignore[arg-type]
    weights = {d.name: 1 for d in fleet.deployments}
    searched: list[str] = []

    def counted(cluster: Cluster, task: PricingTask) -> Priced:
        searched.append(task[0].name)
        return relaxed_answer(cluster, task[0], task[1], task[3])

    monkeypatch.setattr(colgen, "pricing_task", counted)
    cg = ColumnGeneration(fleet.cluster, fleet.deployments, profiles, candidates, weights, CONFIG, PLANNER)  # type: ignore[arg-type]
    lp = solve_lp(cg.fleet, cg.columns, Goal(PLACED))
    build = build_cost(fleet.cluster, fleet.deployments[0])
    cg._price_all(lp, budget_s=1e-9, deadline=time.perf_counter() + 60)
    assert searched == []  # no build fits: every problem keeps the relaxation's answer
    cg._price_all(lp, budget_s=2 * build / colgen.BUILD_SHARE, deadline=time.perf_counter() + 60)
    assert 0 < len(searched) <= 2  # two builds fit, in order
    assert cg.work_s >= len(searched) * build


def test_the_reserve_after_the_stages_grows_with_the_replicas() -> None:
    def fleet_of(replicas: int) -> Fleet:
        deployment = Deployment(name="d", profile=MemoryProfile.uniform(4, GiB, 0), replicas=replicas)
        return Fleet(cluster=_cluster(random.Random(1), 2), deployments=(deployment,))

    assert final_reserve(10.0, fleet_of(1)) == pytest.approx(10.0 * fleet_plan.COMMANDS_SHARE)
    assert final_reserve(2.0, fleet_of(1024)) == pytest.approx(1024 * fleet_plan.FINAL_PER_REPLICA_S)
    assert final_reserve(0.2, fleet_of(1024)) == pytest.approx(0.2 * fleet_plan.FINAL_SHARE)
