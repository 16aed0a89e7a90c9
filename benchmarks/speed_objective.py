"""``objective: speed`` against GPUStack's layers-first order: what each picks, how fast each is
predicted to run, and what the speed objective costs the solver.

Part 1, scenarios shaped like GPUStack's speed complaints, each planned under both objectives with
``plan()``; printed: the layout (main worker, blocks per GPU, blocks on the host), its predicted
decode speed and its largest terms, and the solver's status and time.

* ``1182-gpus``: the bundled examples/speed-cluster.yaml + speed-deployment.yaml: one large GPU of
  an older generation against two smaller, faster ones (issue 1182: the layers-first main worker
  decoded at 1.5 t/s where another gave 3.5 t/s).
* ``1182-moe``: a Qwen3-235B-A22B header over two workers that hold it only together: four RTX 4090
  on a worker with slow RAM, two RTX A6000 on one with fast RAM; which GPUs hold which blocks.
* ``677-lan``: Llama-3.1-70B over three one-GPU workers on a 10 Gbit/s LAN, or partly on the main
  worker's CPU (issue 677: CPU offload was ranked above faster distributed GPUs).
* ``677-slow-link``: Gemma-3-27B on a 16 GiB GPU whose worker reaches four small GPUs over a
  1 Gbit/s, 20 ms link, where every rpc-server costs a round trip a token.

Part 2, solver time: ``solver_cases.py``'s quick suite (4 to 1,024 GPUs; GPUs named by size so
that speeds differ: 16 GiB RTX 4080, 24 GiB RTX 4090, 48 GiB RTX A6000, 80 GiB H100, 141 GiB H200;
Apple workers M2 Ultra), each case solved under ``objective: layers`` (the baseline, in the same
run) and ``objective: speed``, with the heuristic's layout of that objective as the hint, as
``plan()`` calls it. Reported per GPU count: p50, p95, p99 and max of the solver's wall time and
statuses. Targets (the solver's): p99 < 1 s up to 64 GPUs, < 2 s above; and under speed, never a
layout predicted slower than the layers one where both are proven. The load average is printed:
timings on a shared machine are noisy.

``--reference-limit S`` solves each unproven speed answer again with ``S`` seconds and prints how far
the answer is from what that finds.

Run: ``.venv/bin/python benchmarks/speed_objective.py [--seeds 1-3] [--time-limit S] [--skip-solver]
[--reference-limit S]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from solver_bench import percentile, seeds
from solver_cases import QUICK_SUITE, Case, make_suite

from layerfit import heuristics
from layerfit.domain import Cluster, Deployment, GiB, Gpu, LlamaParams, PlannerConfig, Status, Worker
from layerfit.domain.cluster import Network
from layerfit.domain.config import Objective
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Plan
from layerfit.estimators import estimate_profile
from layerfit.estimators.shape import read_gguf
from layerfit.io.documents import load_file
from layerfit.planning.planner import plan
from layerfit.solver import solve
from layerfit.speed.deployment import deployment_speed
from layerfit.testing.synthetic import REAL_MODELS, write_gguf

SMALL_GPUS = 64
SMALL_P99_S = 1.0
LARGE_P99_S = 2.0
GPU_NAMES = {16: "NVIDIA GeForce RTX 4080", 24: "NVIDIA GeForce RTX 4090", 48: "NVIDIA RTX A6000"}
GPU_NAMES |= {80: "NVIDIA H100 80GB HBM3", 141: "NVIDIA H200"}
APPLE = "Apple M2 Ultra"


# ---------------------------------------------------------------------------------------------
# Part 1: the scenarios
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    cluster: Cluster
    deployment: Deployment


def _gpus(name: str, count: int, total_gib: int, free_gib: int) -> tuple[Gpu, ...]:
    return tuple(
        Gpu(index=i, name=name, total_vram_bytes=total_gib * GiB, allocatable_vram_bytes=free_gib * GiB)
        for i in range(count)
    )


def _worker(name: str, gpus: tuple[Gpu, ...], ram_gib: int, ram_gbps: float, link: Network) -> Worker:
    return Worker(
        id=name,
        name=name,
        total_ram_bytes=ram_gib * GiB,
        allocatable_ram_bytes=(ram_gib - 8) * GiB,
        gpus=gpus,
        ram_bandwidth_gbps=ram_gbps,
        network=link,
    )


def _header_deployment(model: str, ctx: int, scratch: Path) -> Deployment:
    path = scratch / f"{model}.gguf"
    write_gguf(path, REAL_MODELS[model])
    params = LlamaParams(ctx_size=ctx)
    profile = estimate_profile(read_gguf(str(path)), params)
    return Deployment(
        name=model, profile=profile, params=params, distributed_inference_across_workers=True, cpu_offloading=True
    )


def scenarios(scratch: Path) -> list[Scenario]:
    examples = resources.files("layerfit") / "examples"
    with resources.as_file(examples) as folder:
        bundled = Scenario(
            "1182-gpus",
            load_file(Cluster, folder / "speed-cluster.yaml"),
            load_file(Deployment, folder / "speed-deployment.yaml"),
        )
    lan = Network(bandwidth_gbps=10, rtt_ms=0.3)
    slow = Network(bandwidth_gbps=1, rtt_ms=20)
    moe = Cluster(
        workers=(
            _worker("ws-4090", _gpus(GPU_NAMES[24], 4, 24, 23), 256, 60, lan),
            _worker("ws-a6000", _gpus(GPU_NAMES[48], 2, 48, 46), 512, 200, lan),
        )
    )
    three = Cluster(workers=tuple(_worker(f"node{i}", _gpus(GPU_NAMES[24], 1, 24, 23), 128, 60, lan) for i in range(3)))
    small = tuple(_worker(f"edge{i}", _gpus("NVIDIA GeForce RTX 3060", 1, 12, 3), 32, 40, slow) for i in range(4))
    remote = Cluster(workers=(_worker("desk", _gpus(GPU_NAMES[16], 1, 16, 15), 128, 80, slow), *small))
    return [
        bundled,
        Scenario("1182-moe", moe, _header_deployment("qwen3-235b-a22b", 8192, scratch)),
        Scenario("677-lan", three, _header_deployment("llama-3.1-70b", 8192, scratch)),
        Scenario("677-slow-link", remote, _header_deployment("gemma-3-27b", 8192, scratch)),
    ]


def _layout_text(layout: Layout) -> str:
    devices = ", ".join(f"{d.worker}:{d.gpu_index} {d.blocks}" for d in layout.devices) or "no GPU"
    host = f"; host {layout.cpu_blocks} blocks" if layout.cpu_blocks else ""
    experts = f"; experts of {len(layout.host_expert_blocks)} blocks on the host" if layout.host_expert_blocks else ""
    return f"main {layout.main_worker} [{devices}]{host}{experts}"


def _plan_line(objective: Objective, planned: Plan, seconds: float) -> list[str]:
    if planned.layout is None or planned.best is None or planned.best.speed is None:
        return [f"  {objective.value:6s} nothing placed ({planned.status.value})"]
    speed = planned.best.speed
    terms = "; ".join(f"{term.where} {term.ms:.1f} ms" for term in speed.largest_terms(3))
    return [
        f"  {objective.value:6s} {planned.status.value:8s} {speed.decode_tokens_per_s:6.1f} tokens/s "
        f"({speed.decode_ms_per_token:6.1f} ms a token)  plan() {seconds * 1000:6.0f} ms",
        f"         {_layout_text(planned.layout)}",
        f"         largest terms: {terms}",
    ]


def run_scenarios(time_limit_s: float) -> None:
    print("Part 1: GPUStack's layers-first order against objective: speed (plan(), predicted speeds)\n")
    with tempfile.TemporaryDirectory() as scratch:
        for scenario in scenarios(Path(scratch)):
            print(f"{scenario.name}: {scenario.deployment.name} on {len(scenario.cluster.workers)} workers")
            rates = {}
            for objective in Objective:
                config = PlannerConfig(objective=objective, time_limit_s=time_limit_s, seed=1, alternatives=0)
                started = time.perf_counter()
                planned = plan(scenario.cluster, scenario.deployment, config, explain=False)
                seconds = time.perf_counter() - started
                print("\n".join(_plan_line(objective, planned, seconds)))
                if planned.best is not None and planned.best.speed is not None:
                    rates[objective] = planned.best.speed.decode_tokens_per_s
            if len(rates) == 2:
                gain = rates[Objective.SPEED] / rates[Objective.LAYERS] - 1
                print(f"  speed layout predicted {gain:+.0%} against the layers-first one\n")


# ---------------------------------------------------------------------------------------------
# Part 2: solver time
# ---------------------------------------------------------------------------------------------


def named(cluster: Cluster) -> Cluster:
    """The case's cluster with GPU names by size (unified-memory workers an M2 Ultra)."""
    workers = []
    for worker in cluster.workers:
        gpus = tuple(
            gpu.model_copy(
                update={
                    "name": APPLE
                    if worker.unified_memory
                    else GPU_NAMES.get(round(gpu.total_vram_bytes / GiB), GPU_NAMES[24])
                }
            )
            for gpu in worker.gpus
        )
        workers.append(worker.model_copy(update={"gpus": gpus}))
    return cluster.model_copy(update={"workers": tuple(workers)})


