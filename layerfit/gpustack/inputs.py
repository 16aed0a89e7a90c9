"""GPUStack's ``Worker``, ``Model`` and ``ModelInstance`` (objects or dicts) as layerfit inputs.

Fields read:

* worker: ``id``, ``name``, ``ip``, ``ifname``, ``labels``, ``system_reserved.ram`` / ``.vram``,
  ``status.memory.total`` / ``.is_unified_memory``, ``status.gpu_devices[i].index`` / ``.type`` /
  ``.name`` / ``.memory.total``. Every GPUStack GPU type is accepted (``""`` is its default);
  ``mps`` (Apple) makes the worker unified-memory.
* model instances: ``worker_id``, ``gpu_indexes``, ``computed_resource_claim.ram`` / ``.vram``,
  ``distributed_servers.subordinate_workers[j].worker_id`` / ``.computed_resource_claim.vram``
  (see ``layerfit.gpustack.resources``); or GPUStack's own ``ResourceView``.
* model: ``name``, ``backend_parameters``, ``gpu_selector.gpu_ids`` / ``.gpus_per_replica``,
  ``placement_strategy``, ``cpu_offloading``, ``distributed_inference_across_workers``,
  ``categories``, ``replicas``, and its ``meta`` entries ``layerfit.objective`` and
  ``layerfit.min_decode_tokens_per_s`` (``ModelMeta``): without them the adapter plans as GPUStack
  does (its order, no minimum speed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from layerfit.domain.base import Frozen
from layerfit.domain.cluster import Cluster, GpuRef, Worker
from layerfit.domain.config import Objective, PlannerConfig, Policy
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import PositiveFigure
from layerfit.errors import InputError
from layerfit.gpustack.fields import (
    UNIFIED_MEMORY_GPU_TYPES,
    as_list,
    field,
    gpu_device_index,
    is_key,
    items,
    listed,
    non_negative,
    record,
)
from layerfit.gpustack.resources import (
    Allocation,
    allocatable,
    allocated_by_instances,
    allocated_by_view,
    allocated_by_workers,
)
from layerfit.io.documents import load_model


def gpu_type(device: Any) -> str:
    """A GPU's runtime type as GPUStack stores it (``""`` when GPUStack did not detect one)."""
    return str(field(device, "type", "") or "")


def is_unified(worker: Any) -> bool:
    """One memory pool for CPU and GPU: GPUStack's flag, or an Apple (``mps``) GPU."""
    if field(worker, "status.memory.is_unified_memory", False):
        return True
    devices = listed(worker, "status.gpu_devices", f"worker[{field(worker, 'name', '?')}].status.gpu_devices")
    return any(gpu_type(gpu) in UNIFIED_MEMORY_GPU_TYPES for gpu in devices)


def _with_unified_flag(worker: Any) -> Any:
    """The worker as GPUStack's allocatable rule should see it (``mps`` GPUs imply one pool)."""
    if not is_unified(worker) or field(worker, "status.memory.is_unified_memory", False):
        return worker
    status = field(worker, "status")
    memory = {"total": field(status, "memory.total"), "is_unified_memory": True}
    devices = listed(status, "gpu_devices", f"worker[{field(worker, 'name', '?')}].status.gpu_devices")
    return {
        "name": field(worker, "name", "?"),
        "system_reserved": field(worker, "system_reserved", None),
        "status": {"memory": memory, "gpu_devices": devices},
    }


def worker_allocation(
    worker: Any,
    model_instances: Sequence[Any] = (),
    resource_view: Any | None = None,
    allocated: Allocation | None = None,
) -> Allocation:
    """GPUStack's allocatable RAM and per-GPU VRAM of a worker, from the instances bound to it
    (``allocated``, when the caller already added up what they hold on it, spares reading them)."""
    worker_id = field(worker, "id", None)
    if resource_view is not None:
        allocated = allocated_by_view(resource_view, worker_id)
    elif allocated is None:
        allocated = allocated_by_instances(model_instances, worker_id)
    return allocatable(_with_unified_flag(worker), allocated)


def worker_name(worker: Any) -> str:
    """The worker's name, which starts its GPU ids (``name:type:index``); ``InputError`` naming the
    worker's id when it is missing or empty (GPUStack would then offer GPU ids such as ``:cuda:0``,
    which no selection can name)."""
    name = str(field(worker, "name", "") or "")
    if not name:
        raise InputError(f"worker[id={field(worker, 'id', '?')}].name", "missing or empty: GPU ids start with it")
    return name


