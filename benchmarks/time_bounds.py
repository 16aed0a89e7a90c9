"""Time bounds of ``plan()``: wall time with a 1 s limit on GPUStack's worst distributed case and on
1,024 GPUs with ``explain`` on.

Case A: 5 workers / 24 GPUs (a main worker with 8 GPUs, four with 4), 16 candidate RPC GPUs, a
model larger than all of them with CPU offloading and distribution on: GPUStack's search tries
39,205 RPC combinations, none reaching full offload. Case B: 128 workers x 8 GPUs = 1,024 GPUs, a
model that fits nowhere without CPU offloading, so ``explain`` plans the relaxations. Each case
prints the median and largest ``plan()`` time over the repeats, each stage's time and whether a
limit was hit. The baseline in the same run: with ``--oracle``, the exhaustive heuristic on case A
(no combination budget, no deadline; tens of seconds); always, case B without ``explain``.
PASS when every ``plan()`` returns within the limit plus ``OVERHEAD_S``. The engines' modules are
imported before the first measurement (a fresh process pays about 2 s for them once).

Case F: ``plan_fleet`` on 16 workers / 64 GPUs and 40 deployments (``fleet_bench``'s worker-failure
fleet) with ``--fleet-limit`` (default 3 s), on the serial executor with one search worker: the
limit is meant to cover every stage (screening, candidates, the one-at-a-time seed, column
generation and the master); PASS when it returns within the limit plus ``FLEET_OVERHEAD_S``. Each
run prints the stages' times the plan reports.

Case G: a very large fleet as ``replan`` sees it: ``fleet_files``' 3,750 workers x 8 GPUs = 30,000
GPUs with ``--large-replicas`` replicas (200 and 8,192 by default: a quarter as many deployments,
half of the replicas running now), written as YAML; the limit's clock starts before the file is
read (parsed and validated) and ``plan_fleet`` gets the rest (``deadline=``), on the serial
executor with one search worker. Each run prints the read, the plan and the total against
``--large-limit`` (default 5 s) and the stages the wall clock cut; PASS when the total is within
the limit plus ``FLEET_OVERHEAD_S``.

Run: ``.venv/bin/python benchmarks/time_bounds.py [--repeats N] [--limit S] [--oracle] [--fleet-limit S]
[--large-limit S] [--large-replicas 200,8192]``
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from fleet_bench import make_cluster, make_deployments
from fleet_files import fleet_text
from heuristic_speed import PROFILE as MODEL

from layerfit import heuristics
from layerfit.budget.deadline import Deadline
from layerfit.domain import Cluster, Deployment, GiB, Gpu, MemoryProfile, Worker
from layerfit.domain.config import PlannerConfig
from layerfit.domain.fleet import Executor, Fleet, FleetConfig
from layerfit.domain.plan import Plan
from layerfit.fleet import plan_fleet
from layerfit.io.documents import load_file
from layerfit.planning import planner

OVERHEAD_S = 0.75
"""Allowed time beyond the limit (model builds, checks, one strategy step)."""
FLEET_OVERHEAD_S = 1.0
"""Allowed time beyond the fleet's limit (one pricing problem, decoding the master, the moves)."""


def profile(n_blocks: int) -> MemoryProfile:
    """The heuristic benchmark's 405B-class Q4 model (blocks of about 1.7 GiB), ``n_blocks`` of them."""
    block, kv = MODEL.block_weight_bytes[0], MODEL.block_kv_bytes[0]
    return MODEL.model_copy(update={"block_weight_bytes": (block,) * n_blocks, "block_kv_bytes": (kv,) * n_blocks})


