"""The tie-break decided without a search, where a bound meets a layout (shortcut ``tie-break-bound-met``).

With the strict tiers fixed (every layer on ``g`` GPUs), the tie-break's optimum is bounded by a
relaxation that forgets which worker each GPU belongs to:

* **spread** (the most headroom on the tightest GPU): for each split into ``r`` rpc-server devices
  and ``k`` local ones, the ``r`` (``k``) largest GPUs that may fill such a slot, each charged the
  fixed cost of its role, the output layer on the main GPU (the last rpc device when ``k = 0``) and
  the first device's input copies where they cost the fewest blocks. The largest reserve ``H``
  such that these devices, each keeping ``H`` free, still hold every block (``most_blocks``) bounds
  the headroom of every layout of ``g`` GPUs from above.
* **binpack** (the least allocatable VRAM over the GPUs used, in the tie-break's unit): the ``g``
  smallest GPUs that may fill a slot bound it from below.

A layout meets the bound when its value in the model (read from the model's own solution of it)
equals it: the tie-break is then proven optimal. For spread the layout is the step's own GPUs with
their blocks rebalanced to keep the largest reserve (``rebalanced``), checked in bytes. Only with
blocks that all cost the same, no experts placed apart and no rule fixing the layout's shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from layerfit.domain.config import Policy
from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.domain.profile import DeviceRole
from layerfit.solver.bounds import gpu_room
from layerfit.solver.build import BuiltModel
from layerfit.solver.costs import full_offload_fixed
from layerfit.solver.instance import Instance, SlotKind
from layerfit.solver.runner import Run

TIE_BREAK_BOUND_MET = "tie-break-bound-met"
"""Shortcut name: a layout's tie-break equals the relaxation's bound, so no search is needed."""


@dataclass(frozen=True)
class DeviceRoom:
    """A GPU as the bound sees it."""

    capacity: int
    """Allocatable VRAM (scaled): headroom is measured against it."""
    room: int
    """What the GPU can give its device (``bounds.gpu_room``)."""
    fixed: int
    """Everything the device needs besides its blocks."""


def applies(instance: Instance, layers: int) -> bool:
    """Whether the bound is computed for this model: every layer on GPUs, uniform blocks, free shape."""
    rules = instance.rules
    return (
        instance.uniform_blocks
        and layers == instance.n_layers
        and rules.tensor_split is None
        and rules.device_count is None
        and rules.layer_target in (None, instance.n_layers)
    )


def most_blocks(devices: Sequence[DeviceRoom], reserve: int, block: int) -> int:
    """Blocks the devices hold when each keeps ``reserve`` of its capacity free (-1: one cannot)."""
    total = 0
    for device in devices:
        free = min(device.room, device.capacity - reserve) - device.fixed
        if free < 0:
            return -1
        total += free // block
    return total


def best_reserve(devices: Sequence[DeviceRoom], blocks: int, block: int) -> int | None:
    """The largest reserve with which ``devices`` still hold ``blocks`` blocks (``None``: not even 0)."""
    if not devices or most_blocks(devices, 0, block) < blocks:
        return None
    low, high = 0, max(device.capacity for device in devices)
    while low < high:
        middle = (low + high + 1) // 2
        if most_blocks(devices, middle, block) >= blocks:
            low = middle
        else:
            high = middle - 1
    return low


def _charged(devices: list[DeviceRoom], extra: int, block: int, reserve: int) -> list[DeviceRoom]:
    """``devices`` with ``extra`` charged to the one where it costs the fewest blocks at ``reserve``."""
    if not extra or not devices:
        return devices

    def loss(i: int) -> int:
        free = min(devices[i].room, devices[i].capacity - reserve) - devices[i].fixed
        return free // block - (free - extra) // block if free >= extra else 1 << 62

    cheapest = min(range(len(devices)), key=loss)
    return [
        device if i != cheapest else DeviceRoom(device.capacity, device.room, device.fixed + extra)
        for i, device in enumerate(devices)
    ]


def _largest(instance: Instance, kind: SlotKind, count: int) -> list[tuple[int, int]]:
    """The ``count`` largest (capacity, room) pairs of GPUs that may fill a ``kind`` slot, each
    list sorted on its own (so the i-th pair dominates the i-th GPU of any choice); short: fewer."""
    gpus = [
        (instance.classes[c].capacity, gpu_room(instance, instance.classes[c], kind))
        for c in instance.classes_for(kind)
        for _ in range(instance.classes[c].count)
    ]
    capacities = sorted((capacity for capacity, _ in gpus), reverse=True)[:count]
    rooms = sorted((room for _, room in gpus), reverse=True)[:count]
    return list(zip(capacities, rooms, strict=True))


def spread_bound(instance: Instance, gpus: int, workers: int) -> int | None:
    """An upper bound on the headroom of the tightest GPU over layouts with every layer on ``gpus``
    GPUs of ``workers`` workers (``None``: the relaxation holds no such layout)."""
    block = instance.costs.uniform_block
    if block is None or block <= 0:
        return None
    multi = gpus > 1
    best: int | None = None
    for local in range(min(gpus, instance.local_slots) + 1):
        remote = gpus - local
        if remote > instance.rpc_slots or (workers > 1) != (remote > 0) or remote < workers - 1:
            continue
        rpc = [
            DeviceRoom(c, r, full_offload_fixed(instance.costs, DeviceRole.RPC, None, multi=multi))
            for c, r in _largest(instance, SlotKind.RPC, remote)
        ]
        own = _largest(instance, SlotKind.LOCAL, local)
        if len(rpc) < remote or len(own) < local:
            continue
        found = _group_bound(instance, rpc, own, multi, block)
        if found is not None and (best is None or found > best):
            best = found
    return best


def _group_bound(
    instance: Instance, rpc: list[DeviceRoom], own: list[tuple[int, int]], multi: bool, block: int
) -> int | None:
    """The largest reserve for one split: the main GPU (with the output layer) is whichever local
    GPU that costs the fewest blocks, the first device's copies likewise in the first group."""
    costs = instance.costs
    local_fixed = full_offload_fixed(instance.costs, DeviceRole.LOCAL, None, multi=multi) if own else 0
    main_fixed = full_offload_fixed(instance.costs, DeviceRole.MAIN, None, multi=multi) if own else 0
    first = costs.first_device if multi else 0

    def holds(reserve: int) -> bool:
        local = [DeviceRoom(c, r, local_fixed) for c, r in own]
        if local:
            # becoming the main GPU swaps the local fixed cost for the main one and adds the output
            local = _charged(local, main_fixed - local_fixed + costs.output, block, reserve)
            remote = rpc
        else:
            remote = _charged(rpc, costs.output, block, reserve)
        if remote:
            remote = _charged(remote, first, block, reserve)
        else:
            local = _charged(local, first, block, reserve)
        return most_blocks([*remote, *local], reserve, block) >= instance.n_blocks

    if not holds(0):
        return None
    low, high = 0, max([device.capacity for device in rpc] + [capacity for capacity, _ in own])
    while low < high:
        middle = (low + high + 1) // 2
        if holds(middle):
            low = middle
        else:
            high = middle - 1
    return low


