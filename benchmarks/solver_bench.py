"""The CP-SAT solver against the GPUStack-order heuristic on a seeded suite of 4 to 1,024 GPUs.

Every case is a cluster (8-, 4-, 2- and 1-GPU workers with 24 to 141 GiB GPUs, some unified-memory
workers, existing load on many GPUs and on RAM) and one deployment (a model from 1B to 671B
parameters with uneven block sizes, a random context size, and random switches: distribution
across workers, CPU offloading, a fixed ``-ngl``, a manual GPU selection, the placement policy).
Each case is planned by the heuristic, then by the solver with the heuristic's layout as its hint
(as ``layerfit.planner`` does); the solver's time excludes the heuristic's.

Reported per GPU count and engine: median and p95 time and status counts; then the share of cases
where the solver offloads more layers, or as many layers on fewer workers, or as many layers on as
many workers but fewer GPUs than the heuristic, with an example of each. The heuristic is the
baseline measured in the same run. A separate stress set (1,024 GPUs of at most 48 GiB and a
123B-671B model, so that several workers must share it) is reported apart. Targets: solver median
under 100 ms up to 64 GPUs and under 2 s at 1,024 GPUs; a proven answer (OPTIMAL, or INFEASIBLE
when nothing fits) in at least 95 % of 1,024-GPU cases within a 10 s limit.

Run: ``.venv/bin/python benchmarks/solver_bench.py [--quick] [--seed N] [--time-limit S]``
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass

from layerfit import heuristics
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    GiB,
    Gpu,
    GpuRef,
    Layout,
    LlamaParams,
    MemoryProfile,
    MiB,
    PlannerConfig,
    Policy,
    RoleCosts,
    Status,
    Worker,
)
from layerfit.solver import solve

FULL_SUITE = {4: 40, 16: 40, 64: 40, 256: 16, 1024: 20}
QUICK_SUITE = {4: 8, 16: 8, 64: 8, 1024: 3}
FULL_STRESS = 8
QUICK_STRESS = 2
STRESS_GPUS = 1024
STRESS_MODELS = ("123B", "405B", "671B")
SMALL_TARGET_GPUS = 64
SMALL_TARGET_S = 0.100
LARGE_TARGET_GPUS = 1024
LARGE_TARGET_S = 2.0
LARGE_OPTIMAL_SHARE = 0.95

FLAVOURS = {
    # GPU sizes (GiB), GPUs per worker, share of unified-memory workers
    "datacenter": ((24, 48, 80, 141), (8, 8, 8, 4, 4, 2, 1), 0.05),
    "consumer": ((16, 24, 24, 48), (4, 2, 2, 1, 1), 0.2),
}


@dataclass(frozen=True)
class Model:
    """A model shape: blocks, Q4-class bytes per block (uneven: every fourth block is larger, as
    when some tensors keep a wider quant type), KV bytes per block per 1k tokens, output layer."""

    name: str
    blocks: int
    block_mib: int
    kv_mib_per_1k: float
    output_mib: int


MODELS = (
    Model("1B", 16, 45, 2.0, 260),
    Model("8B", 32, 130, 4.0, 280),
    Model("14B", 48, 175, 8.0, 420),
    Model("32B", 64, 285, 8.0, 420),
    Model("70B", 80, 480, 10.0, 560),
    Model("123B", 88, 780, 11.0, 640),
    Model("405B", 126, 1720, 16.0, 1180),
    Model("671B", 61, 6400, 9.0, 950),
)


@dataclass(frozen=True)
class Case:
    gpus: int
    index: int
    cluster: Cluster
    deployment: Deployment
    profile: MemoryProfile
    config: PlannerConfig
    model: str
    stress: bool = False
    """Part of the distributed stress set, reported apart from the main suite."""


@dataclass(frozen=True)
class Outcome:
    case: Case
    heuristic_s: float
    heuristic: Layout | None
    solver_s: float
    solver_status: Status
    solver: Layout | None
    strict_optimal: bool


# ---------------------------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------------------------


def make_profile(model: Model, ctx_k: int, rng: random.Random) -> MemoryProfile:
    weights = tuple(
        (model.block_mib * (5 if i % 4 == 3 else 4) // 4 + rng.randrange(4)) * MiB for i in range(model.blocks)
    )
    kv = round(model.kv_mib_per_1k * ctx_k * MiB)
    role = RoleCosts(
        fixed_bytes=650 * MiB,
        compute=ComputeBuffer(
            full_offload_bytes=(280 + ctx_k) * MiB,
            partial_offload_bytes=(560 + 4 * ctx_k) * MiB,
            multi_device_bytes=(300 + ctx_k) * MiB,
        ),
    )
    return MemoryProfile(
        block_weight_bytes=weights,
        block_kv_bytes=(kv,) * model.blocks,
        output_weight_bytes=model.output_mib * MiB,
        token_embedding_bytes=model.output_mib * MiB,
        main=role.model_copy(update={"fixed_bytes": 700 * MiB}),
        local=role,
        rpc=role,
        unified=RoleCosts(compute=role.compute),
        host_fixed_bytes=300 * MiB,
        host_compute=ComputeBuffer(full_offload_bytes=60 * MiB, partial_offload_bytes=(300 + 8 * ctx_k) * MiB),
        rpc_host_fixed_bytes=120 * MiB,
        output_compute_bytes=(20 + ctx_k // 2) * MiB,
        first_device_compute_bytes=40 * MiB,
    )


def loaded(total: int, rng: random.Random, busy: float) -> int:
    """Allocatable after existing load: a share of devices carries 10-90 % load, in whole MiB."""
    if rng.random() >= busy:
        return total
    return total - int(total * rng.uniform(0.1, 0.9)) // MiB * MiB


def make_cluster(n_gpus: int, rng: random.Random) -> Cluster:
    """A datacenter fleet (8-GPU nodes of 24-141 GiB) or a consumer fleet (1-4 GPUs of 16-48 GiB,
    more Macs), with no, some or much existing load."""
    sizes, shapes, unified_share = FLAVOURS[rng.choice(("datacenter", "datacenter", "consumer"))]
    workers: list[Worker] = []
    left = n_gpus
    busy = rng.choice((0.0, 0.3, 0.6))
    while left:
        name = f"w{len(workers):04d}"
        if rng.random() < unified_share:
            workers.append(unified_worker(name, rng, busy))
            left -= 1
            continue
        count = min(left, rng.choice(shapes))
        size = rng.choice(sizes) * GiB
        gpus = tuple(
            Gpu(index=i, total_vram_bytes=size, allocatable_vram_bytes=loaded(size, rng, busy)) for i in range(count)
        )
        ram = rng.choice((128, 256, 512, 1024)) * GiB
        workers.append(
            Worker(id=name, name=name, total_ram_bytes=ram, allocatable_ram_bytes=loaded(ram, rng, busy), gpus=gpus)
        )
        left -= count
    return Cluster(workers=tuple(workers))


def unified_worker(name: str, rng: random.Random, busy: float) -> Worker:
    """An Apple-style worker: one GPU on a shared pool, three quarters of it usable as VRAM."""
    pool = rng.choice((64, 128, 192, 512)) * GiB
    vram = pool * 3 // 4
    gpu = Gpu(index=0, type="metal", total_vram_bytes=vram, allocatable_vram_bytes=loaded(vram, rng, busy))
    return Worker(
        id=name,
        name=name,
        unified_memory=True,
        total_ram_bytes=pool,
        allocatable_ram_bytes=loaded(pool, rng, busy),
        gpus=(gpu,),
    )


def make_deployment(where: Cluster, profile: MemoryProfile, rng: random.Random) -> Deployment:
    selection = None
    if rng.random() < 0.1:
        chosen = rng.sample(where.workers, k=min(len(where.workers), rng.choice((1, 1, 2))))
        refs = [GpuRef(worker=w.name, type=g.type, index=g.index) for w in chosen for g in w.gpus]
        selection = tuple(rng.sample(refs, k=min(len(refs), rng.randint(1, 4))))
    ngl = rng.randint(1, profile.n_layers) if rng.random() < 0.1 else None
    return Deployment(
        name="bench",
        profile=profile,
        params=LlamaParams(n_gpu_layers=ngl),
        cpu_offloading=rng.random() < 0.8,
        distributed_inference_across_workers=rng.random() < 0.5
        or (selection is not None and len({r.worker for r in selection}) > 1),
        gpu_selection=selection,
    )


def make_stress(count: int, seed: int, time_limit_s: float) -> list[Case]:
    """1,024 GPUs of at most 48 GiB and a large model: only several workers together hold it."""
    cases = []
    sizes, shapes, _ = FLAVOURS["consumer"]
    for index in range(count):
        rng = random.Random(f"{seed}-stress-{index}")
        model = rng.choice([m for m in MODELS if m.name in STRESS_MODELS])
        profile = make_profile(model, rng.choice((8, 16, 32)), rng)
        busy = rng.choice((0.0, 0.3, 0.6))
        workers: list[Worker] = []
        left = STRESS_GPUS
        while left:
            count_here = min(left, rng.choice(shapes))
            size = rng.choice(sizes) * GiB
            name = f"w{len(workers):04d}"
            gpus = tuple(
                Gpu(index=i, total_vram_bytes=size, allocatable_vram_bytes=loaded(size, rng, busy))
                for i in range(count_here)
            )
            ram = rng.choice((128, 256)) * GiB
            workers.append(
                Worker(id=name, name=name, total_ram_bytes=ram, allocatable_ram_bytes=loaded(ram, rng, busy), gpus=gpus)
            )
            left -= count_here
        deployment = Deployment(
            name="stress", profile=profile, distributed_inference_across_workers=True, cpu_offloading=rng.random() < 0.5
        )
        config = PlannerConfig(policy=rng.choice(list(Policy)), time_limit_s=time_limit_s, seed=seed, alternatives=0)
        cluster = Cluster(workers=tuple(workers))
        cases.append(Case(STRESS_GPUS, index, cluster, deployment, profile, config, model.name, stress=True))
    return cases


def make_suite(sizes: dict[int, int], seed: int, time_limit_s: float) -> list[Case]:
    cases = []
    for n_gpus, count in sizes.items():
        for index in range(count):
            rng = random.Random(f"{seed}-{n_gpus}-{index}")
            model = rng.choice(MODELS)
            profile = make_profile(model, rng.choice((4, 8, 16, 32)), rng)
            where = make_cluster(n_gpus, rng)
            config = PlannerConfig(
                policy=rng.choice(list(Policy)), time_limit_s=time_limit_s, seed=seed, alternatives=rng.choice((0, 3))
            )
            cases.append(Case(n_gpus, index, where, make_deployment(where, profile, rng), profile, config, model.name))
    return cases


# ---------------------------------------------------------------------------------------------
# Running and reporting
# ---------------------------------------------------------------------------------------------


def run_case(case: Case) -> Outcome:
    started = time.perf_counter()
    plan = heuristics.plan(case.cluster, case.deployment, case.config, case.profile)
    heuristic_s = time.perf_counter() - started
    started = time.perf_counter()
    result = solve(case.cluster, case.deployment, case.profile, case.config, hint=plan.layout)
    solver_s = time.perf_counter() - started
    return Outcome(
        case=case,
        heuristic_s=heuristic_s,
        heuristic=plan.layout,
        solver_s=solver_s,
        solver_status=result.status,
        solver=None if result.best is None else result.best.layout,
        strict_optimal=result.strict_optimal,
    )


def tiers(layout: Layout | None) -> tuple[int, int, int] | None:
    return None if layout is None else (layout.gpu_layers, len(layout.workers), len(layout.devices))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def describe(outcome: Outcome) -> str:
    case = outcome.case
    return (
        f"{case.gpus} GPUs #{case.index} ({case.model}, {len(case.cluster.workers)} workers): "
        f"heuristic {tiers(outcome.heuristic)} vs solver {tiers(outcome.solver)} (layers, workers, GPUs)"
    )


def report(outcomes: list[Outcome]) -> bool:
    print(f"{'GPUs':>5} {'engine':<9} {'cases':>5} {'median':>9} {'p95':>9}  statuses")
    main = [o for o in outcomes if not o.case.stress]
    for n_gpus in sorted({o.case.gpus for o in main}):
        group = [o for o in main if o.case.gpus == n_gpus]
        heuristic_status = Counter("feasible" if o.heuristic else "infeasible" for o in group)
        solver_status = Counter(o.solver_status.value for o in group)
        for engine, times, statuses in (
            ("heuristic", [o.heuristic_s for o in group], heuristic_status),
            ("solver", [o.solver_s for o in group], solver_status),
        ):
            counts = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
            print(
                f"{n_gpus:>5} {engine:<9} {len(group):>5} {statistics.median(times) * 1000:>7.1f}ms "
                f"{percentile(times, 0.95) * 1000:>7.1f}ms  {counts}"
            )
    return compare(main) & targets(main) & stress_report([o for o in outcomes if o.case.stress])


def compare(outcomes: list[Outcome]) -> bool:
    more_layers, fewer_workers, fewer_gpus, worse = [], [], [], []
    for o in outcomes:
        h, s = tiers(o.heuristic), tiers(o.solver)
        if s is None:
            if h is not None and o.solver_status is Status.INFEASIBLE:
                worse.append(o)
            continue
        key_h = (-1, 0, 0) if h is None else (h[0], -h[1], -h[2])
        key_s = (s[0], -s[1], -s[2])
        if key_s < key_h and o.strict_optimal:
            worse.append(o)
        elif h is None or s[0] > h[0]:
            more_layers.append(o)
        elif s[0] == h[0] and s[1] < h[1]:
            fewer_workers.append(o)
        elif s[:2] == h[:2] and s[2] < h[2]:
            fewer_gpus.append(o)
    total = len(outcomes)
    print(f"\nSolver better than the heuristic, out of {total} cases:")
    for label, group in (
        ("more layers on GPUs", more_layers),
        ("same layers, fewer workers", fewer_workers),
        ("same layers and workers, fewer GPUs", fewer_gpus),
    ):
        print(f"  {label:<36} {len(group):>4} ({len(group) / total:6.1%})")
        if group:
            print(f"    e.g. {describe(group[0])}")
    print(f"  proven worse than the heuristic (must be 0): {len(worse)}")
    for o in worse[:3]:
        print(f"    {describe(o)}")
    return not worse


def targets(outcomes: list[Outcome]) -> bool:
    ok = True
    print("\nTargets:")
    for n_gpus in sorted({o.case.gpus for o in outcomes if o.case.gpus <= SMALL_TARGET_GPUS}):
        median = statistics.median(o.solver_s for o in outcomes if o.case.gpus == n_gpus)
        passed = median < SMALL_TARGET_S
        ok &= passed
        limit_ms = SMALL_TARGET_S * 1000
        print(f"  solver median at {n_gpus} GPUs {median * 1000:.1f} ms < {limit_ms:.0f} ms: {_verdict(passed)}")
    large = [o for o in outcomes if o.case.gpus == LARGE_TARGET_GPUS]
    if large:
        median = statistics.median(o.solver_s for o in large)
        optimal = sum(o.solver_status is Status.OPTIMAL for o in large) / len(large)
        settled = sum(o.solver_status in (Status.OPTIMAL, Status.INFEASIBLE) for o in large) / len(large)
        fast, proven = median < LARGE_TARGET_S, settled >= LARGE_OPTIMAL_SHARE
        print(f"  solver median at {LARGE_TARGET_GPUS} GPUs {median:.2f} s < {LARGE_TARGET_S:.0f} s: {_verdict(fast)}")
        print(
            f"  proven at {LARGE_TARGET_GPUS} GPUs (OPTIMAL {optimal:.0%}, or INFEASIBLE) {settled:.0%} "
            f">= {LARGE_OPTIMAL_SHARE:.0%}: {_verdict(proven)}"
        )
        ok &= fast and proven
    return ok


def stress_report(outcomes: list[Outcome]) -> bool:
    """The distributed stress set: strict tiers proven, tie-break within its budget."""
    if not outcomes:
        return True
    times = [o.solver_s for o in outcomes]
    strict = sum(o.strict_optimal for o in outcomes)
    statuses = Counter(o.solver_status.value for o in outcomes)
    print(f"\nDistributed stress, {STRESS_GPUS} GPUs of at most 48 GiB, models {', '.join(STRESS_MODELS)}:")
    print(
        f"  solver median {statistics.median(times):.2f} s, p95 {percentile(times, 0.95):.2f} s; "
        f"statuses {dict(sorted(statuses.items()))}; strict tiers proven in {strict} of {len(outcomes)}"
    )
    for o in outcomes:
        print(f"    {describe(o)}, solver {o.solver_s:.2f} s {o.solver_status.value}")
    return compare(outcomes)


def _verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few cases per size (about a minute)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--time-limit", type=float, default=10.0, help="solver time limit per case, seconds")
    args = parser.parse_args()
    cases = make_suite(QUICK_SUITE if args.quick else FULL_SUITE, args.seed, args.time_limit)
    cases += make_stress(QUICK_STRESS if args.quick else FULL_STRESS, args.seed, args.time_limit)
    started = time.perf_counter()
    outcomes = [run_case(case) for case in cases]
    print(f"{len(cases)} cases in {time.perf_counter() - started:.1f} s (seed {args.seed})\n")
    ok = report(outcomes)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
