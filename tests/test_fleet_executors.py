"""The same fleet plan on every executor (serial, local processes, Ray) and on every run, with the
defaults too, as long as no time limit is hit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fleet_builders import alike_gpus_fleet, cluster_of

from layerfit.cli import EXIT_PLACED, main
from layerfit.domain import Deployment, GiB, MemoryProfile, PlannerConfig, Status
from layerfit.domain.fleet import Executor, Fleet, FleetConfig
from layerfit.fleet import plan_fleet
from layerfit.fleet.executors import start_executor

FLEET = str(Path(__file__).parent.parent / "layerfit" / "examples" / "fleet.yaml")


def fleet() -> Fleet:
    deployments = tuple(
        Deployment(
            name=f"d{i}",
            profile=MemoryProfile.uniform(16, size * GiB // 16, 0),
            replicas=replicas,
            priority=i % 2,
            distributed_inference_across_workers=True,
        )
        for i, (size, replicas) in enumerate([(6, 2), (20, 1), (30, 1), (10, 2), (60, 1)])
    )
    return Fleet(cluster=cluster_of([(24, 24), (16,), (48, 8)]), deployments=deployments)


ATTEMPTS = 3
"""Plans tried per executor for one on which the wall-clock safety stop did not fire."""


def run(executor: Executor) -> tuple[object, ...]:
    """The plan on ``executor``, from a run on which no safety stop fired: the same plan is promised
    only then (the work budget decides where every stage stops; the 60 s limit, which counts every
    stage, Ray's first tasks included, is only the safety stop, and a heavy load can still fire it)."""
    config = FleetConfig(time_limit_s=60.0, executor=executor, processes=2, num_search_workers=1)
    stops = []
    for _ in range(ATTEMPTS):
        # The single-deployment planner (the 60 GiB deployment's distributed layouts) stops on work
        # budgets too (its alternatives' share was a quarter of the time it took, at least 0.1 s:
        # three re-solves of 5-11 ms unloaded, which load ~8 cut, 10 columns against 14); its own
        # 30 s limit is its safety stop, which the retries see (test_budget_work emulates the load)
        result = plan_fleet(fleet(), config, PlannerConfig(time_limit_s=30.0))
        stops.append(result.stats[0].safety_stops)
        if not stops[-1]:
            return result.placements, result.unplaced, result.moves, result.objective, result.bounds
    pytest.fail(f"the safety stop fired on every run on {executor.value}: {stops}")


@pytest.fixture(scope="module")
def serial() -> tuple[object, ...]:
    return run(Executor.SERIAL)


def test_local_process_pool_matches_serial(serial: tuple[object, ...]) -> None:
    assert run(Executor.LOCAL) == serial


def test_ray_matches_serial(serial: tuple[object, ...]) -> None:
    import ray  # the ray extra is part of the test extra

    # Ray's instance and its workers (one per CPU, each loading the fleet package) start before
    # planning, as replan starts them before its clock
    start_executor(FleetConfig(executor=Executor.RAY, processes=2))
    try:
        assert ray.is_initialized() and ray.cluster_resources().get("CPU") == 2
        assert run(Executor.RAY) == serial
    finally:
        ray.shutdown()


class _Started(Exception):
    """Raised by the stand-in for the executor's start, to end the command there."""


def test_replan_starts_ray_before_its_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's start (2.5 s idle on two cores) inside the limit left the example fleet's plan at
    --time-limit 3 no time for its stages (the greedy start); it comes before the clock now."""
    from layerfit.budget.deadline import Deadline
    from layerfit.fleet import executors

    events: list[str] = []
    after = Deadline.after

    def start(config: FleetConfig) -> None:
        events.append(f"start {config.executor.value}")
        raise _Started

    def clock(seconds: float) -> Deadline:
        events.append("clock")
        return after(seconds)

    monkeypatch.setattr(executors, "start_executor", start)
    monkeypatch.setattr(Deadline, "after", staticmethod(clock))
    with pytest.raises(_Started):
        main(["replan", FLEET, "--executor", "ray", "--time-limit", "3"])
    assert events == ["start ray"]
    events.clear()  # the other executors start nothing
    assert main(["replan", FLEET, "--executor", "serial", "--time-limit", "3", "--quiet"]) == EXIT_PLACED
    assert events[0] == "clock" and not any(event.startswith("start") for event in events)


def generated_fleet(seed: int) -> Fleet:
    """Four workers of two GPUs of a few alike sizes (so that equally good plans abound) and six deployments."""
    return alike_gpus_fleet(seed)


def plan_json(fleet: Fleet, **config: object) -> str:
    """The fleet plan as ``replan --json`` prints it, less wall-clock times and the executor's name."""
    plan = plan_fleet(fleet, FleetConfig(time_limit_s=60.0, **config))  # type: ignore[arg-type]
    # no limit was hit (the master proved its tiers over the candidates, no safety stop): the
    # answer must not depend on how it was computed
    assert plan.stats[0].status is Status.OPTIMAL and plan.stats[0].safety_stops == ()
    data = json.loads(plan.model_dump_json())
    for stats in data["stats"]:
        del stats["wall_time_s"]
        stats["details"] = {k: v for k, v in stats["details"].items() if not k.endswith("_s") and k != "executor"}
    return json.dumps(data, sort_keys=True)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_default_executor_gives_the_serial_plan_json(seed: int) -> None:
    fleet = generated_fleet(seed)
    serial = plan_json(fleet, executor=Executor.SERIAL)
    assert plan_json(fleet) == serial
    assert plan_json(fleet, executor=Executor.SERIAL) == serial


def test_replan_json_is_the_same_on_every_run_and_executor(capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for executor in ([], ["--executor", "serial"], [], ["--executor", "serial"]):
        assert main(["replan", FLEET, "--json", *executor]) == EXIT_PLACED
        data = json.loads(capsys.readouterr().out)
        assert data["stats"][0]["status"] == "optimal"  # the master proved its tiers: no limit was hit
        for stats in data["stats"]:
            del stats["wall_time_s"]
            stats["details"] = {k: v for k, v in stats["details"].items() if not k.endswith("_s") and k != "executor"}
        outputs.append(json.dumps(data, sort_keys=True))
    assert outputs == [outputs[0]] * 4
