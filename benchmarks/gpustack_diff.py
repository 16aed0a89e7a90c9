"""A differential test of layerfit's GPUStack-order heuristic against GPUStack 2.3.0's own selector.

Both run on the same randomly generated inputs: GPUStack's real ``Worker``/``Model``/
``ModelInstance`` objects (1-20 workers, mixed GPU counts and sizes, unified-memory and CPU-only
workers, running instances and system reserves, GPUStack's ``ResourceView``), deployments with
distribution and CPU offloading on or off, manual selections (one GPU, several on one worker,
across workers), ``-ngl``/``-ts``/``-c``/``--parallel``/``-ctk``, dense and MoE models, models
that fit nowhere. GPUStack's gguf-parser call is answered from the same memory profile layerfit
plans with (``layerfit.gpustack.parser_table``, output layer last as gguf-parser offloads it); the
profile is layerfit's estimate of a header-only GGUF of a real model shape under the scenario's
flags, so both sides see identical numbers. layerfit's side goes through the adapter's
conversions (``cluster_from_gpustack`` ...) and its candidates through ``candidate_dict``, so the
adapter's output is what is compared.

Compared per scenario: whether a candidate is found; the candidate sets (main worker, GPU indexes,
RPC servers, offload layers); for candidates both return: GPU order, RAM and per-device VRAM
claims, the layer split (GPUStack's ``tensor_split`` of VRAM bytes turned into llama.cpp's layer
counts), RPC servers' layers; GPUStack's binpack score of each candidate (its own scorer) against
layerfit's, and the best by it; the messages when nothing fits. Every divergence is printed with
its kind; ``--verbose`` prints the inputs too.

Needs the gpustack extra (a separate venv, see .ci/run):
``PYTHONPATH=. .venv-gpustack/bin/python benchmarks/gpustack_diff.py --count 200 --seed 0``
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpustack.policies.candidate_selectors import gguf_resource_fit_selector as gguf_module
from gpustack.policies.resource_view import ResourceView
from gpustack.policies.scorers.placement_scorer import PlacementScorer
from gpustack.schemas.models import (
    ComputedResourceClaim,
    DistributedServers,
    ModelInstance,
    ModelInstanceSubordinateWorker,
)

from layerfit.domain import GiB, LlamaParams, MemoryProfile, PlannerConfig
from layerfit.errors import LayerfitError
from layerfit.estimators.estimate import estimate_profile
from layerfit.estimators.synthetic import REAL_MODELS, write_gguf
from layerfit.gpustack import candidate_dict, cluster_from_gpustack, config_from_gpustack, deployment_from_gpustack
from layerfit.gpustack.inputs import workers_by_name
from layerfit.gpustack.messages import gpustack_messages
from layerfit.gpustack.parser_table import ORDER, ParserTable
from layerfit.heuristics import plan as heuristic_plan
from layerfit.memory.splits import device_blocks

sys.path.insert(0, str(Path(__file__).parent))
from vs_gpustack import gpustack_model, gpustack_worker

GPU_SIZES = (8, 12, 16, 24, 32, 48, 80)
RAM_SIZES = (16, 32, 64, 128, 256, 512)

# ---------------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------------


@dataclass
class Scenario:
    number: int
    workers: list[dict[str, Any]]
    instances: list[dict[str, Any]]
    model: dict[str, Any]
    shape: str
    profile: MemoryProfile
    tags: list[str] = field(default_factory=list)


def _worker_data(rng: random.Random, number: int, kind: str) -> dict[str, Any]:
    ram = rng.choice(RAM_SIZES)
    if kind == "cpu":
        gpus: list[int] = []
        gpu_type = "cuda"
    elif kind == "unified":
        ram = rng.choice((32, 64, 128, 192))
        gpus = [ram * rng.choice((3, 4)) // 4]
        gpu_type = "mps" if rng.random() < 0.8 else "cuda"
    else:
        count = rng.choice((1, 1, 2, 2, 4, 8))
        alike = rng.random() < 0.6
        gpus = [rng.choice(GPU_SIZES)] * count if alike else [rng.choice(GPU_SIZES) for _ in range(count)]
        gpu_type = "cuda"
    reserve = rng.random() < 0.5
    return {
        "id": number + 1,
        "name": f"w{number:02d}",
        "ram": ram * GiB,
        "gpus": [g * GiB for g in gpus],
        "type": gpu_type,
        # GPUStack's detector flags Apple workers unified; an unflagged mps worker (layerfit: unified
        # all the same, a documented difference) is rare, and a flagged CUDA one is a Jetson/GB10.
        "unified": kind == "unified" and rng.random() < 0.9,
        "reserved": (rng.choice((1, 2, 4)) * GiB, rng.choice((0, GiB // 2, GiB))) if reserve else (0, 0),
    }


def _instances(rng: random.Random, workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    running = []
    for number in range(rng.choice((0, 0, 1, 2, 4))):
        main = rng.choice(workers)
        gpus = [i for i in range(len(main["gpus"])) if rng.random() < 0.5]
        subs = []
        others = [w for w in workers if w is not main and w["gpus"]]
        if others and rng.random() < 0.3:
            sub = rng.choice(others)
            subs.append({"worker_id": sub["id"], "gpu_indexes": [0], "vram": {0: rng.randrange(sub["gpus"][0] // 2)}})
        running.append(
            {
                "id": number + 1,
                "worker_id": main["id"],
                "gpu_indexes": gpus,
                "ram": rng.randrange(main["ram"] // 4 + 1),
                "vram": {i: rng.randrange(main["gpus"][i] // 2 + 1) for i in gpus},
                "subs": subs,
            }
        )
    return running


def _selection(rng: random.Random, workers: list[dict[str, Any]]) -> tuple[list[str] | None, str]:
    with_gpus = [w for w in workers if w["gpus"]]
    if not with_gpus or rng.random() < 0.75:
        return None, ""
    mode = rng.choice(("one", "several", "across"))
    if mode == "across" and len(with_gpus) >= 2:
        chosen = rng.sample(with_gpus, rng.randint(2, min(3, len(with_gpus))))
        ids = []
        for worker in chosen:
            picked = rng.sample(range(len(worker["gpus"])), rng.randint(1, min(2, len(worker["gpus"]))))
            ids += [f"{worker['name']}:{worker['type']}:{i}" for i in picked]
        return ids, "select-across"
    worker = rng.choice(with_gpus)
    if mode == "several" and len(worker["gpus"]) >= 2:
        picked = rng.sample(range(len(worker["gpus"])), rng.randint(2, len(worker["gpus"])))
        return [f"{worker['name']}:{worker['type']}:{i}" for i in picked], "select-several"
    return [f"{worker['name']}:{worker['type']}:{rng.randrange(len(worker['gpus']))}"], "select-one"


def scenario(number: int, rng: random.Random, gguf_dir: Path) -> Scenario:
    n_workers = rng.choice((1, 1, 2, 2, 3, 4, 5, 6, 8, 12, 20))
    kinds = rng.choices(("gpu", "unified", "cpu"), weights=(7, 2, 1), k=n_workers)
    workers = [_worker_data(rng, i, kind) for i, kind in enumerate(kinds)]
    tags = sorted({f"{kind}-worker" for kind in kinds})
    if any(w["type"] == "mps" and not w["unified"] for w in workers):
        tags.append("mps-unflagged")
    distributed = rng.random() < 0.4
    remote = sum(len(w["gpus"]) for w in workers) - max(len(w["gpus"]) for w in workers)
    if distributed and 9 <= remote <= 16:
        # GPUStack's exhaustive RPC search (up to 39,203 combinations, each an estimator call) is
        # too slow for a batch: trim the cluster to at most 8 candidate RPC GPUs.
        while sum(len(w["gpus"]) for w in workers) - max(len(w["gpus"]) for w in workers) > 8:
            workers.pop()
    selection, selection_tag = _selection(rng, workers)
    shape = rng.choice(list(REAL_MODELS))
    params = []
    flags: dict[str, Any] = {}
    if rng.random() < 0.5:
        flags["-c"] = str(rng.choice((512, 2048, 4096, 8192, 16384, 32768)))
    if rng.random() < 0.2:
        flags["--parallel"] = str(rng.choice((1, 2, 4)))
    if rng.random() < 0.2:
        flags["-ctk"] = rng.choice(("f16", "q8_0", "q4_0"))
        if rng.random() < 0.5:
            flags["-ctv"] = flags["-ctk"]
            flags["-fa"] = "on"
    for flag, value in flags.items():
        params += [f"{flag}={value}"] if rng.random() < 0.5 else [flag, value]
    path = gguf_dir / f"{shape}.gguf"
    profile = estimate_profile(path, LlamaParams.from_args(params))
    n_layers = profile.n_blocks + 1
    if rng.random() < 0.2:
        layers = rng.choice((0, n_layers, n_layers + 3, rng.randint(1, n_layers - 1), rng.randint(1, n_layers - 1)))
        params += [f"--gpu-layers={layers}"] if rng.random() < 0.5 else ["-ngl", str(layers)]
        tags.append("ngl-" + ("0" if layers == 0 else "all" if layers >= n_layers else "some"))
    if rng.random() < 0.12:
        split = [rng.randint(1, 4) for _ in range(rng.randint(2, 4))]
        params += ["--tensor-split=" + ",".join(str(s) for s in split)]
        tags.append("ts")
    model: dict[str, Any] = {
        "name": f"m{number}",
        "backend_parameters": params,
        "cpu_offloading": rng.random() < 0.6,
        "distributed_inference_across_workers": distributed,
        "placement_strategy": rng.choice(("spread", "binpack")),
    }
    if selection is not None:
        model["gpu_selector"] = {"gpu_ids": selection}
        tags.append(selection_tag)
    tags += ["distributed" if distributed else "single-worker", "cpu-offload" if model["cpu_offloading"] else "no-cpu"]
    if profile.block_expert_bytes is not None:
        tags.append("moe")
    return Scenario(number, workers, _instances(rng, workers), model, shape, profile, tags)


def gpustack_instance(data: dict[str, Any]) -> ModelInstance:
    return ModelInstance(
        id=data["id"],
        name=f"running-{data['id']}",
        model_id=100 + data["id"],
        model_name=f"running-{data['id']}",
        worker_id=data["worker_id"],
        gpu_indexes=data["gpu_indexes"],
        computed_resource_claim=ComputedResourceClaim(ram=data["ram"], vram=data["vram"]),
        distributed_servers=DistributedServers(
            subordinate_workers=[
                ModelInstanceSubordinateWorker(
                    worker_id=sub["worker_id"],
                    gpu_indexes=sub["gpu_indexes"],
                    computed_resource_claim=ComputedResourceClaim(ram=0, vram=sub["vram"]),
                )
                for sub in data["subs"]
            ]
        ),
    )


# ---------------------------------------------------------------------------------------------
# Both sides, normalised
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Normal:
    """One candidate in a form both sides share."""

    main: str
    gpus: tuple[int, ...]
    """The main worker's GPUs in the candidate's order."""
    rpc: tuple[tuple[str, int], ...]
    layers: int
    ram: int
    vram: tuple[int, ...]
    rpc_vram: tuple[int, ...]
    rpc_layers: tuple[int, ...]
    split: tuple[int, ...] | None
    """Layers per device (RPC servers first), as llama.cpp splits them."""

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.main, tuple(sorted(self.gpus)), self.rpc, self.layers)


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name)


def normal(candidate: Any, n_blocks: int, ours: bool) -> Normal:
    claim = _get(candidate, "computed_resource_claim")
    subs = _get(candidate, "subordinate_workers") or []
    worker = _get(candidate, "worker")
    gpus = tuple(_get(candidate, "gpu_indexes") or ())
    vram = _get(claim, "vram") or {}
    layers = int(_get(claim, "offload_layers") or 0)
    split = _get(claim, "tensor_split")
    if split is not None and not ours:
        # GPUStack passes VRAM bytes as llama.cpp's shares: turn them into llama.cpp's layer counts.
        per_device, output = device_blocks(n_blocks, layers, [float(s) for s in split], ORDER)
        split = [blocks + (i == output) for i, blocks in enumerate(per_device)]
    return Normal(
        main=str(worker.name),
        gpus=gpus,
        rpc=tuple((str(_get(s, "worker_name")), int((_get(s, "gpu_indexes") or [-1])[0])) for s in subs),
        layers=layers,
        ram=int(_get(claim, "ram") or 0),
        vram=tuple(int(vram.get(i, 0)) for i in gpus),
        rpc_vram=tuple(int(sum((_get(_get(s, "computed_resource_claim"), "vram") or {}).values())) for s in subs),
        rpc_layers=tuple(int(_get(_get(s, "computed_resource_claim"), "offload_layers") or 0) for s in subs),
        split=None if split is None else tuple(int(s) for s in split),
    )


@dataclass
class Outcome:
    candidates: list[Normal]
    messages: list[str]
    scores: dict[tuple[Any, ...], float] = field(default_factory=dict)
    refused: str = ""
    seconds: float = 0.0


def binpack_scores(case: Scenario, candidates: list[Any]) -> dict[tuple[Any, ...], float]:
    """GPUStack's own binpack scorer over these candidates (its DB lookup of the RPC workers
    replaced by the scenario's workers)."""
    if not candidates:
        return {}
    running = [gpustack_instance(i) for i in case.instances]
    view = ResourceView(running)
    model = gpustack_model({**case.model, "placement_strategy": "binpack"})
    scorer = PlacementScorer(model, running, resource_view=view)
    by_id = {w["id"]: gpustack_worker(w) for w in case.workers}

    async def rpc_score(subordinates: list[Any], scale_type: str) -> float:
        total = 0.0
        for sub in subordinates:
            allocatable = view.allocatable(by_id[sub.worker_id])
            claim = sub.computed_resource_claim
            total += await scorer._score_binpack_item(sub.gpu_indexes, claim, allocatable, scale_type)
        return total

    scorer._score_binpack_subordinate_workers = rpc_score  # type: ignore[method-assign]
    scored = asyncio.run(scorer.score(candidates))
    return {normal(c, case.profile.n_blocks, False).key: float(c.score) for c in scored}