def binpack_bound(instance: Instance, gpus: int) -> int:
    """A lower bound on the allocatable VRAM (tie-break unit) of ``gpus`` GPUs: the smallest ones."""
    sizes = sorted(cls.tie_capacity for cls in instance.classes if cls.rpc_ok or cls.local_ok for _ in range(cls.count))
    return sum(sizes[:gpus])


def model_value(built: BuiltModel, found: Run) -> int:
    """The tie-break of a solution of ``built`` as the model counts it: the headroom of its tightest
    GPU (spread) or the allocatable VRAM of its GPUs in the tie-break's unit (binpack)."""
    classes = built.instance.classes
    used = [slot for slot in built.variables.slots if found.value(slot.used)]
    held = [next(c for c, assigned in slot.assign.items() if found.value(assigned)) for slot in used]
    if built.instance.policy is Policy.BINPACK:
        return sum(classes[c].tie_capacity for c in held)
    return min(classes[c].capacity - found.value(slot.need) for slot, c in zip(used, held, strict=True))


def rebalanced(instance: Instance, layout: Layout) -> Layout | None:
    """``layout``'s GPUs, in its order, with every block placed to keep the largest reserve free on
    each (``best_reserve``); ``None`` when the model cannot hold its GPUs or no reserve holds the blocks."""
    block = instance.costs.uniform_block
    if block is None or block <= 0 or not layout.devices:
        return None
    multi = len(layout.devices) > 1
    last = len(layout.devices) - 1
    devices: list[DeviceRoom] = []
    for position, device in enumerate(layout.devices):
        c = instance.class_of(device.worker, device.gpu_index)
        if c is None:
            return None
        local = device.worker == layout.main_worker
        kind = SlotKind.LOCAL if local else SlotKind.RPC
        role = DeviceRole.RPC if not local else DeviceRole.MAIN if position == last else DeviceRole.LOCAL
        unified = instance.workers[instance.classes[c].worker].unified
        fixed = full_offload_fixed(instance.costs, role, unified, multi=multi)
        fixed += instance.costs.output if position == last else 0
        fixed += instance.costs.first_device if position == 0 and multi else 0
        cls = instance.classes[c]
        devices.append(DeviceRoom(cls.capacity, gpu_room(instance, cls, kind), fixed))
    reserve = best_reserve(devices, instance.n_blocks, block)
    if reserve is None:
        return None
    left = instance.n_blocks
    blocks = [0] * len(devices)
    for position in range(last, -1, -1):
        most = most_blocks(devices[position : position + 1], reserve, block)
        blocks[position] = min(most, left - position)  # at least one block for each earlier device
        if blocks[position] < 1:
            return None
        left -= blocks[position]
    if left:
        return None
    placed = tuple(
        DeviceAssignment(worker=device.worker, gpu_index=device.gpu_index, blocks=count)
        for device, count in zip(layout.devices, blocks, strict=True)
    )
    return layout.model_copy(update={"devices": placed, "output_offloaded": True})
