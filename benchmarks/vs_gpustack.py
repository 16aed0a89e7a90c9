"""layerfit against GPUStack 2.3.0's own GGUF selector, on the same generated scenarios.

GPUStack's real ``GGUFResourceFitSelector`` runs unchanged except for its estimator:
``calculate_gguf_model_resource_claim`` (a gguf-parser subprocess in production) is replaced by
an in-process table computed from the same memory profile layerfit plans with, offloading the
output layer last as gguf-parser does (``OffloadOrder.OUTPUT_LAST``, used by layerfit here too).
Both sides therefore see identical memory numbers; what differs is the search.

Per scenario class the report gives: agreement of layerfit's heuristic with GPUStack (the best
of its candidates has the GPU layers, workers and GPUs of the best of GPUStack's); wins of
layerfit's planner (more layers on GPUs, or as many on fewer workers or GPUs; each re-checked with
``check``); losses (the planner behind GPUStack: must be 0); both sides' time in the same run and
their ratio; and how often GPUStack called its estimator (each call is a gguf-parser process in
production, whose cost the in-process figure leaves out). GPUStack's best is taken as the best of
all its candidates, which is generous to it. Manual selections that layerfit meets with fewer GPUs
than selected are compared on layers only (GPUStack uses every selected GPU).

Needs the gpustack extra (a separate venv, see .ci/run):
``.venv-gpustack/bin/python benchmarks/vs_gpustack.py [--per-class N] [--seed S]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpustack.policies.candidate_selectors import gguf_resource_fit_selector as gguf_module
from gpustack.policies.resource_view import ResourceView
from gpustack.schemas.models import GPUSelector, Model
from gpustack.schemas.workers import GPUDeviceStatus, MemoryInfo, SystemReserved, Worker, WorkerStateEnum, WorkerStatus

from layerfit.check import check_layout
from layerfit.domain import ComputeBuffer, GiB, MemoryProfile, MiB, PlannerConfig
from layerfit.domain.layout import Layout
from layerfit.gpustack import cluster_from_gpustack, config_from_gpustack, deployment_from_gpustack
from layerfit.gpustack.parser_table import ORDER, ParserTable
from layerfit.heuristics import plan as heuristic_plan
from layerfit.planning.planner import plan as planner_plan

CLASSES = ("single_gpu", "multi_gpu", "distributed", "partial", "cpu_only", "unified", "manual", "ngl", "ts")

# ---------------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------------


@dataclass
class Scenario:
    kind: str
    workers: list[dict[str, Any]]
    model: dict[str, Any]
    profile: MemoryProfile


def _worker(number: int, ram_gib: int, gpus: Sequence[int], gpu_type: str = "cuda") -> dict[str, Any]:
    return {
        "id": number + 1,
        "name": f"w{number:02d}",
        "ram": ram_gib * GiB,
        "gpus": [g * GiB for g in gpus],
        "type": gpu_type,
        "unified": gpu_type == "mps",
    }


def _profile(rng: random.Random, total_bytes: float) -> MemoryProfile:
    n_blocks = rng.randint(24, 80)
    block = int(total_bytes / (n_blocks + 1.5))
    return MemoryProfile.uniform(
        n_blocks,
        int(block * 0.96),
        int(block * 0.04),
        output_weight_bytes=block,
        token_embedding_bytes=block // 2,
        gpu_fixed_bytes=300 * MiB,
        compute=ComputeBuffer(full_offload_bytes=300 * MiB, partial_offload_bytes=600 * MiB),
        host_fixed_bytes=300 * MiB,
        host_compute=ComputeBuffer(full_offload_bytes=100 * MiB, partial_offload_bytes=400 * MiB),
        rpc_host_fixed_bytes=100 * MiB,
    )


def _model(kind: str, params: list[str], **fields: Any) -> dict[str, Any]:
    return {
        "name": f"{kind}-model",
        "backend_parameters": params,
        "cpu_offloading": True,
        "distributed_inference_across_workers": False,
        "placement_strategy": "spread",
        **fields,
    }


def scenario(kind: str, rng: random.Random) -> Scenario:
    sizes = [12, 16, 24, 48, 80]
    params = ["--ctx-size=4096"]
    if kind == "single_gpu":
        workers = [
            _worker(i, rng.choice([64, 128]), rng.choices(sizes, k=rng.randint(1, 4))) for i in range(rng.randint(1, 8))
        ]
        biggest = max(g for w in workers for g in w["gpus"])
        return Scenario(kind, workers, _model(kind, params), _profile(rng, biggest * rng.uniform(0.3, 0.85)))
    if kind == "multi_gpu":
        size = rng.choice([16, 24])
        workers = [_worker(i, 256, [size] * rng.randint(2, 8)) for i in range(rng.randint(1, 6))]
        most = max(sum(w["gpus"]) for w in workers)
        return Scenario(kind, workers, _model(kind, params), _profile(rng, rng.uniform(size * 1.2, most * 0.85)))
    if kind == "distributed":
        size = rng.choice([8, 12, 16, 24])
        workers = [_worker(i, 128, [size] * rng.randint(1, 2)) for i in range(rng.randint(4, 24))]
        most, everything = max(sum(w["gpus"]) for w in workers), sum(sum(w["gpus"]) for w in workers)
        total = rng.uniform(most * 1.2, max(most * 1.3, min(everything * 0.6, 8 * size * GiB)))
        model = _model(kind, params, distributed_inference_across_workers=True, cpu_offloading=rng.random() < 0.5)
        return Scenario(kind, workers, model, _profile(rng, total))
    if kind == "partial":
        workers = [_worker(i, 512, rng.choices([8, 12, 16], k=rng.randint(1, 3))) for i in range(rng.randint(1, 6))]
        most = max(sum(w["gpus"]) for w in workers)
        return Scenario(kind, workers, _model(kind, params), _profile(rng, most * rng.uniform(1.3, 3.0)))
    if kind == "cpu_only":
        workers = [_worker(i, rng.choice([32, 64, 128, 256]), []) for i in range(rng.randint(1, 6))]
        most = max(w["ram"] for w in workers)
        return Scenario(kind, workers, _model(kind, params), _profile(rng, most * rng.uniform(0.2, 0.8)))
    if kind == "unified":
        workers = [
            _worker(i, ram, [ram * 3 // 4], "mps")
            for i, ram in enumerate(rng.choices([32, 64, 128], k=rng.randint(1, 4)))
        ]
        workers += [_worker(len(workers) + i, 64, [24]) for i in range(rng.randint(0, 2))]
        biggest = max(g for w in workers for g in w["gpus"])
        model = _model(kind, params, distributed_inference_across_workers=rng.random() < 0.5)
        return Scenario(kind, workers, model, _profile(rng, biggest * rng.uniform(0.4, 1.6)))
    if kind == "manual":
        workers = [_worker(i, 128, rng.choices([16, 24, 48], k=rng.randint(2, 4))) for i in range(rng.randint(2, 6))]
        chosen = rng.choice(workers)
        picked = sorted(rng.sample(range(len(chosen["gpus"])), rng.randint(1, len(chosen["gpus"]))))
        ids = [f"{chosen['name']}:cuda:{i}" for i in picked]
        room = sum(chosen["gpus"][i] for i in picked)
        model = _model(kind, params, gpu_selector={"gpu_ids": ids})
        return Scenario(kind, workers, model, _profile(rng, room * rng.uniform(0.3, 0.8)))
    if kind == "ngl":
        workers = [_worker(i, 256, rng.choices([12, 16, 24], k=rng.randint(1, 3))) for i in range(rng.randint(1, 6))]
        biggest = max(g for w in workers for g in w["gpus"])
        profile = _profile(rng, biggest * rng.uniform(0.8, 2.5))
        layers = rng.randint(1, profile.n_blocks)
        return Scenario(kind, workers, _model(kind, [*params, f"--gpu-layers={layers}"]), profile)
    if kind == "ts":
        workers = [_worker(i, 256, [rng.choice([16, 24])] * rng.randint(2, 4)) for i in range(rng.randint(1, 4))]
        fewest = min(len(w["gpus"]) for w in workers)
        split = [rng.randint(1, 4) for _ in range(rng.randint(2, fewest))]
        most = min(w["gpus"][0] for w in workers) * len(split)
        params = [*params, "--tensor-split=" + ",".join(str(s) for s in split)]
        return Scenario(kind, workers, _model(kind, params), _profile(rng, most * rng.uniform(0.3, 0.8)))
    raise ValueError(kind)


def gpustack_worker(data: dict[str, Any]) -> Worker:
    """A GPUStack worker; ``data["reserved"]`` is its system reserve (RAM, VRAM), 2 and 0.5 GiB by default."""
    reserved = data.get("reserved", (2 * GiB, GiB // 2))
    status = WorkerStatus.get_default_status()
    status.memory = MemoryInfo(total=data["ram"], is_unified_memory=data["unified"])
    status.gpu_devices = [
        GPUDeviceStatus(index=i, type=data["type"], name=f"gpu{i}", memory=MemoryInfo(total=size))
        for i, size in enumerate(data["gpus"])
    ]
    return Worker(
        id=data["id"],
        name=data["name"],
        hostname=data["name"],
        ip=f"10.0.0.{data['id']}",
        ifname="eth0",
        labels={},
        system_reserved=SystemReserved(ram=reserved[0], vram=reserved[1]),
        status=status,
        state=WorkerStateEnum.READY,
        cluster_id=1,
    )


def gpustack_model(data: dict[str, Any]) -> Model:
    selector = data.get("gpu_selector")
    return Model(
        id=1,
        cluster_id=1,
        source="huggingface",
        huggingface_repo_id="org/model",
        huggingface_filename="model.gguf",
        backend="Custom",
        replicas=1,
        **{k: v for k, v in data.items() if k != "gpu_selector"},
        gpu_selector=None if selector is None else GPUSelector(gpu_ids=selector["gpu_ids"]),
    )


# ---------------------------------------------------------------------------------------------
# Running both and comparing
# ---------------------------------------------------------------------------------------------

Key = tuple[int, int, int]
"""(layers on GPUs, -workers, -GPUs): larger is better."""


def layout_key(layout: Layout) -> Key:
    return (layout.gpu_layers, -len(layout.workers), -len(layout.devices))


def gpustack_key(candidate: Any) -> Key:
    subordinates = candidate.subordinate_workers or []
    gpus = len(candidate.gpu_indexes or []) + sum(len(s.gpu_indexes or []) for s in subordinates)
    workers = 1 + len({s.worker_id for s in subordinates})
    return (candidate.computed_resource_claim.offload_layers or 0, -workers, -gpus)


@dataclass
class Tally:
    scenarios: int = 0
    agree: int = 0
    wins: int = 0
    losses: int = 0
    unchecked_wins: int = 0
    subset: int = 0
    """Manual selections that layerfit met with fewer GPUs than selected (GPUStack uses them all)."""
    gpustack_s: float = 0.0
    estimator_s: float = 0.0
    layerfit_s: float = 0.0
    heuristic_s: float = 0.0
    estimator_calls: int = 0
    ratios: list[float] = field(default_factory=list)
    """Per scenario: layerfit's planner time over GPUStack's selector time."""
    cpu_ratios: list[float] = field(default_factory=list)
    """The same in process CPU time."""
    notes: list[str] = field(default_factory=list)


def timed(action: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = action()
    return result, time.perf_counter() - started


def timed_cpu(action: Callable[[], Any]) -> tuple[Any, float, float]:
    """The result, wall time and process CPU time (both sides run in this process: on a shared
    machine the CPU time leaves out the time spent waiting for a core)."""
    started = time.process_time()
    result, wall = timed(action)
    return result, wall, time.process_time() - started


def run(case: Scenario, tally: Tally, time_limit_s: float) -> None:
    estimator = ParserTable(case.profile)
    gguf_module.calculate_gguf_model_resource_claim = estimator  # the one replaced function
    workers = [gpustack_worker(w) for w in case.workers]
    model = gpustack_model(case.model)
    selector = gguf_module.GGUFResourceFitSelector(model, [], None, resource_view=ResourceView([]))
    theirs, gpustack_s, gpustack_cpu_s = timed_cpu(lambda: asyncio.run(selector.select_candidates(workers)))
    base = PlannerConfig(offload_order=ORDER, time_limit_s=time_limit_s)

    def layerfit_plan() -> Any:
        cluster = cluster_from_gpustack([gpustack_worker(w) for w in case.workers])
        deployment = deployment_from_gpustack(gpustack_model(case.model), profile=case.profile, cluster=cluster)
        config = config_from_gpustack(model, base)
        return cluster, deployment, config, planner_plan(cluster, deployment, config, case.profile, explain=False)

    (cluster, deployment, config, ours), layerfit_s, layerfit_cpu_s = timed_cpu(layerfit_plan)
    quick, heuristic_s = timed(lambda: heuristic_plan(cluster, deployment, config, case.profile))
    their_best = max((gpustack_key(c) for c in theirs), default=None)
    our_best = None if ours.best is None else layout_key(ours.best.layout)
    # Both selectors return several candidates for the scorer to choose from: compare the best of each set.
    quick_best = max((layout_key(c.layout) for c in (quick.best, *quick.alternatives) if c is not None), default=None)
    tally.scenarios += 1
    tally.gpustack_s += gpustack_s
    tally.layerfit_s += layerfit_s
    tally.heuristic_s += heuristic_s
    tally.ratios.append(layerfit_s / gpustack_s if gpustack_s > 0 else float("inf"))
    tally.cpu_ratios.append(layerfit_cpu_s / gpustack_cpu_s if gpustack_cpu_s > 0 else float("inf"))
    if layerfit_s > 2 * gpustack_s:
        tally.notes.append(
            f"slow: {case.kind} layerfit {layerfit_s * 1000:.1f} ms (CPU {layerfit_cpu_s * 1000:.1f}) vs gpustack "
            f"{gpustack_s * 1000:.1f} ms (CPU {gpustack_cpu_s * 1000:.1f}) "
            f"({_engines(ours.stats)})"
        )
    tally.estimator_calls += estimator.calls
    tally.estimator_s += estimator.seconds
    tally.agree += quick_best == their_best
    if quick_best != their_best:
        tally.notes.append(f"{case.kind}: heuristic {quick_best} vs gpustack {their_best} (planner {our_best})")
    selected = len((case.model.get("gpu_selector") or {}).get("gpu_ids", []))
    our_gpus = 0 if our_best is None else -our_best[2]
    if selected and our_best is not None and our_gpus < selected and their_best is not None:
        # Not a win under GPUStack's rule (every selected GPU is used): compare layers only.
        tally.subset += 1
        our_best, their_best = our_best[:1] + their_best[1:], their_best
    if our_best is not None and (their_best is None or our_best > their_best):
        problems = check_layout(cluster, deployment, case.profile, ours.best.layout, config)
        tally.wins += not problems
        tally.notes.append(f"{case.kind}: win: layerfit {our_best} vs gpustack {their_best}")
        tally.unchecked_wins += bool(problems)
    elif their_best is not None and (our_best is None or our_best < their_best):
        tally.losses += 1
        tally.notes.append(f"loss: gpustack {their_best} vs layerfit {our_best} ({case.model['backend_parameters']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="list every disagreement and win")
    parser.add_argument("--classes", default=",".join(CLASSES), help="comma-separated scenario classes")
    parser.add_argument("--time-limit", type=float, default=2.0, help="CP-SAT limit per plan, seconds")
    args = parser.parse_args()
    logging.getLogger("gpustack").setLevel(logging.ERROR)
    print(
        f"{'class':<12} {'n':>3} {'agree':>5} {'wins':>4} {'loss':>4} {'gpustack s':>10} {'(search)':>8} "
        f"{'layerfit s':>10} {'ratio':>6} {'(search)':>8} {'heur s':>7} {'est. calls':>10} {'<=1x':>5} {'max x':>6}"
    )
    # A scheduler is a long-lived process: one untimed scenario per class loads both sides' lazy
    # imports (CP-SAT's among them) before anything is measured.
    for kind in CLASSES:
        run(scenario(kind, random.Random(f"warm-up-{kind}")), Tally(), args.time_limit)
    # Both sides' imports leave ~400,000 objects for the cyclic garbage collector to walk: a full
    # collection then takes 200-270 ms and lands in whichever scenario happens to be timed (seen as
    # a 5-7x "slow" cpu_only plan of 263 ms). A long-lived server freezes what its start-up built.
    gc.collect()
    gc.freeze()
    total = Tally()
    for number, kind in enumerate(CLASSES):
        if kind not in args.classes.split(","):
            continue
        tally = Tally()
        rng = random.Random(args.seed * 1000 + number)
        for _ in range(args.per_class):
            run(scenario(kind, rng), tally, args.time_limit)
        _print(kind, tally)
        for name in ("scenarios", "agree", "wins", "losses", "unchecked_wins", "subset", "estimator_calls"):
            setattr(total, name, getattr(total, name) + getattr(tally, name))
        for name in ("gpustack_s", "estimator_s", "layerfit_s", "heuristic_s"):
            setattr(total, name, getattr(total, name) + getattr(tally, name))
        total.notes += tally.notes
        total.ratios += tally.ratios
        total.cpu_ratios += tally.cpu_ratios
    _print("all", total)
    if args.verbose:
        for note in total.notes:
            print(note)
    else:
        for note in (n for n in total.notes if n.startswith(("loss", "slow"))):
            print(note)
    print(_ratio_targets(total.ratios))
    print(_ratio_targets(total.cpu_ratios, "in CPU time"))
    print(f"load average {os.getloadavg()[0]:.1f} (wall ratios on a shared machine include waiting for a core)")
    if total.subset:
        print(f"{total.subset} manual selections met with fewer GPUs than selected: compared on layers only")
    if total.unchecked_wins:
        print(f"{total.unchecked_wins} planner layouts failed check (a bug)")
    print("gpustack s: its selector with the estimator in-process; (search): the same less the estimator's time.")
    print(
        "ratio: layerfit's planner (conversion, heuristic, CP-SAT, check) / gpustack s; (search): / its search alone."
    )
    print("agree: the best of the heuristic's candidates equals the best of GPUStack's (GPU layers, workers, GPUs).")
    print("Each estimator call is a gguf-parser subprocess in production.")
    print("per scenario: how often layerfit's planner is no slower than GPUStack's selector, and at most 2x slower.")


def _engines(stats: Sequence[Any]) -> str:
    """Each engine's proof and CP-SAT steps, from ``EngineStats.details``."""
    return "; ".join(f"{s.engine}: proof {s.details.get('proof', '-')} {s.details.get('steps', '')}" for s in stats)