def run_gpustack(case: Scenario) -> Outcome:
    table = ParserTable(case.profile)
    gguf_module.calculate_gguf_model_resource_claim = table
    running = [gpustack_instance(i) for i in case.instances]
    selector = gguf_module.GGUFResourceFitSelector(
        gpustack_model(case.model), running, None, resource_view=ResourceView(running)
    )
    started = time.perf_counter()
    try:
        found = asyncio.run(selector.select_candidates([gpustack_worker(w) for w in case.workers]))
    except Exception as error:  # GPUStack's own failure is an outcome to compare
        return Outcome([], [], refused=f"{type(error).__name__}: {error}")
    seconds = time.perf_counter() - started
    normals = [normal(c, case.profile.n_blocks, False) for c in found]
    scores = binpack_scores(case, [_copy(c) for c in found])
    return Outcome(normals, list(selector.get_messages()), scores, seconds=seconds)


def _copy(candidate: Any) -> Any:
    return candidate.model_copy() if hasattr(candidate, "model_copy") else candidate


def run_layerfit(case: Scenario) -> Outcome:
    running = [gpustack_instance(i) for i in case.instances]
    workers = [gpustack_worker(w) for w in case.workers]
    model = gpustack_model(case.model)
    started = time.perf_counter()
    try:
        cluster = cluster_from_gpustack(workers, running, ResourceView(running))
        deployment = deployment_from_gpustack(model, profile=case.profile, cluster=cluster)
        base = PlannerConfig(offload_order=ORDER, alternatives=100_000, max_rpc_combinations=None, time_limit_s=120)
        config = config_from_gpustack(model, base)
        plan = heuristic_plan(cluster, deployment, config, case.profile)
    except LayerfitError as error:
        return Outcome([], [], refused=f"{type(error).__name__}: {error}")
    seconds = time.perf_counter() - started
    chosen = ([plan.best] if plan.best is not None else []) + list(plan.alternatives)
    by_name = workers_by_name(workers)
    dicts = [candidate_dict(c, cluster, by_name) for c in chosen]
    normals = [normal(d, case.profile.n_blocks, True) for d in dicts]
    scores = {n.key: float(c.score) for n, c in zip(normals, chosen, strict=True)}
    selected = (case.model.get("gpu_selector") or {}).get("gpu_ids")
    return Outcome(normals, gpustack_messages(plan, selected), scores, seconds=seconds)


