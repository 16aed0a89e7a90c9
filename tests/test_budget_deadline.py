"""Bounded time: the heuristic's RPC budget and deadline, and plan()'s one deadline over all stages.

Wall-clock figures live in ``benchmarks/time_bounds.py``; these tests check the mechanism: which
limit stopped a stage, that its answer is still valid, and that a count budget is reproducible.
"""

from __future__ import annotations

import time

import pytest

from layerfit import heuristics
from layerfit.budget.deadline import Deadline
from layerfit.check import check
from layerfit.domain import Cluster, Deployment, GiB, Gpu, MemoryProfile, MiB, PlannerConfig, Status, Worker
from layerfit.errors import InputError
from layerfit.planning.planner import plan

PROFILE = MemoryProfile.uniform(
    200, 1700 * MiB, 32 * MiB, output_weight_bytes=1 * GiB, gpu_fixed_bytes=600 * MiB, host_fixed_bytes=500 * MiB
)
"""About 340 GiB: more than every GPU below together, so no RPC combination reaches full offload."""
DISTRIBUTED = Deployment(name="big", profile=PROFILE, distributed_inference_across_workers=True)


def rpc_cluster(remote_workers: int, gpus_each: int = 4) -> Cluster:
    """A main worker with two GPUs and remote workers with ``gpus_each`` GPUs of 20-24 GiB free."""
    workers = []
    for w in range(remote_workers + 1):
        count = 2 if w == 0 else gpus_each
        gpus = tuple(
            Gpu(index=i, total_vram_bytes=24 * GiB, allocatable_vram_bytes=24 * GiB - ((w + 3 * i) % 5) * GiB)
            for i in range(count)
        )
        workers.append(
            Worker(id=w, name=f"w{w}", total_ram_bytes=2048 * GiB, allocatable_ram_bytes=2048 * GiB, gpus=gpus)
        )
    return Cluster(workers=tuple(workers))


def test_rpc_search_stops_at_its_combination_budget_with_a_valid_best_so_far() -> None:
    target = rpc_cluster(4)  # 16 candidate RPC GPUs: 39,205 combinations in GPUStack's search
    config = PlannerConfig(max_rpc_combinations=5, time_limit_s=600)
    result = heuristics.plan(target, DISTRIBUTED, config)
    details = result.stats[0].details
    assert details["truncated"] == "rpc_combinations" and details["rpc_combinations"] == 5
    assert result.status is Status.FEASIBLE and result.layout is not None and result.layout.rpc_devices
    assert check(target, DISTRIBUTED, result, PROFILE, config) == ()


def test_a_count_budget_gives_the_same_plan_every_time() -> None:
    target = rpc_cluster(4)
    config = PlannerConfig(max_rpc_combinations=7, time_limit_s=600)
    first, second = (heuristics.plan(target, DISTRIBUTED, config) for _ in range(2))
    assert first.model_dump(exclude={"stats"}) == second.model_dump(exclude={"stats"})


def test_the_exhaustive_search_is_the_oracle_of_the_budgeted_one() -> None:
    target = rpc_cluster(2, gpus_each=3)  # 6 candidates: 63 combinations
    oracle = heuristics.plan(target, DISTRIBUTED, PlannerConfig(max_rpc_combinations=None, time_limit_s=600))
    assert oracle.stats[0].details["truncated"] == "" and oracle.layout is not None
    for budget in (1, 3, 20, 63):
        budgeted = heuristics.plan(target, DISTRIBUTED, PlannerConfig(max_rpc_combinations=budget, time_limit_s=600))
        assert budgeted.layout is not None and budgeted.layout.gpu_layers <= oracle.layout.gpu_layers
    assert budgeted.layout.gpu_layers == oracle.layout.gpu_layers  # 63 is enough for all of them


def test_heuristic_stops_at_its_deadline() -> None:
    target = rpc_cluster(4)
    config = PlannerConfig(max_rpc_combinations=None)
    result = heuristics.plan(target, DISTRIBUTED, config, deadline=Deadline(time.perf_counter()))
    assert result.stats[0].details["truncated"] == "deadline"
    assert result.stats[0].details["rpc_combinations"] == 0


