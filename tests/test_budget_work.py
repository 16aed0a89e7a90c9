"""plan() stops every stage on a work budget, so a loaded machine gives the same plan; the wall
clock is only a safety stop, named when it fires.

Load is emulated by the clock the planner reads (``load_emulation``): each CP-SAT solve seeming to
take 0.3 s longer cut the alternatives' share (a quarter of the time the solve had taken, at least
0.1 s) and the tie-break's (at least 0.5 s) before work budgets.
"""

from __future__ import annotations

import time

import pytest
from load_emulation import planner_under, slow_solves, stable_json, ticking_clock
from test_budget_deadline import DISTRIBUTED, PROFILE, rpc_cluster
from test_fleet_executors import fleet as distributed_fleet

from layerfit.budget.deadline import Deadline
from layerfit.budget.work import Work
from layerfit.domain import Deployment, GiB, MemoryProfile, PlannerConfig, Status
from layerfit.domain.fleet import Executor, FleetConfig
from layerfit.fleet import plan_fleet
from layerfit.planning.planner import plan

SMALL = Deployment(name="small", profile=MemoryProfile.uniform(4, 1 * GiB, 0, output_weight_bytes=1 * GiB))
"""Fits on one GPU of many: alternatives abound."""
LOAD_S = 0.3
"""How much longer each CP-SAT solve seems to take under the emulated load."""


@pytest.mark.parametrize(("deployment", "found"), [(SMALL, 4), (DISTRIBUTED, 2)], ids=["one-gpu", "distributed"])
def test_a_loaded_machine_gives_the_same_plan_json(deployment: Deployment, found: int) -> None:
    # The re-solves for alternatives (and the tie-break) had shares of the elapsed time: under the
    # emulated load the set was cut after one re-solve; their work budgets do not see the clock.
    # (The distributed deployment has two alternatives: a third re-solve proves there is no other.)
    target = rpc_cluster(2, gpus_each=3)
    config = PlannerConfig(time_limit_s=60, alternatives=4)
    idle = plan(target, deployment, config)
    with slow_solves(LOAD_S):
        loaded = plan(target, deployment, config)
    assert len(idle.alternatives) == found and idle.stats[1].details["truncated"] == ""
    assert stable_json(loaded) == stable_json(idle) and loaded.time_cuts == ()


def test_explains_relaxed_plans_are_the_same_under_load() -> None:
    target = rpc_cluster(1)
    too_big = Deployment(name="too-big", profile=PROFILE, cpu_offloading=False)
    config = PlannerConfig(time_limit_s=60)
    idle = plan(target, too_big, config)
    with slow_solves(LOAD_S):
        loaded = plan(target, too_big, config)
    assert idle.relaxations and stable_json(loaded) == stable_json(idle)


def test_a_work_budget_cuts_at_the_same_point_on_every_run() -> None:
    # What a 0.4 s limit gives (0.24 nominal seconds) cuts the heuristic's RPC search and the
    # solver's alternatives: the cuts are named (truncated) but are no safety stop, and a machine
    # slower at every step and every solve (the safety stop far away) cuts them at the same point
    target = rpc_cluster(4)
    config = PlannerConfig(max_rpc_combinations=None)
    idle = plan(target, DISTRIBUTED, config, explain=False, work=Work(0.24, Deadline.after(600)))
    with slow_solves(LOAD_S), ticking_clock(0.001):
        loaded = plan(target, DISTRIBUTED, config, explain=False, work=Work(0.24, Deadline.after(600)))
    heuristic, solver = idle.stats
    assert heuristic.details["truncated"] == "work" and 0 < int(heuristic.details["rpc_combinations"]) < 512
    assert heuristic.safety_stops == solver.safety_stops == () and idle.time_cuts == ()
    assert stable_json(loaded) == stable_json(idle)


def test_a_cp_sat_solve_cut_by_its_work_budget_is_no_safety_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every CP-SAT solve gets a nanosecond of deterministic time: each step is cut, named in
    # ``truncated``, the same on every run (no safety stop, ``time_cuts`` empty)
    from layerfit.solver.model import runner

    target = rpc_cluster(2, gpus_each=3)
    config = PlannerConfig(time_limit_s=60, alternatives=0)
    monkeypatch.setattr(runner, "DETERMINISTIC_PER_S", 1e-9 / config.time_limit_s)
    first, second = (plan(target, DISTRIBUTED, config, explain=False) for _ in range(2))
    solver = first.stats[1]
    assert solver.status is Status.FEASIBLE and solver.details["hint"] == "incomplete"
    assert {"hint", "3-workers"} <= set(str(solver.details["truncated"]).split(","))
    assert solver.safety_stops == () and first.time_cuts == ()
    assert stable_json(first) == stable_json(second)


def test_a_safety_stop_is_named_where_it_fires() -> None:
    # Every deadline past by the next read of the clock: the heuristic and the solver stop on the
    # clock, and say so
    target = rpc_cluster(2, gpus_each=3)
    with ticking_clock(86_400.0):
        result = plan(target, DISTRIBUTED, PlannerConfig(time_limit_s=60), explain=False)
    heuristic, solver = result.stats
    assert heuristic.safety_stops == ("deadline",) and solver.safety_stops == ("deadline",)
    assert result.time_cuts == ("heuristic", "cp-sat")


def test_fleet_candidate_columns_do_not_depend_on_load() -> None:
    # The executors' fleet: its 60 GiB deployment fits on no worker alone, so candidate generation
    # asks the planner for its distributed layouts and alternatives (three re-solves of 5-11 ms
    # unloaded). Under load ~8 they were cut (10 columns against 14); under the emulated load now too
    config = FleetConfig(time_limit_s=60.0, executor=Executor.SERIAL, num_search_workers=1)
    planner = PlannerConfig(time_limit_s=30.0)
    idle = plan_fleet(distributed_fleet(), config, planner)
    with planner_under(lambda: slow_solves(LOAD_S)):
        loaded = plan_fleet(distributed_fleet(), config, planner)
    assert loaded.stats[0].safety_stops == idle.stats[0].safety_stops == ()
    columns = [next(s.details["candidates"] for s in p.stats if "candidates" in s.details) for p in (idle, loaded)]
    assert columns[0] == columns[1]
    assert stable_json(loaded) == stable_json(idle)


def test_slow_solves_emulation_moves_the_clock() -> None:
    # The emulation itself: the clock runs LOAD_S ahead after each solve, and not before
    started = time.perf_counter()
    with slow_solves(LOAD_S):
        assert time.perf_counter() - started < LOAD_S
        plan(rpc_cluster(2, gpus_each=3), DISTRIBUTED, PlannerConfig(time_limit_s=60, alternatives=0), explain=False)
        assert time.perf_counter() - started >= LOAD_S
