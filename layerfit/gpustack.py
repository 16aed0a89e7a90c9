"""A GPUStack adapter: GPUStack-shaped workers and model in, GPUStack-shaped candidates out.

GPUStack could call ``schedule_candidates`` in place of its GGUF resource-fit selector. Inputs may be
GPUStack's own objects or plain dicts with its field names; nothing here imports GPUStack.

Fields read:

* worker: ``id``, ``name``, ``ip``, ``labels``, ``status.memory.total`` / ``.allocated`` /
  ``.is_unified_memory``, ``status.gpu_devices[i].index`` / ``.type`` / ``.name`` /
  ``.memory.total`` / ``.memory.allocated``, ``system_reserved.ram`` / ``.vram``.
  Allocatable = total − allocated − reserved, never below zero (GPUStack's own rule).
* model: ``name``, ``backend_parameters``, ``gpu_selector.gpu_ids``, ``cpu_offloading``,
  ``distributed_inference_across_workers``, ``categories`` (``image``, ``embedding``, ``reranker``),
  ``replicas``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from layerfit.domain.cluster import Cluster, Worker
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.layout import Claims
from layerfit.domain.plan import Candidate, Plan
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import InputError
from layerfit.io import load_model
from layerfit.memory import tensor_split_counts
from layerfit.planner import plan as plan_deployment

_MISSING = object()


def field(obj: Any, path: str, default: Any = _MISSING) -> Any:
    """``obj.a.b`` or ``obj["a"]["b"]`` for ``path="a.b"``; ``default`` when a part is absent or None."""
    current = obj
    for part in path.split("."):
        if current is None:
            break
        current = current.get(part) if isinstance(current, Mapping) else getattr(current, part, None)
    if current is None:
        if default is _MISSING:
            raise InputError(path, "missing in the GPUStack object")
        return default
    return current


def _allocatable(total: int, allocated: int, reserved: int) -> int:
    return max(int(total) - int(allocated) - int(reserved), 0)


def worker_from_gpustack(worker: Any) -> Worker:
    """One GPUStack worker as a layerfit ``Worker`` with GPUStack's allocatable rule."""
    name = str(field(worker, "name"))
    reserved_ram = int(field(worker, "system_reserved.ram", 0))
    reserved_vram = int(field(worker, "system_reserved.vram", 0))
    total_ram = int(field(worker, "status.memory.total"))
    gpus = []
    allocated_vram = 0
    for position, device in enumerate(field(worker, "status.gpu_devices", []) or []):
        total = int(field(device, "memory.total", 0))
        allocated = int(field(device, "memory.allocated", 0))
        allocated_vram += allocated
        gpus.append(
            {
                "index": int(field(device, "index", position)),
                "type": str(field(device, "type", "cuda")),
                "name": str(field(device, "name", "")),
                "total_vram_bytes": total,
                "allocatable_vram_bytes": _allocatable(total, allocated, reserved_vram),
            }
        )
    unified = bool(field(worker, "status.memory.is_unified_memory", False))
    ram = _allocatable(total_ram, field(worker, "status.memory.allocated", 0), reserved_ram)
    if unified:
        # GPUStack's rule: one pool, which also loses the reserved and the allocated VRAM.
        ram = max(ram - reserved_vram - allocated_vram, 0)
    labels = field(worker, "labels", {}) or {}
    label_items = labels.items() if isinstance(labels, Mapping) else vars(labels).items()
    data = {
        "id": field(worker, "id", name),
        "name": name,
        "address": str(field(worker, "ip", "")),
        "labels": {str(k): str(v) for k, v in label_items},
        "unified_memory": unified,
        "total_ram_bytes": total_ram,
        "allocatable_ram_bytes": ram,
        "gpus": gpus,
    }
    return load_model(Worker, data, f"GPUStack worker {name}")


def cluster_from_gpustack(workers: Sequence[Any]) -> Cluster:
    return load_model(Cluster, {"workers": [worker_from_gpustack(worker) for worker in workers]}, "GPUStack workers")


