"""One deadline for every stage of plan_fleet, and pricing that never makes the plan worse than the
master over the candidates alone."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fleet_builders import cluster_of

from layerfit import heuristics
from layerfit.budget.deadline import Deadline
from layerfit.domain import Cluster, Deployment, GiB, Gpu, MemoryProfile, PlannerConfig, ReasonKind, Status, Worker
from layerfit.domain.fleet import MAXIMISED_TIERS, Fleet, FleetConfig, FleetPlan
from layerfit.errors import SolverError
from layerfit.fleet import colgen, plan_fleet, plan_sequential
from layerfit.fleet import plan as fleet_plan
from layerfit.fleet.candidates import group_candidates

PLANNER = PlannerConfig(time_limit_s=2.0, num_search_workers=1)
CONFIG = FleetConfig(time_limit_s=10.0, executor="serial", num_search_workers=1)


def fleet() -> Fleet:
    deployments = tuple(
        Deployment(name=f"d{i}", profile=MemoryProfile.uniform(4, size * GiB // 4, 0), replicas=1, cpu_offloading=False)
        for i, size in enumerate([20, 23, 10])
    )
    return Fleet(cluster=cluster_of([(24, 12, 12), (16,)]), deployments=deployments)


def test_sequential_placement_stops_at_its_deadline() -> None:
    spread = PlannerConfig(time_limit_s=2.0)
    calls: list[str] = []

    def planner(cluster: Cluster, deployment: Deployment, profile: MemoryProfile) -> Any:
        calls.append(deployment.name)
        return heuristics.plan(cluster, deployment, spread, profile).layout

    placed, unplaced = plan_sequential(fleet(), planner, deadline=Deadline.after(0.0))
    assert not placed and not calls and len(unplaced) == 3
    placed, unplaced = plan_sequential(fleet(), planner, deadline=Deadline.after(60.0))
    assert calls == ["d0", "d1", "d2"] and len(placed) + len(unplaced) == 3


def test_a_seed_cut_short_is_reported() -> None:
    plan = plan_fleet(fleet(), CONFIG.model_copy(update={"time_limit_s": 1e-6}), PLANNER)
    assert plan.stats[0].details["sequential_seed"] == "cut short at 0 replicas"
    assert plan_fleet(fleet(), CONFIG, PLANNER).stats[0].details["sequential_seed"] == "complete"


def test_the_master_over_all_columns_never_replaces_a_better_first_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    choose = fleet_plan.choose
    calls: list[int] = []

    def worse_second(*args: Any, **kwargs: Any) -> FleetPlan:
        plan = choose(*args, **kwargs)
        calls.append(len(calls))
        if len(calls) == 1:
            # the first plan is not proven, so the master runs again over all columns
            return plan.model_copy(update={"status": Status.FEASIBLE})
        return plan.model_copy(update={"placements": plan.placements[:1], "objective": (1,)})

    monkeypatch.setattr(fleet_plan, "choose", worse_second)
    plan = plan_fleet(fleet(), CONFIG, PLANNER)
    assert len(calls) == 2
    assert plan.objective[0] > 1 and len(plan.placements) > 1


def test_candidate_generation_stops_at_its_deadline_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    two = Worker(
        id=2,
        name="w2",
        total_ram_bytes=64 * GiB,
        allocatable_ram_bytes=64 * GiB,
        gpus=tuple(Gpu(index=g, total_vram_bytes=12 * GiB, allocatable_vram_bytes=12 * GiB) for g in range(2)),
    )
    cluster = Cluster(workers=(*fleet().cluster.workers, two))

    def sized(name: str, gib: int) -> Deployment:
        profile = MemoryProfile.uniform(4, gib * GiB // 4, 0)
        return Deployment(name=name, profile=profile, replicas=1, cpu_offloading=False)

    def on_w2(options: Any) -> bool:
        return any(layout.main_worker == "w2" for layout, _ in options)

    members = (((), 0, 1),)
    one_gpu = sized("one", 14)  # fits on one GPU of w0 or w1, or on w2's two GPUs
    assert one_gpu.profile is not None
    (whole,), cut = group_candidates(cluster, one_gpu, one_gpu.profile, PLANNER, members)
    assert not cut and on_w2(whole)
    (short,), cut = group_candidates(cluster, one_gpu, one_gpu.profile, PLANNER, members, until=time.time() - 1)
    assert cut and short and not on_w2(short)
    # two single-GPU layouts (w0, w1) for three replicas: w2's two-GPU layout is still looked for
    (three,), _ = group_candidates(cluster, one_gpu, one_gpu.profile, PLANNER, (((), 0, 3),), until=time.time() - 1)
    assert on_w2(three) and len(three) == 3
    # past the deadline a deployment with no candidate yet still gets one
    multi = sized("multi", 30)
    assert multi.profile is not None
    (found,), _ = group_candidates(cluster, multi, multi.profile, PLANNER, members, until=time.time() - 1)
    assert found and all(len(layout.devices) > 1 for layout, _ in found)
    # in plan_fleet: candidates get no time at all; the plan says so
    monkeypatch.setattr(fleet_plan, "CANDIDATE_SHARE", 0.0)
    planned = Fleet(cluster=cluster, deployments=(one_gpu,))
    plan = plan_fleet(planned, CONFIG, PLANNER)
    assert plan.stats[0].details["candidate_generation"] == "cut short at its share of the time limit for 1 deployments"
    skipped = [r for r in plan.reasons if r.kind is ReasonKind.STRATEGY_SKIPPED and r.resource == "time_limit_s"]
    assert len(skipped) == 1 and "candidate generation" in skipped[0].message and len(plan.placements) == 1
    monkeypatch.setattr(fleet_plan, "CANDIDATE_SHARE", 0.3)
    assert plan_fleet(planned, CONFIG, PLANNER).stats[0].details["candidate_generation"] == "complete"


def test_an_lp_cut_short_keeps_every_bound_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    limits: list[float | None] = []

    def no_lp_in_time(*args: Any, time_limit_s: float | None = None, **kwargs: Any) -> Any:
        limits.append(args[3] if len(args) > 3 else time_limit_s)
        raise SolverError("GLOP stopped at its time limit")

    monkeypatch.setattr(colgen, "solve_lp", no_lp_in_time)
    plan = plan_fleet(fleet(), CONFIG, PLANNER)
    assert limits, "column generation never asked for an LP"
    assert all(limit is not None and 0 <= limit <= CONFIG.time_limit_s for limit in limits)
    for tier in plan.bounds:
        if tier.bound is not None:
            assert tier.bound >= tier.value if tier.tier in MAXIMISED_TIERS else tier.bound <= tier.value