# ---------------------------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------------------------


def compare(case: Scenario, theirs: Outcome, ours: Outcome) -> list[str]:
    """The kinds of divergence between GPUStack's answer and layerfit's (empty: identical)."""
    kinds: list[str] = []
    if theirs.refused or ours.refused:
        if bool(theirs.refused) != bool(ours.refused):
            kinds.append("refused-" + ("gpustack" if theirs.refused else "layerfit"))
        return kinds
    if bool(theirs.candidates) != bool(ours.candidates):
        kinds.append("found-only-" + ("gpustack" if theirs.candidates else "layerfit"))
    elif theirs.candidates:
        their_layers = max(c.layers for c in theirs.candidates)
        our_layers = max(c.layers for c in ours.candidates)
        if their_layers != our_layers:
            kinds.append("layers-" + ("more" if our_layers > their_layers else "fewer"))
        their_keys = {c.key for c in theirs.candidates}
        our_keys = {c.key for c in ours.candidates}
        if their_keys != our_keys and their_layers == our_layers:
            if our_keys < their_keys:
                kinds.append("set-subset")
            elif our_keys > their_keys:
                kinds.append("set-superset")
            else:
                kinds.append("set-different")
        theirs_by_key = {c.key: c for c in theirs.candidates}
        for candidate in ours.candidates:
            other = theirs_by_key.get(candidate.key)
            if other is None:
                continue
            if other.gpus != candidate.gpus:
                kinds.append("gpu-order")
            if (other.ram, other.vram, other.rpc_vram) != (candidate.ram, candidate.vram, candidate.rpc_vram):
                kinds.append("claims")
            if other.rpc_layers != candidate.rpc_layers:
                kinds.append("rpc-layers")
            if other.split != candidate.split:
                kinds.append("split")
        common = their_keys & our_keys
        if case.model["placement_strategy"] == "binpack" and common:
            for key in common:
                if abs(theirs.scores.get(key, -1) - ours.scores.get(key, -2)) > 1e-6:
                    kinds.append("score")
                    break
            their_best = max(theirs.scores.values())
            best_keys = {k for k, v in theirs.scores.items() if abs(v - their_best) <= 1e-9}
            if ours.candidates[0].key not in best_keys and our_keys >= best_keys:
                kinds.append("best")
    if theirs.messages != ours.messages:
        kinds.append("messages")
    return sorted(set(kinds))