def _kind(categories: Sequence[str]) -> ModelKind:
    for kind in (ModelKind.IMAGE, ModelKind.EMBEDDING, ModelKind.RERANKER):
        if kind.value in categories:
            return kind
    return ModelKind.LLM


def deployment_from_gpustack(
    model: Any, *, gguf_path: str | None = None, profile: MemoryProfile | None = None
) -> Deployment:
    """A GPUStack model as a layerfit ``Deployment``; give the GGUF path or a memory profile."""
    gpu_ids = field(model, "gpu_selector.gpu_ids", None)
    return load_model(
        Deployment,
        {
            "name": str(field(model, "name")),
            "gguf_path": gguf_path,
            "profile": profile,
            "backend_parameters": list(field(model, "backend_parameters", []) or []),
            "cpu_offloading": bool(field(model, "cpu_offloading", True)),
            "distributed_inference_across_workers": bool(field(model, "distributed_inference_across_workers", False)),
            "gpu_selection": list(gpu_ids) if gpu_ids else None,
            "kind": _kind([str(c) for c in field(model, "categories", []) or []]),
            "replicas": int(field(model, "replicas", 1)),
        },
        "GPUStack model",
    )


def _claim(claims: Claims, worker: str, layers: int, total_layers: int, unified: bool) -> dict[str, Any]:
    worker_claim = claims.worker(worker)
    return {
        "is_unified_memory": unified,
        "offload_layers": layers,
        "total_layers": total_layers,
        "vram": {d.gpu_index: d.total_bytes for d in claims.devices if d.worker == worker},
        "ram": 0 if worker_claim is None else worker_claim.ram_bytes,
    }


def candidate_to_gpustack(candidate: Candidate, cluster: Cluster, workers_by_name: Mapping[str, Any]) -> dict[str, Any]:
    """One layout in GPUStack's ``ModelInstanceScheduleCandidate`` shape (as a dict)."""
    layout, claims = candidate.layout, candidate.claims
    total_layers = layout.n_blocks + 1
    main = cluster.worker(layout.main_worker)
    main_claim = _claim(claims, main.name, layout.gpu_layers, total_layers, main.unified_memory)
    main_claim["tensor_split"] = list(tensor_split_counts(layout)) if len(layout.devices) > 1 else None
    subordinates = []
    for device in layout.rpc_devices:
        worker = cluster.worker(device.worker)
        claim = _claim(claims, worker.name, device.blocks, total_layers, worker.unified_memory)
        claim["vram"] = {device.gpu_index: claims.vram_bytes(worker.name, device.gpu_index)}
        subordinates.append(
            {
                "worker_id": worker.id,
                "worker_name": worker.name,
                "worker_ip": worker.address,
                "total_gpus": len(worker.gpus),
                "gpu_indexes": [device.gpu_index],
                "computed_resource_claim": claim,
            }
        )
    return {
        "worker": workers_by_name.get(main.name, {"id": main.id, "name": main.name}),
        "gpu_indexes": [device.gpu_index for device in layout.local_devices],
        "computed_resource_claim": main_claim,
        "subordinate_workers": subordinates,
        "score": candidate.score,
    }


def schedule_candidates(
    workers: Sequence[Any],
    model: Any,
    *,
    gguf_path: str | None = None,
    profile: MemoryProfile | None = None,
    config: PlannerConfig = PlannerConfig(),
) -> tuple[list[dict[str, Any]], Plan]:
    """Candidates in GPUStack's shape (best first, then equally good alternatives) and the full plan.

    An empty list means nothing fits; ``plan.messages`` and ``plan.reasons`` say why.
    """
    cluster = cluster_from_gpustack(workers)
    deployment = deployment_from_gpustack(model, gguf_path=gguf_path, profile=profile)
    result = plan_deployment(cluster, deployment, config)
    by_name = {str(field(worker, "name")): worker for worker in workers}
    chosen = ([result.best] if result.best is not None else []) + list(result.alternatives)
    return [candidate_to_gpustack(candidate, cluster, by_name) for candidate in chosen], result