def cluster(gpus_per_worker: tuple[int, ...], ram_gib: int) -> Cluster:
    """24 GiB GPUs with 21-24 GiB free, varying by worker and index."""
    workers = []
    for w, count in enumerate(gpus_per_worker):
        gpus = tuple(
            Gpu(index=i, total_vram_bytes=24 * GiB, allocatable_vram_bytes=24 * GiB - ((w * 3 + i * 5) % 13) * GiB // 4)
            for i in range(count)
        )
        workers.append(
            Worker(id=w, name=f"w{w}", total_ram_bytes=ram_gib * GiB, allocatable_ram_bytes=ram_gib * GiB, gpus=gpus)
        )
    return Cluster(workers=tuple(workers))


def case_a() -> tuple[Cluster, Deployment]:
    deployment = Deployment(name="rpc-worst", profile=profile(400), distributed_inference_across_workers=True)
    return cluster((8, 4, 4, 4, 4), 1024), deployment


def case_b() -> tuple[Cluster, Deployment]:
    deployment = Deployment(name="too-big", profile=profile(126), cpu_offloading=False)
    return cluster((8,) * 128, 512), deployment


def stages(result: Plan) -> str:
    parts = []
    for stats in result.stats:
        truncated = stats.details.get("truncated")
        mark = f" truncated={truncated}" if truncated else ""
        parts.append(f"{stats.engine} {stats.wall_time_s:.2f}s {stats.status.value}{mark}")
    return "; ".join(parts)


def timed(target: Cluster, deployment: Deployment, config: PlannerConfig, explain: bool) -> tuple[float, Plan]:
    started = time.perf_counter()
    result = planner.plan(target, deployment, config, explain=explain)
    return time.perf_counter() - started, result


def measure(name: str, target: Cluster, deployment: Deployment, limit: float, repeats: int, explain: bool) -> bool:
    config = PlannerConfig(time_limit_s=limit)
    runs = [timed(target, deployment, config, explain) for _ in range(repeats)]
    times = [seconds for seconds, _ in runs]
    result = runs[-1][1]
    layers = result.layout.gpu_layers if result.layout is not None else 0
    gpus = sum(len(worker.gpus) for worker in target.workers)
    print(
        f"{name}: plan() median {statistics.median(times):.2f} s, max {max(times):.2f} s "
        f"(limit {limit:g} s, {gpus} GPUs, explain={explain}), status {result.status.value}, "
        f"{layers} GPU layers, {len(result.relaxations)} relaxations"
    )
    print(f"    last run: {stages(result)}")
    return max(times) <= limit + OVERHEAD_S


def oracle(target: Cluster, deployment: Deployment) -> None:
    config = PlannerConfig(time_limit_s=3600, max_rpc_combinations=None)
    started = time.perf_counter()
    result = heuristics.plan(target, deployment, config)
    layers = result.layout.gpu_layers if result.layout is not None else 0
    details = result.stats[0].details
    print(
        f"A baseline: exhaustive heuristic {time.perf_counter() - started:.1f} s, "
        f"{details['rpc_combinations']} combinations evaluated, {layers} GPU layers"
    )


def fleet_case() -> Fleet:
    """``fleet_bench``'s worker-failure fleet: 16 workers x 4 GPUs, 40 deployments."""
    rng = random.Random(100)
    return Fleet(cluster=make_cluster(rng, 16, 4), deployments=make_deployments(rng, 40, [4, 4, 3, 2, 1, 1, 0]))


def measure_fleet(limit: float, repeats: int) -> bool:
    fleet = fleet_case()
    config = FleetConfig(time_limit_s=limit, executor=Executor.SERIAL, num_search_workers=1)
    times, plans = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        plans.append(plan_fleet(fleet, config))
        times.append(time.perf_counter() - started)
    details = plans[-1].stats[0].details
    stages_s = ", ".join(f"{key} {value}" for key, value in details.items() if key.endswith("_s"))
    gpus = sum(len(worker.gpus) for worker in fleet.cluster.workers)
    print(
        f"F: plan_fleet() median {statistics.median(times):.2f} s, max {max(times):.2f} s (limit {limit:g} s, "
        f"{gpus} GPUs, {len(fleet.deployments)} deployments), status {plans[-1].status.value}, "
        f"{len(plans[-1].placements)} replicas placed"
    )
    print(f"    last run: {stages_s or 'no stage times'}; {plans[-1].stats[0].wall_time_s:.2f} s by its own clock")
    return max(times) <= limit + FLEET_OVERHEAD_S


LARGE_WORKERS = 3750
LARGE_GPUS_PER_WORKER = 8


def measure_large(limit: float, replicas: int, repeats: int) -> bool:
    """Case G (see the module docstring) for one replica count."""
    text = fleet_text(LARGE_WORKERS, LARGE_GPUS_PER_WORKER, replicas, max(1, replicas // 4))
    config = FleetConfig(time_limit_s=limit, executor=Executor.SERIAL, num_search_workers=1)
    runs: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fleet.yaml"
        path.write_text(text, encoding="utf-8")
        for _ in range(repeats):
            started = time.perf_counter()
            deadline = Deadline.after(limit)
            fleet = load_file(Fleet, path)
            read = time.perf_counter() - started
            plan = plan_fleet(fleet, config, PlannerConfig(time_limit_s=2.0), deadline=deadline)
            total = time.perf_counter() - started
            runs.append((read, total - read, total))
    gpus = LARGE_WORKERS * LARGE_GPUS_PER_WORKER
    totals = [total for _, _, total in runs]
    print(
        f"G: {gpus} GPUs, {replicas} replicas, {len(text) / 1e6:.1f} MB: read + plan_fleet() median "
        f"{statistics.median(totals):.2f} s, max {max(totals):.2f} s (limit {limit:g} s; read "
        f"{min(r for r, _, _ in runs):.2f}-{max(r for r, _, _ in runs):.2f} s, plan "
        f"{min(p for _, p, _ in runs):.2f}-{max(p for _, p, _ in runs):.2f} s), {len(plan.placements)} replicas placed"
    )
    print(f"    last run: safety stops: {', '.join(plan.stats[0].safety_stops) or 'none'}")
    return max(totals) <= limit + FLEET_OVERHEAD_S


def warm_up() -> None:
    """Load the engines' modules (OR-Tools, numpy) once: layerfit imports them on first use, which
    costs a fresh process about 2 s before its first plan."""
    import layerfit.heuristics
    import layerfit.solver  # noqa: F401


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=float, default=1.0)
    parser.add_argument("--oracle", action="store_true", help="also run case A's exhaustive heuristic")
    parser.add_argument("--fleet-limit", type=float, default=3.0, help="time limit of case F (plan_fleet)")
    parser.add_argument("--large-limit", type=float, default=5.0, help="time limit of case G (30,000 GPUs)")
    parser.add_argument("--large-replicas", default="200,8192", help="case G's replica counts ('' skips it)")
    args = parser.parse_args()
    warm_up()
    passed = measure("A", *case_a(), args.limit, args.repeats, explain=True)
    if args.oracle:
        oracle(*case_a())
    passed &= measure("B", *case_b(), args.limit, args.repeats, explain=True)
    measure("B baseline", *case_b(), args.limit, 1, explain=False)
    verdict = "PASS" if passed else "FAIL"
    print(f"{verdict}: every plan() within the limit + {OVERHEAD_S} s")
    fleet_passed = measure_fleet(args.fleet_limit, args.repeats)
    print(f"{'PASS' if fleet_passed else 'FAIL'}: every plan_fleet() within the limit + {FLEET_OVERHEAD_S} s")
    large_passed = True
    for replicas in (int(r) for r in args.large_replicas.split(",") if r):
        large_passed &= measure_large(args.large_limit, replicas, args.repeats)
    print(
        f"{'PASS' if large_passed else 'FAIL'}: every read + plan_fleet() of G within the limit + {FLEET_OVERHEAD_S} s"
    )
    return 0 if passed and fleet_passed and large_passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