def documented(case: Scenario, theirs: Outcome, ours: Outcome, kinds: list[str]) -> str:
    """The documented difference (README, "Differences from GPUStack's selector") that explains a
    divergent scenario, or ``unexplained``. Checked in this order; the first that applies names it."""
    total = case.profile.n_blocks + 1
    their_keys, our_keys = {c.key for c in theirs.candidates}, {c.key for c in ours.candidates}
    only_theirs = [c for c in theirs.candidates if c.key not in our_keys]
    only_ours = [c for c in ours.candidates if c.key not in their_keys]
    if "mps-unflagged" in case.tags:
        return "mps-is-unified"
    if "ts" in case.tags:
        return "tensor-split"
    if any(0 in c.vram or 0 in c.rpc_vram for c in only_theirs):
        return "idle-gpu"  # GPUStack's split left a GPU of its candidate without a layer
    idle_selected = [c for c in theirs.candidates if c.key in our_keys and (0 in c.vram or 0 in c.rpc_vram)]
    if idle_selected and set(kinds) <= {"claims", "split", "rpc-layers", "score", "best"}:
        return "idle-gpu"  # the same candidate, its idle selected GPU given a layer
    unified = {w["name"] for w in case.workers if w["unified"]}
    if only_theirs and all(c.rpc and ({c.main} | {w for w, _ in c.rpc}) & unified for c in only_theirs):
        return "unified-pool"  # GPUStack's distributed check leaves a unified worker's RAM out of its pool
    partial = theirs.candidates and max(c.layers for c in theirs.candidates) < total
    if kinds == ["set-superset"] and not partial and all(len(c.gpus) >= 2 and not c.rpc for c in only_ours):
        return "equal-gpu-combinations"
    if kinds == ["set-superset"] and not partial and all(len(c.gpus) == 1 and not c.rpc for c in only_ours):
        return "single-gpu-ram-stop"
    if set(kinds) <= {"set-superset", "set-different", "best"} and partial and not only_theirs:
        return "partial-every-candidate"
    if kinds == ["layers-more"] and ours.candidates and not ours.candidates[0].rpc and len(ours.candidates[0].gpus) > 2:
        return "partial-every-candidate"  # GPUStack stops at a GPU count that adds no layers
    if "distributed" in case.tags and (
        set(kinds) & {"found-only-layerfit", "layers-more"}
        or (only_ours and all(c.rpc for c in only_ours) and not any(c.rpc for c in theirs.candidates))
    ):
        return "distributed-main-ram"  # GPUStack's main worker (most VRAM) is short of RAM
    return "unexplained"