def worker_from_gpustack(worker: Any, allocation: Allocation) -> Worker:
    """One GPUStack worker as a layerfit ``Worker`` with the given allocatable resources."""
    name = worker_name(worker)
    total_ram = non_negative(field(worker, "status.memory.total", None), f"worker[{name}].status.memory.total")
    gpus = []
    for position, device in enumerate(listed(worker, "status.gpu_devices", f"worker[{name}].status.gpu_devices")):
        index = gpu_device_index(device, name, position)
        total = non_negative(field(device, "memory.total", 0), f"worker[{name}].status.gpu_devices[{position}].memory")
        gpus.append(
            {
                "index": index,
                "type": gpu_type(device),
                "name": str(field(device, "name", "")),
                "total_vram_bytes": total,
                "allocatable_vram_bytes": min(allocation.vram.get(index, 0), total),
            }
        )
    data = {
        "id": field(worker, "id", name),
        "name": name,
        "address": str(field(worker, "ip", "")),
        "labels": {str(k): str(v) for k, v in items(field(worker, "labels", None), f"worker[{name}].labels")},
        "unified_memory": is_unified(worker),
        "total_ram_bytes": total_ram,
        "allocatable_ram_bytes": min(allocation.ram, total_ram),
        "gpus": gpus,
    }
    return load_model(Worker, data, f"GPUStack worker {name}")


def cluster_from_gpustack(
    workers: Sequence[Any], model_instances: Sequence[Any] = (), resource_view: Any | None = None
) -> Cluster:
    """GPUStack's workers as a layerfit ``Cluster``, less what the running instances hold."""
    instances = as_list(model_instances, "model_instances")
    given = as_list(workers, "workers")
    for position, worker in enumerate(given):
        record(worker, f"workers[{position}]")
        worker_name(worker)  # each worker's name first: the other errors name the worker by it
    held = {} if resource_view is not None else allocated_by_workers(instances, [field(w, "id", None) for w in given])
    converted = [
        worker_from_gpustack(w, worker_allocation(w, instances, resource_view, _held_by(held, field(w, "id", None))))
        for w in given
    ]
    return load_model(Cluster, {"workers": converted}, "GPUStack workers")


def _held_by(held: Mapping[Any, Allocation], worker_id: Any) -> Allocation | None:
    return held.get(worker_id) if is_key(worker_id) else None


def _kind(categories: Sequence[str]) -> ModelKind:
    for kind in (ModelKind.IMAGE, ModelKind.EMBEDDING, ModelKind.RERANKER):
        if kind.value in categories:
            return kind
    return ModelKind.LLM


def _free_vram(cluster: Cluster | None, ref: GpuRef) -> int:
    if cluster is None or not cluster.has_worker(ref.worker) or not cluster.worker(ref.worker).has_gpu(ref.index):
        return 0
    return cluster.worker(ref.worker).gpu(ref.index).allocatable_vram_bytes


def selected_gpus(model: Any, cluster: Cluster | None = None) -> list[str] | None:
    """The GPUs one replica uses: every selected GPU, or with ``gpus_per_replica`` (fewer GPUs per
    replica than selected) that many of them with the most allocatable VRAM, ties in GPU-id order.
    In the model's order, which GPUStack's pre-check follows (grouped by worker)."""
    gpu_ids = listed(model, "gpu_selector.gpu_ids", "gpu_selector.gpu_ids")
    if not gpu_ids:
        return None
    ids = [str(gpu) for gpu in gpu_ids]
    per_replica = field(model, "gpu_selector.gpus_per_replica", None)
    if per_replica is not None:
        per_replica = non_negative(per_replica, "gpu_selector.gpus_per_replica")
    if per_replica is None or per_replica <= 0 or per_replica >= len(ids):
        return ids
    refs = [GpuRef.parse(text) for text in ids]
    ranked = sorted(range(len(refs)), key=lambda i: (-_free_vram(cluster, refs[i]), ids[i]))
    return [ids[i] for i in sorted(ranked[: int(per_replica)])]


