"""What is allocatable on a GPUStack worker, computed the way GPUStack computes it.

GPUStack no longer trusts what workers report as allocated (``status.memory.allocated`` is
deprecated and left empty). It adds up the ``computed_resource_claim`` of the model instances
bound to the worker instead: a main worker's RAM and, when the instance has GPUs there, its VRAM
per GPU; a subordinate (RPC) worker's VRAM only. Allocatable is then total − allocated − the
worker's ``system_reserved``, never below zero; a unified-memory worker's RAM also loses the
reserved and the allocated VRAM (one pool), and its first GPU is capped by that RAM.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from layerfit.gpustack.fields import as_list, field, gpu_device_index, int_map, listed, non_negative


@dataclass(frozen=True)
class Allocation:
    """RAM and per-GPU VRAM in bytes: what instances hold (allocated) or what is left (allocatable)."""

    ram: int = 0
    vram: Mapping[int, int] = dataclass_field(default_factory=dict)


def _add(into: dict[int, int], more: Mapping[int, int]) -> None:
    for index, size in more.items():
        into[index] = into.get(index, 0) + size


def allocated_by_instances(instances: Iterable[Any], worker_id: Any) -> Allocation:
    """What the model instances hold on one worker, from their ``computed_resource_claim``."""
    ram = 0
    vram: dict[int, int] = {}
    for position, instance in enumerate(as_list(instances, "model_instances")):
        where = f"model_instances[{position}]"
        claim = field(instance, "computed_resource_claim", None)
        if field(instance, "worker_id", None) == worker_id and claim is not None:
            ram += non_negative(field(claim, "ram", 0), f"{where}.computed_resource_claim.ram")
            if field(instance, "gpu_indexes", None):
                _add(vram, int_map(field(claim, "vram", None), f"{where}.computed_resource_claim.vram"))
        subordinates = listed(instance, "distributed_servers.subordinate_workers", f"{where}.distributed_servers")
        for number, subordinate in enumerate(subordinates):
            sub_claim = field(subordinate, "computed_resource_claim", None)
            if field(subordinate, "worker_id", None) == worker_id and sub_claim is not None:
                sub_where = f"{where}.distributed_servers.subordinate_workers[{number}].computed_resource_claim.vram"
                _add(vram, int_map(field(sub_claim, "vram", None), sub_where))
    return Allocation(ram=ram, vram=vram)


def allocated_by_view(resource_view: Any, worker_id: Any) -> Allocation:
    """What GPUStack's own ``ResourceView`` says is allocated (instances plus other reservations)."""
    allocated = resource_view.allocated(worker_id)
    ram = non_negative(allocated.ram, "resource_view.allocated.ram")
    return Allocation(ram=ram, vram=int_map(allocated.vram, "resource_view.allocated.vram"))


def allocatable(worker: Any, allocated: Allocation) -> Allocation:
    """GPUStack's allocatable RAM and per-GPU VRAM of a worker, given what is allocated on it."""
    name = str(field(worker, "name", "?"))
    reserved_ram = non_negative(field(worker, "system_reserved.ram", 0), f"worker[{name}].system_reserved.ram")
    reserved_vram = non_negative(field(worker, "system_reserved.vram", 0), f"worker[{name}].system_reserved.vram")
    vram: dict[int, int] = {}
    for position, gpu in enumerate(listed(worker, "status.gpu_devices", f"worker[{name}].status.gpu_devices")):
        total = field(gpu, "memory.total", None)
        if total is None:
            continue
        index = gpu_device_index(gpu, name, position)
        total = non_negative(total, f"worker[{name}].status.gpu_devices[{position}].memory.total")
        vram[index] = max(total - allocated.vram.get(index, 0) - reserved_vram, 0)
    total_ram = non_negative(field(worker, "status.memory.total", None), f"worker[{name}].status.memory.total")
    ram = max(total_ram - allocated.ram - reserved_ram, 0)
    if field(worker, "status.memory.is_unified_memory", False):
        ram = max(ram - reserved_vram - sum(allocated.vram.values()), 0)
        if vram:
            first = 0 if 0 in vram else next(iter(vram))
            vram[first] = min(ram, vram[first])
    return Allocation(ram=ram, vram=vram)
