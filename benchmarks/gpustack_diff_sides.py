"""Both sides of ``gpustack_diff.py``: GPUStack 2.3.0's own selector and scorer, and layerfit's
heuristic through the GPUStack adapter, each answer turned into the same ``Normal`` candidates."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from gpustack.policies.candidate_selectors import gguf_resource_fit_selector as gguf_module
from gpustack.policies.resource_view import ResourceView
from gpustack.policies.scorers.placement_scorer import PlacementScorer
from gpustack_diff_scenarios import Scenario, gpustack_instance
from vs_gpustack import gpustack_model, gpustack_worker

from layerfit.domain import PlannerConfig
from layerfit.errors import LayerfitError
from layerfit.gpustack import candidate_dict, cluster_from_gpustack, config_from_gpustack, deployment_from_gpustack
from layerfit.gpustack.inputs import workers_by_name
from layerfit.gpustack.messages import gpustack_messages
from layerfit.gpustack.parser_table import ORDER, ParserTable
from layerfit.heuristics import plan as heuristic_plan
from layerfit.memory.splits import device_blocks


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
    """Binpack score of each candidate: GPUStack's scorer on its side, layerfit's on the other."""
    spread: dict[tuple[Any, ...], float] = field(default_factory=dict)
    """GPUStack's own spread score of each candidate, on both sides (what the adapter's candidates
    get in GPUStack's scheduler)."""
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


def spread_scores(case: Scenario, candidates: Sequence[Normal]) -> dict[tuple[Any, ...], float]:
    """GPUStack's own spread scorer over these candidates: it counts the running instances on
    each candidate's main worker and GPUs (its RPC servers do not count)."""
    if not candidates:
        return {}
    running = [gpustack_instance(i) for i in case.instances]
    model = gpustack_model({**case.model, "placement_strategy": "spread"})
    scorer = PlacementScorer(model, running, resource_view=ResourceView(running))
    by_name = {w["name"]: gpustack_worker(w) for w in case.workers}
    shells = [SimpleNamespace(worker=by_name[c.main], gpu_indexes=list(c.gpus), score=None) for c in candidates]
    asyncio.run(scorer.score(shells))  # type: ignore[arg-type]
    return {c.key: float(shell.score) for c, shell in zip(candidates, shells, strict=True)}


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
    return Outcome(normals, list(selector.get_messages()), scores, spread_scores(case, normals), seconds=seconds)


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
    messages = gpustack_messages(plan, selected)
    return Outcome(normals, messages, scores, spread_scores(case, normals), seconds=seconds)
