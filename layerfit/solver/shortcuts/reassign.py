"""A better tie-break without a search: the same devices and blocks on GPUs the policy prefers.

A device's need (``slot.need`` in the model: its blocks, fixed cost, output layer) does not
depend on which GPU of a memory type holds it. So with every device's need read from a solution,
``reassigned`` moves each rpc-server worker's devices to the unused worker of the same memory type
whose GPUs suit them best (itself included), and the main worker's devices to its own best GPUs:
binpack, the smallest GPUs that hold each need (the least allocatable VRAM in all); spread, the
largest (the most headroom). Needs are matched largest first. The model decides whether the
result is valid (``tie_break_stage`` completes it as a solution); it is a better layout, not a
proof.
"""

from __future__ import annotations

from collections.abc import Sequence

from layerfit.domain.config import Policy
from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.solver.model.build import BuiltModel
from layerfit.solver.model.capacity import gpu_room
from layerfit.solver.model.instance import Instance, SlotKind
from layerfit.solver.model.runner import Run

_Gpu = tuple[int, int, int, int]
"""(tie-break value: smaller is better, class, capacity, room) of one GPU."""


def device_needs(built: BuiltModel, found: Run) -> list[int]:
    """Each used slot's need in ``found``, in device order (as ``decode`` lists the devices)."""
    return [found.value(slot.need) for slot in built.variables.slots if found.value(slot.used)]


def _gpus(instance: Instance, worker: int, kind: SlotKind) -> list[_Gpu]:
    spread = instance.policy is Policy.SPREAD
    found = []
    for c in instance.workers[worker].classes:
        cls = instance.classes[c]
        if c not in instance.classes_for(kind):
            continue
        value = -cls.capacity if spread else cls.tie_capacity
        found.extend([(value, c, cls.capacity, gpu_room(instance, cls, kind))] * cls.count)
    return sorted(found)


def _match(gpus: Sequence[_Gpu], needs: Sequence[int]) -> tuple[int, list[int]] | None:
    """The preferred GPU that holds each need, largest need first: (value, classes per need)."""
    left = list(gpus)
    chosen = [0] * len(needs)
    total = 0
    for position in sorted(range(len(needs)), key=lambda i: -needs[i]):
        pick = next((g for g in left if min(g[2], g[3]) >= needs[position]), None)
        if pick is None:
            return None
        left.remove(pick)
        chosen[position] = pick[1]
        total += pick[0]
    return total, chosen


def _headroom(instance: Instance, classes: Sequence[int], needs: Sequence[int]) -> int:
    return min(instance.classes[c].capacity - need for c, need in zip(classes, needs, strict=True))


def _better(instance: Instance, a: tuple[int, list[int]], b: tuple[int, list[int]], needs: Sequence[int]) -> bool:
    """Whether GPU choice ``a`` beats ``b`` for the same needs under the policy."""
    if instance.policy is Policy.SPREAD:
        return _headroom(instance, a[1], needs) > _headroom(instance, b[1], needs)
    return a[0] < b[0]


def reassigned(instance: Instance, layout: Layout, needs: Sequence[int]) -> Layout:
    """``layout`` with each worker's devices on the GPUs the policy prefers (see the module)."""
    main = instance.worker_index(layout.main_worker)
    if main is None or len(needs) != len(layout.devices):
        return layout
    by_worker: dict[str, list[int]] = {}
    for position, device in enumerate(layout.devices):
        by_worker.setdefault(device.worker, []).append(position)
    taken = {w for w, view in enumerate(instance.workers) if view.name in layout.workers}
    classes: dict[int, int] = {}
    for name, positions in by_worker.items():
        own = instance.worker_index(name)
        if own is None:
            return layout
        kind = SlotKind.LOCAL if own == main else SlotKind.RPC
        wanted = [needs[p] for p in positions]
        best = _match(_gpus(instance, own, kind), wanted)
        if best is None:
            return layout
        where = own
        if kind is SlotKind.RPC:
            unified = instance.workers[own].unified
            for other, view in enumerate(instance.workers):
                if other in taken or not view.rpc_ok or view.unified != unified:
                    continue
                found = _match(_gpus(instance, other, kind), wanted)
                if found is not None and _better(instance, found, best, wanted):
                    best, where = found, other
        if where != own:
            taken.add(where)
        for position, c in zip(positions, best[1], strict=True):
            classes[position] = c
    used: dict[int, int] = {}
    devices = []
    for position, device in enumerate(layout.devices):
        cls = instance.classes[classes[position]]
        nth = used.get(classes[position], 0)
        used[classes[position]] = nth + 1
        worker = instance.workers[cls.worker].name
        devices.append(DeviceAssignment(worker=worker, gpu_index=cls.gpu_indexes[nth], blocks=device.blocks))
    return layout.model_copy(update={"devices": tuple(devices)})