def describe(case: Scenario, theirs: Outcome, ours: Outcome) -> str:
    def few(outcome: Outcome) -> str:
        if outcome.refused:
            return "refused " + outcome.refused
        shown = [
            f"{c.main}{list(c.gpus)}+{list(c.rpc)} L{c.layers} ram={c.ram} vram={list(c.vram)} rpc={list(c.rpc_vram)}"
            f" split={c.split}"
            for c in outcome.candidates[:3]
        ]
        more = f" (+{len(outcome.candidates) - 3})" if len(outcome.candidates) > 3 else ""
        return "; ".join(shown) + more + f" | messages {outcome.messages}"

    workers = " ".join(
        f"{w['name']}({'U' if w['unified'] else ''}{w['type']} ram{w['ram'] // GiB} gpus{[g // GiB for g in w['gpus']]}"
        f" res{[r / GiB for r in w['reserved']]})"
        for w in case.workers
    )
    model = {k: v for k, v in case.model.items() if k != "name"}
    their_keys, our_keys = {c.key for c in theirs.candidates}, {c.key for c in ours.candidates}
    only_theirs = sorted(their_keys - our_keys)[:4]
    only_ours = sorted(our_keys - their_keys)[:4]
    scores = [
        (key, round(theirs.scores[key], 4), round(ours.scores[key], 4))
        for key in sorted(their_keys & our_keys)
        if key in theirs.scores and key in ours.scores and abs(theirs.scores[key] - ours.scores[key]) > 1e-6
    ][:3]
    return (
        f"  scenario {case.number} [{case.shape}, {case.profile.n_blocks} blocks] {model}\n"
        f"  workers: {workers}\n  running: {case.instances}\n"
        f"  gpustack: {few(theirs)}\n  layerfit: {few(ours)}\n"
        f"  only gpustack: {only_theirs} ({len(their_keys - our_keys)})\n"
        f"  only layerfit: {only_ours} ({len(our_keys - their_keys)})\n  scores (key, gpustack, layerfit): {scores}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0, help="skip the scenarios before this number")
    parser.add_argument("--verbose", action="store_true", help="print each divergent scenario's inputs")
    parser.add_argument("--only", default="", help="comma-separated divergence kinds or labels to print")
    args = parser.parse_args()
    logging.getLogger("gpustack").setLevel(logging.CRITICAL)
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        gguf_dir = Path(folder)
        for name, spec in REAL_MODELS.items():
            write_gguf(gguf_dir / f"{name}.gguf", spec, tokenizer=False)
        tally: Counter[str] = Counter()
        tags: Counter[str] = Counter()
        labels: Counter[str] = Counter()
        identical = 0
        gpustack_s = layerfit_s = 0.0
        only = set(filter(None, args.only.split(",")))
        for number in range(args.first, args.first + args.count):
            case = scenario(number, random.Random(f"{args.seed}-{number}"), gguf_dir)
            tags.update(case.tags)
            theirs, ours = run_gpustack(case), run_layerfit(case)
            gpustack_s += theirs.seconds
            layerfit_s += ours.seconds
            kinds = compare(case, theirs, ours)
            identical += not kinds
            tally.update(kinds)
            label = documented(case, theirs, ours, kinds) if kinds else ""
            if kinds:
                labels[label] += 1
            if kinds and (not only or only & {*kinds, label}):
                print(f"#{number}: {', '.join(kinds)}  [{label}]  tags {case.tags}")
                if args.verbose:
                    print(describe(case, theirs, ours))
                sys.stdout.flush()
    print(f"\nscenarios {args.count} (seed {args.seed}, from #{args.first}), identical {identical}")
    for kind, count in sorted(tally.items()):
        print(f"  {kind:<22} {count}")
    print("divergent scenarios by documented difference:")
    for label, count in sorted(labels.items()):
        print(f"  {label:<22} {count}")
    print("coverage: " + ", ".join(f"{tag} {count}" for tag, count in sorted(tags.items())))
    print(f"time: gpustack {gpustack_s:.1f} s (estimator in-process), layerfit heuristic {layerfit_s:.1f} s")


if __name__ == "__main__":
    main()