META_PREFIX = "layerfit."
"""Keys of a GPUStack model's ``meta`` (its free-form metadata; GPUStack 2.3.0's ``Model`` has no
labels) that ask layerfit for more than GPUStack's order."""


class ModelMeta(Frozen):
    """What a GPUStack model's ``meta`` may ask: ``{"layerfit.objective": "speed"}`` plans it for the
    fastest predicted decode instead of GPUStack's order; ``{"layerfit.min_decode_tokens_per_s":
    20}`` refuses layouts predicted slower. Any other ``layerfit.`` key is refused by name."""

    objective: Objective | None = Field(default=None, alias="layerfit.objective")
    min_decode_tokens_per_s: PositiveFigure | None = Field(default=None, alias="layerfit.min_decode_tokens_per_s")


def model_meta(model: Any) -> ModelMeta:
    """The ``layerfit.`` entries of the model's ``meta`` (absent: GPUStack's order, no minimum)."""
    entries = {str(key): value for key, value in items(field(model, "meta", None), "meta")}
    ours = {key: value for key, value in entries.items() if key.startswith(META_PREFIX)}
    return load_model(ModelMeta, ours, "GPUStack model meta")


def deployment_from_gpustack(
    model: Any,
    *,
    gguf_path: str | None = None,
    profile: MemoryProfile | None = None,
    cluster: Cluster | None = None,
    mmproj: str | None = None,
) -> Deployment:
    """A GPUStack model as a layerfit ``Deployment``; give the GGUF path or a memory profile.

    ``cluster`` (the converted workers) lets ``gpus_per_replica`` pick the freest selected GPUs.
    ``mmproj`` (the projector GPUStack found in the model's repository: ``sources.model_files``)
    replaces the backend parameters' own ``--mmproj``.
    """
    record(model, "model")
    name = str(field(model, "name", "") or "")
    if not name:
        raise InputError("model.name", "missing or empty")
    backend_parameters = field(model, "backend_parameters", []) or []
    if isinstance(backend_parameters, str | bytes) or not isinstance(backend_parameters, Sequence):
        raise InputError("backend_parameters", f"expected a list of strings, got {type(backend_parameters).__name__}")
    # GPUStack's selector tests these for truth: an unset (None) switch is off.
    cpu_offloading = bool(field(model, "cpu_offloading", False))
    distributed = bool(field(model, "distributed_inference_across_workers", False))
    deployment = load_model(
        Deployment,
        {
            "name": name,
            "gguf_path": gguf_path,
            "profile": profile,
            "backend_parameters": list(backend_parameters),
            "cpu_offloading": cpu_offloading,
            "distributed_inference_across_workers": distributed,
            "gpu_selection": selected_gpus(model, cluster),
            "kind": _kind([str(c) for c in listed(model, "categories", "categories")]),
            "replicas": max(non_negative(field(model, "replicas", 1), "replicas"), 1),
            **model_meta(model).model_dump(exclude_none=True),
        },
        "GPUStack model",
    )
    if mmproj is None:
        return deployment
    return deployment.model_copy(update={"params": deployment.params.model_copy(update={"mmproj": mmproj})})


def config_from_gpustack(model: Any, config: PlannerConfig = PlannerConfig()) -> PlannerConfig:
    """The planner settings a GPUStack model asks for: its ``placement_strategy`` (spread, binpack).

    Expert offload is off: GPUStack's candidate carries layers and a tensor split, not ``-ot``, so
    experts stay with their blocks unless the model's backend parameters already keep them on the
    host (``--n-cpu-moe``, ``--cpu-moe``, ``-ot ...=CPU``: planned as given, passed on as given).
    """
    record(model, "model")
    if not isinstance(config, PlannerConfig):
        raise InputError("config", f"expected a PlannerConfig, got {type(config).__name__}")
    config = config.model_copy(update={"expert_offload": False})
    strategy = field(model, "placement_strategy", None)
    if strategy is None:
        return config
    value = str(getattr(strategy, "value", strategy)).lower()
    try:
        policy = Policy(value)
    except ValueError:
        raise InputError("placement_strategy", f"expected spread or binpack, got {value!r}") from None
    return config.model_copy(update={"policy": policy})


def workers_by_name(workers: Sequence[Any]) -> Mapping[str, Any]:
    return {worker_name(worker): worker for worker in workers}