@dataclass(frozen=True)
class Solved:
    case: Case
    objective: Objective
    seconds: float
    status: Status
    strict_optimal: bool
    decode_ms: float | None


def solve_case(case: Case, cluster: Cluster, objective: Objective) -> Solved:
    config = case.config.model_copy(update={"objective": objective})
    quick = heuristics.plan(cluster, case.deployment, config, case.profile)
    result = solve(cluster, case.deployment, case.profile, config, hint=quick.layout)
    decode = None
    if result.best is not None:
        decode = deployment_speed(cluster, case.deployment, case.profile, result.best.layout).decode_ms_per_token
    return Solved(case, objective, result.wall_time_s, result.status, result.strict_optimal, decode)


def _spread(values: list[float]) -> str:
    return " ".join(f"{percentile(values, q) * 1000:>8.1f}" for q in (0.5, 0.95, 0.99)) + f" {max(values) * 1000:>8.1f}"


def reference(outcome: Solved, limit_s: float) -> str:
    """An unproven speed answer against the same case solved with ``limit_s``."""
    case = outcome.case
    cluster = named(case.cluster)
    config = case.config.model_copy(update={"objective": Objective.SPEED, "time_limit_s": limit_s})
    quick = heuristics.plan(cluster, case.deployment, config, case.profile)
    result = solve(cluster, case.deployment, case.profile, config, hint=quick.layout)
    if result.best is None or outcome.decode_ms is None:
        return "no reference"
    best = deployment_speed(cluster, case.deployment, case.profile, result.best.layout).decode_ms_per_token
    proven = "proven" if result.strict_optimal else "not proven"
    return (
        f"{outcome.decode_ms:.1f} ms a token; with {limit_s:.0f} s: {best:.1f} ms ({proven}, "
        f"{result.wall_time_s:.1f} s), {outcome.decode_ms / best - 1:+.1%}"
    )


