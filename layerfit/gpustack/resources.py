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

from layerfit.errors import InputError
from layerfit.gpustack.fields import as_list, field, gpu_device_index, int_map, is_key, listed, non_negative, record


@dataclass(frozen=True)
class Allocation:
    """RAM and per-GPU VRAM in bytes: what instances hold (allocated) or what is left (allocatable)."""

    ram: int = 0
    vram: Mapping[int, int] = dataclass_field(default_factory=dict)


def _add(into: dict[int, int], more: Mapping[int, int]) -> None:
    for index, size in more.items():
        into[index] = into.get(index, 0) + size


def allocated_by_workers(instances: Iterable[Any], worker_ids: Iterable[Any]) -> dict[Any, Allocation]:
    """What the model instances hold on each of these workers, from their ``computed_resource_claim``.

    One pass over the instances whatever the number of workers (N workers and N instances cost N,
    not N²). Only the claims that count against one of these workers are read (and refused when
    malformed); an instance bound to another worker is GPUStack's business, not this placement's.
    """
    wanted = {worker_id for worker_id in worker_ids if is_key(worker_id)}
    ram: dict[Any, int] = dict.fromkeys(wanted, 0)
    vram: dict[Any, dict[int, int]] = {worker_id: {} for worker_id in wanted}
    for position, instance in enumerate(as_list(instances, "model_instances")):
        where = f"model_instances[{position}]"
        record(instance, where)
        claim = field(instance, "computed_resource_claim", None)
        owner = field(instance, "worker_id", None)
        if is_key(owner) and owner in wanted and claim is not None:
            ram[owner] += non_negative(field(claim, "ram", 0), f"{where}.computed_resource_claim.ram")
            if field(instance, "gpu_indexes", None):
                _add(vram[owner], int_map(field(claim, "vram", None), f"{where}.computed_resource_claim.vram"))
        subordinates = listed(instance, "distributed_servers.subordinate_workers", f"{where}.distributed_servers")
        for number, subordinate in enumerate(subordinates):
            sub_claim = field(subordinate, "computed_resource_claim", None)
            sub_owner = field(subordinate, "worker_id", None)
            if is_key(sub_owner) and sub_owner in wanted and sub_claim is not None:
                sub_where = f"{where}.distributed_servers.subordinate_workers[{number}].computed_resource_claim.vram"
                _add(vram[sub_owner], int_map(field(sub_claim, "vram", None), sub_where))
    return {worker_id: Allocation(ram=ram[worker_id], vram=vram[worker_id]) for worker_id in wanted}


def allocated_by_instances(instances: Iterable[Any], worker_id: Any) -> Allocation:
    """What the model instances hold on one worker, from their ``computed_resource_claim``."""
    if not is_key(worker_id):
        return Allocation()
    return allocated_by_workers(instances, [worker_id])[worker_id]


def allocated_by_view(resource_view: Any, worker_id: Any) -> Allocation:
    """What GPUStack's own ``ResourceView`` says is allocated (instances plus other reservations)."""
    if not callable(getattr(resource_view, "allocated", None)):
        shown = type(resource_view).__name__
        raise InputError("resource_view", f"expected GPUStack's ResourceView (with allocated(worker_id)), got {shown}")
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