def test_plan_with_no_time_left_skips_the_solver_and_says_so() -> None:
    target = rpc_cluster(4)
    result = plan(target, DISTRIBUTED, PlannerConfig(), deadline=Deadline(time.perf_counter()))
    heuristic, solver = result.stats
    assert heuristic.details["truncated"] == "deadline"
    assert solver.engine == "cp-sat" and solver.status is Status.UNKNOWN and solver.details["truncated"] == "deadline"


def test_explain_shares_the_deadline_and_says_when_it_ran_out() -> None:
    target = rpc_cluster(1)
    too_big = Deployment(name="too-big", profile=PROFILE, cpu_offloading=False)
    ample = plan(target, too_big, PlannerConfig(time_limit_s=60))
    explained = ample.stats[-1]
    assert explained.engine == "explain" and explained.details["truncated"] == "" and ample.relaxations
    starved = plan(target, too_big, PlannerConfig(time_limit_s=60), deadline=Deadline(time.perf_counter()))
    assert starved.stats[-1].engine == "explain" and starved.stats[-1].details["truncated"] == "deadline"
    assert starved.stats[-1].details["plans"] == 0


def test_profiles_above_the_block_cap_are_refused_naming_the_field() -> None:
    MemoryProfile.uniform(1024, 1, 1)
    with pytest.raises(ValueError, match="block_weight_bytes: 1025 blocks; at most 1024"):
        MemoryProfile.uniform(1025, 1, 1)
    with pytest.raises(ValueError, match="makes too many blocks"):
        MemoryProfile(block_weight_bytes=("1 MiB x 1000000000",), block_kv_bytes=(0,))
    assert issubclass(InputError, ValueError)


def test_same_input_same_plan_json_with_alternatives() -> None:
    # Alternatives are a count, not a share of the time: the set is the same on every run.
    target = rpc_cluster(2, gpus_each=3)
    small = Deployment(name="small", profile=MemoryProfile.uniform(4, 1 * GiB, 0, output_weight_bytes=1 * GiB))
    config = PlannerConfig(time_limit_s=30, alternatives=4)
    first, second = (plan(target, small, config) for _ in range(2))
    assert len(first.alternatives) == 4
    assert first.model_dump_json(exclude={"stats"}) == second.model_dump_json(exclude={"stats"})
    solver = first.stats[1]
    assert solver.engine == "cp-sat" and solver.details["truncated"] == ""


def test_solver_set_up_stops_at_its_deadline() -> None:
    # 1,024 GPUs: preparing the instance alone takes 0.2-0.4 s; it now checks the deadline per
    # worker and gives up (before, it ran to the end and CP-SAT started past the deadline).
    from layerfit.budget.deadline import DeadlinePassed
    from layerfit.solver import solve
    from layerfit.solver.model.instance import build_instance

    target = rpc_cluster(255)
    with pytest.raises(DeadlinePassed):
        build_instance(target, DISTRIBUTED, PROFILE, PlannerConfig(), deadline=Deadline(time.perf_counter()))
    result = solve(target, DISTRIBUTED, PROFILE, PlannerConfig(time_limit_s=1e-6))
    assert result.status is Status.UNKNOWN and result.stats.details["truncated"] == "deadline"


def test_a_cp_sat_solve_cut_by_the_wall_clock_is_a_safety_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every CP-SAT solve of the solver gets a microsecond of wall time: none ends with a proof, and
    # the solver's stats name each step the clock cut, in ``truncated`` and as a safety stop (the
    # work budget cuts at the same point on every run, the clock does not); ``time_cuts`` reads them
    # for the fleet
    from layerfit.solver.model import runner

    target = rpc_cluster(2, gpus_each=3)
    config = PlannerConfig(time_limit_s=60, alternatives=0)
    whole = plan(target, DISTRIBUTED, config, explain=False)
    assert whole.stats[1].status is Status.OPTIMAL and whole.stats[1].details["truncated"] == ""
    assert whole.time_cuts == ()
    real = runner.solver_for
    monkeypatch.setattr(runner, "solver_for", lambda config, _, **options: real(config, 1e-6, **options))
    cut = plan(target, DISTRIBUTED, config, explain=False)
    solver = cut.stats[1]
    assert solver.status is Status.FEASIBLE and solver.details["hint"] == "stopped"
    assert {"hint", "3-workers"} <= set(str(solver.details["truncated"]).split(","))
    assert {"hint", "3-workers"} <= set(solver.safety_stops)
    assert cut.time_cuts == ("cp-sat",)