def run_solver(chosen: list[int], time_limit_s: float, reference_s: float = 0.0) -> bool:
    load = os.getloadavg()
    started = time.perf_counter()
    outcomes: list[Solved] = []
    for seed in chosen:
        for case in make_suite(QUICK_SUITE, seed, time_limit_s):
            cluster = named(case.cluster)
            outcomes += [solve_case(case, cluster, objective) for objective in Objective]
    end = os.getloadavg()
    print(
        f"Part 2: solver time, {len(outcomes) // 2} cases x 2 objectives, seeds {chosen}, "
        f"{time.perf_counter() - started:.0f} s; load average {load[0]:.1f} at the start, {end[0]:.1f} at the end "
        f"({os.cpu_count()} CPUs)\n"
    )
    print(f"{'GPUs':>6} {'objective':<9} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}  statuses")
    checks: list[tuple[str, bool]] = []
    for gpus in sorted({o.case.gpus for o in outcomes}):
        for objective in Objective:
            chosen_outcomes = [o for o in outcomes if o.case.gpus == gpus and o.objective is objective]
            times = [o.seconds for o in chosen_outcomes]
            statuses = ", ".join(
                f"{k} {v}" for k, v in sorted(Counter(o.status.value for o in chosen_outcomes).items())
            )
            print(f"{gpus:>6} {objective.value:<9} {_spread(times)}  {statuses}")
            if objective is Objective.SPEED:
                limit = SMALL_P99_S if gpus <= SMALL_GPUS else LARGE_P99_S
                p99 = percentile(times, 0.99)
                checks.append((f"speed p99 at {gpus} GPUs {p99:.2f} s < {limit:.0f} s", p99 < limit))
    pairs = list(zip(outcomes[::2], outcomes[1::2], strict=True))
    slower = [
        (layers, speed)
        for layers, speed in pairs
        if layers.decode_ms is not None
        and (speed.decode_ms is None or speed.decode_ms > layers.decode_ms * 1.001)
        and speed.strict_optimal
    ]
    differ = sum(
        1
        for layers, speed in pairs
        if layers.decode_ms and speed.decode_ms and speed.decode_ms < layers.decode_ms * 0.999
    )
    print(f"\nCases where the speed layout is predicted faster than the layers one: {differ} of {len(pairs)}")
    unproven = [speed for _, speed in pairs if speed.decode_ms is not None and not speed.strict_optimal]
    print(f"Speed answers not proven within the limit: {len(unproven)} of {len(pairs)}")
    for outcome in unproven if reference_s > 0 else []:
        case = outcome.case
        print(f"  {case.gpus} GPUs #{case.index} {case.model}: {reference(outcome, reference_s)}")
    checks.append((f"a proven speed layout predicted slower than the layers one: {len(slower)}", not slower))
    for layers, speed in slower[:3]:
        print(
            f"  {layers.case.gpus} GPUs #{layers.case.index}: layers {layers.decode_ms:.1f} ms, speed {speed.decode_ms}"
        )
    print("\nTargets:")
    for text, passed in checks:
        print(f"  {text}: {'PASS' if passed else 'FAIL'}")
    return all(passed for _, passed in checks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=seeds, default=[1, 2, 3], help="seeds of the solver cases (default 1-3)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="solver time limit per case, seconds")
    parser.add_argument("--skip-solver", action="store_true", help="the scenarios only")
    parser.add_argument(
        "--reference-limit", type=float, default=0.0, help="re-solve unproven speed answers with this limit (s)"
    )
    args = parser.parse_args()
    run_scenarios(args.time_limit)
    ok = True if args.skip_solver else run_solver(args.seeds, args.time_limit, args.reference_limit)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