def _ratio_targets(ratios: list[float], measure: str = "in wall time") -> str:
    """Issue 15's targets, per scenario: no slower in at least 90 %, never more than 2x slower."""
    if not ratios:
        return f"per scenario {measure}: no scenarios"
    no_slower = sum(r <= 1 for r in ratios) / len(ratios)
    worst = max(ratios)
    verdict = "PASS" if no_slower >= 0.9 and worst <= 2 else "FAIL"
    return (
        f"per scenario {measure}: no slower in {no_slower:.0%} of {len(ratios)} (target >= 90 %), "
        f"worst ratio {worst:.2f} (target <= 2): {verdict}"
    )


def _print(kind: str, tally: Tally) -> None:
    search_s = tally.gpustack_s - tally.estimator_s
    ratio = tally.layerfit_s / tally.gpustack_s if tally.gpustack_s else float("nan")
    search_ratio = tally.layerfit_s / search_s if search_s > 0 else float("nan")
    print(
        f"{kind:<12} {tally.scenarios:>3} {tally.agree:>5} {tally.wins:>4} {tally.losses:>4} {tally.gpustack_s:>10.2f} "
        f"{search_s:>8.2f} {tally.layerfit_s:>10.2f} {ratio:>6.2f} {search_ratio:>8.2f} {tally.heuristic_s:>7.2f} "
        f"{tally.estimator_calls:>10} {sum(r <= 1 for r in tally.ratios):>5} {max(tally.ratios, default=0):>6.2f}"
    )


if __name__ == "__main__":
    main()
