"""The same input gives the same plan when a stage is cut short by its work budget, not only when
every stage finishes: budgets are counted work (CP-SAT's deterministic time, counted steps), the
wall clock only a safety stop that the plan reports when it fires."""

from __future__ import annotations

import pytest
from fleet_builders import alike_gpus_fleet
from load_emulation import planner_under, ticking_clock

from layerfit.budget import fleet as budget
from layerfit.domain import PlannerConfig, ReasonKind
from layerfit.domain.fleet import Executor, Fleet, FleetConfig, FleetPlan
from layerfit.fleet import plan_fleet

PLANNER = PlannerConfig(time_limit_s=2.0, num_search_workers=1)
CONFIG = FleetConfig(time_limit_s=60.0, processes=2, num_search_workers=1)
"""A wall-clock limit far above the work budget the tests give (``budget.WORK_SHARE``), so that
the safety stop does not fire even on a loaded machine."""


def ten_workers() -> Fleet:
    """Ten workers of two alike GPUs and sixteen deployments: the GPUs tier is searched by groups
    of workers, and a short work budget stops that search before it converges."""
    return alike_gpus_fleet(
        3, 10, 16, replicas=(1, 2, 3), priorities=(0, 1), cpu_offload_share=0.0, distributed_share=0.0
    )


def key(plan: FleetPlan) -> tuple[object, ...]:
    details = {k: v for k, v in plan.stats[0].details.items() if not k.endswith("_s") and k != "executor"}
    return plan.placements, plan.unplaced, plan.moves, plan.objective, plan.bounds, plan.reasons, details


def test_a_search_cut_by_its_work_budget_gives_the_same_plan_serially_and_on_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(budget, "WORK_SHARE", 0.1)  # 6 nominal seconds of the 60 s limit (at 9 it converges)
    fleet = ten_workers()
    serial = [plan_fleet(fleet, CONFIG.model_copy(update={"executor": Executor.SERIAL}), PLANNER) for _ in range(2)]
    pool = plan_fleet(fleet, CONFIG.model_copy(update={"executor": Executor.LOCAL}), PLANNER)
    details = serial[0].stats[0].details
    # the group search ran several groups and was cut by its budget, not by the clock
    ended, groups = str(details["footprint_search"]).split(" after ")
    assert ended == "budget" and int(groups.split()[0]) >= 2
    assert serial[0].stats[0].safety_stops == ()
    assert key(serial[1]) == key(serial[0])
    assert key(pool) == key(serial[0])


def test_the_plan_says_when_the_safety_stop_fired(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "WORK_SHARE", 1000.0)  # a budget the clock always ends first
    config = CONFIG.model_copy(update={"time_limit_s": 1.0, "executor": Executor.SERIAL})
    plan = plan_fleet(ten_workers(), config, PLANNER)
    stops = ", ".join(plan.stats[0].safety_stops)
    assert stops
    said = [r for r in plan.reasons if r.kind is ReasonKind.STRATEGY_SKIPPED and "safety stop" in r.message]
    assert len(said) == 1 and stops in said[0].message and "differ from run to run" in said[0].message


def test_a_cp_sat_solve_stopped_by_the_clock_is_a_safety_stop() -> None:
    from ortools.sat.python import cp_model

    from layerfit.budget.deadline import Deadline

    model = cp_model.CpModel()
    xs = [model.new_int_var(0, 40, f"x{i}") for i in range(40)]
    for i in range(39):
        model.add(xs[i] + xs[i + 1] <= 41 + i % 3)
    model.add_all_different(xs)
    model.maximize(sum((i % 7 + 1) * x for i, x in enumerate(xs)))
    for wall_s, fires in ((1e-3, True), (60.0, False)):
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        spent = budget.Budget(1.0, Deadline.after(wall_s))
        spent.limit(solver, 0.05 / budget.DETERMINISTIC_PER_S)
        status = solver.solve(model)
        spent.charge(solver, status, "stage")
        assert (spent.stops == ["stage"]) is fires
        assert spent.spent_s == pytest.approx(solver.deterministic_time / budget.DETERMINISTIC_PER_S)


def distributed_fleet() -> Fleet:
    """A 60 GiB deployment that fits on no worker alone: its candidates are the single-deployment
    planner's distributed layouts."""
    from fleet_builders import cluster_of

    from layerfit.domain import Deployment, GiB, MemoryProfile

    big = Deployment(
        name="big",
        profile=MemoryProfile.uniform(16, 60 * GiB // 16, 0),
        distributed_inference_across_workers=True,
    )
    return Fleet(cluster=cluster_of([(24, 24), (16,), (48, 8)]), deployments=(big,))


def test_the_planner_cut_by_its_own_safety_stop_is_a_safety_stop() -> None:
    # The planner's wall clock (not the fleet's) ends its heuristic and its solver: the layouts it
    # gives may differ from run to run, and the plan says so as it does for the fleet's own stages
    # (its work budget would cut it at the same point on every run: no safety stop)
    config = CONFIG.model_copy(update={"executor": Executor.SERIAL})
    with planner_under(lambda: ticking_clock(86_400.0)):  # every deadline past by the next read
        cut = plan_fleet(distributed_fleet(), config, PlannerConfig(time_limit_s=30.0))
    stops = ", ".join(cut.stats[0].safety_stops)
    assert "single-deployment planner" in stops
    said = [r for r in cut.reasons if r.kind is ReasonKind.STRATEGY_SKIPPED and "safety stop" in r.message]
    assert len(said) == 1 and stops in said[0].message
    whole = plan_fleet(distributed_fleet(), config, PlannerConfig(time_limit_s=30.0))
    assert whole.stats[0].safety_stops == () and len(whole.placements) == 1


def test_the_plan_says_when_parallel_search_may_change_it() -> None:
    # Two CP-SAT workers depend on thread timing (fleet_bench's fragmented seed 4 gave two plans in
    # three runs, no safety stop): the plan says so; one worker says nothing
    config = CONFIG.model_copy(update={"executor": Executor.SERIAL, "time_limit_s": 10.0})
    for workers, says in ((2, True), (1, False)):
        plan = plan_fleet(alike_gpus_fleet(0), config.model_copy(update={"num_search_workers": workers}), PLANNER)
        said = [r for r in plan.reasons if r.resource == "num_search_workers"]
        assert bool(said) is says and all("differ from run to run" in r.message for r in said)


def test_a_later_safety_stop_joins_those_the_plan_names() -> None:
    from layerfit.budget.fleet import safety_reason, with_safety_stop
    from layerfit.domain import EngineStats, Status

    stats = EngineStats(engine="fleet", wall_time_s=0.0, status=Status.FEASIBLE, safety_stops=("a", "b"))
    plan = FleetPlan(status=Status.FEASIBLE, stats=(stats,), reasons=(safety_reason(["a", "b"]),))
    joined = with_safety_stop(plan, "c")
    assert joined.stats[0].safety_stops == ("a", "b", "c")
    assert joined.reasons == (safety_reason(["a", "b", "c"]),)
