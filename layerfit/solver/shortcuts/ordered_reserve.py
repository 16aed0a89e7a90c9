"""The spread tie-break of GPUs in a given order, with their VRAM counted as the model counts it.

A device needs its blocks (``block_prefix_up[end] - block_prefix_down[start]``, or their count
times one block's cost when all are alike), the fixed cost of
its role on its worker's memory type, the output layer on the last device and the input copies on
the first of several (``_rooms``). With the GPUs in order (the rpc-server devices first, the main
worker's after them, the main GPU last) and a reserve every GPU keeps free, a split of the blocks
is found from the last device back, each taking the longest run it holds (``_runs``).

* ``rebalanced``: a layout's GPUs in its order, its blocks placed for the largest reserve (every
  device holding a block: a layout, which the model then checks).
* ``pair_bound``: with one rpc-server worker, the largest reserve over every order of the largest
  GPUs of a main worker and a server and every split of the GPU count between them. With devices
  allowed to hold no block the greedy split is exact (a shorter prefix to cover is never harder),
  and a larger GPU of the same worker never lowers the reserve, so this bounds the tightest GPU's
  headroom of every layout of those two workers from above (the RAM rows only lower it).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from math import factorial, prod

from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.domain.profile import DeviceRole
from layerfit.solver.model.capacity import gpu_room
from layerfit.solver.model.costs import device_fixed
from layerfit.solver.model.instance import Instance, SlotKind

ORDER_LIMIT = 96
"""A (main, server) pair with more distinct device orders than this, over all its splits, is not
bounded exactly (``pair_orders``)."""


@dataclass(frozen=True)
class DeviceRoom:
    """A GPU as the bound sees it."""

    capacity: int
    """Allocatable VRAM (scaled): headroom is measured against it."""
    room: int
    """What the GPU can give its device (``bounds.gpu_room``)."""
    fixed: int
    """Everything the device needs besides its blocks."""


@dataclass(frozen=True)
class PairBound:
    """``pair_bound``'s answer: the bound, the order that reaches it (blocks not placed) and the
    greedy split there (a device may hold no block)."""

    reserve: int
    order: Layout
    blocks: tuple[int, ...]


def rebalanced(instance: Instance, layout: Layout) -> Layout | None:
    """``layout``'s GPUs, in its order, with its blocks placed to keep the largest reserve free on
    every GPU (the spread tie-break); ``None`` when the model cannot hold its GPUs or no reserve
    holds the blocks."""
    devices = _rooms(instance, layout)
    if devices is None:
        return None
    low = largest_reserve(instance, devices, empty=False)
    if low is None:
        return None
    blocks = _runs(instance, devices, low, empty=False) or []
    placed = tuple(
        DeviceAssignment(worker=device.worker, gpu_index=device.gpu_index, blocks=count)
        for device, count in zip(layout.devices, blocks, strict=True)
    )
    return layout.model_copy(update={"devices": placed, "output_offloaded": True})


def largest_reserve(instance: Instance, devices: Sequence[DeviceRoom], *, empty: bool) -> int | None:
    """The largest reserve with which ``_runs`` splits the blocks over ``devices`` (``None``: not
    even with none)."""
    if not devices or _runs(instance, devices, 0, empty=empty) is None:
        return None
    low, high = 0, max(device.capacity for device in devices)
    while low < high:
        middle = (low + high + 1) // 2
        if _runs(instance, devices, middle, empty=empty) is None:
            high = middle - 1
        else:
            low = middle
    return low


def pair_orders(instance: Instance, gpus: int, main: int, server: int) -> int:
    """How many device orders ``pair_bound`` goes through for this pair."""
    return sum(_count(rpc) * _count(own) for rpc, own in _splits(instance, gpus, main, server))


def pair_bound(instance: Instance, gpus: int, main: int, server: int) -> PairBound | None:
    """The largest reserve of any layout of ``gpus`` GPUs with main worker ``main`` and its remote
    GPUs on ``server`` alone, VRAM only (see the module), with the order that reaches it; ``None``
    when no order holds the blocks. Goes through ``pair_orders`` orders."""
    best: PairBound | None = None
    for remote, local in _splits(instance, gpus, main, server):
        for rpc in _orders(remote):
            for own in _orders(local):
                order = _layout(instance, main, (*rpc, *own))
                devices = _rooms(instance, order)
                found = None if devices is None else largest_reserve(instance, devices, empty=True)
                if devices is not None and found is not None and (best is None or found > best.reserve):
                    best = PairBound(found, order, tuple(_runs(instance, devices, found, empty=True) or ()))
    return best


def _splits(instance: Instance, gpus: int, main: int, server: int) -> list[tuple[list[int], list[int]]]:
    """The remote and the local GPUs (classes, largest first) of each split of ``gpus`` between the
    pair, at least one remote (every device but the last holds a block)."""
    if gpus - 1 > instance.n_blocks:
        return []
    remote = _largest(instance, SlotKind.RPC, server)
    local = _largest(instance, SlotKind.LOCAL, main)
    return [
        (remote[:r], local[: gpus - r])
        for r in range(1, min(gpus, instance.rpc_slots, len(remote)) + 1)
        if gpus - r <= min(instance.local_slots, len(local))
    ]


def _largest(instance: Instance, kind: SlotKind, worker: int) -> list[int]:
    """The classes of ``worker``'s GPUs that may fill a ``kind`` slot, one entry per GPU, largest
    first (a worker's GPUs rank alike by capacity and room)."""
    found = [c for c in instance.classes_for(kind) if instance.classes[c].worker == worker]
    return [
        c for c in sorted(found, key=lambda c: -instance.classes[c].capacity) for _ in instance.classes[c].gpu_indexes
    ]


def _count(classes: Sequence[int]) -> int:
    """How many distinct orders the multiset ``classes`` has."""
    return factorial(len(classes)) // prod(factorial(n) for n in Counter(classes).values())


def _orders(classes: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every distinct order of the multiset ``classes``."""
    if not classes:
        yield ()
        return
    for first in sorted(set(classes)):
        rest = list(classes)
        rest.remove(first)
        for tail in _orders(rest):
            yield (first, *tail)


def _layout(instance: Instance, main: int, classes: Sequence[int]) -> Layout:
    """GPUs of ``classes`` in this order (a class's GPUs by index); blocks not placed yet: one on
    each device but the last, which holds the output layer (``gpus - 1 <= n_blocks``, ``_splits``)."""
    used: Counter[int] = Counter()
    devices = []
    for position, c in enumerate(classes):
        cls = instance.classes[c]
        worker = instance.workers[cls.worker].name
        blocks = int(position < len(classes) - 1)
        devices.append(DeviceAssignment(worker=worker, gpu_index=cls.gpu_indexes[used[c]], blocks=blocks))
        used[c] += 1
    main_worker = instance.workers[main].name
    return Layout(main_worker=main_worker, n_blocks=instance.n_blocks, devices=tuple(devices), output_offloaded=True)


def _rooms(instance: Instance, layout: Layout) -> list[DeviceRoom] | None:
    """Each device of a full offload with the fixed cost of its place (role, output, first device)."""
    if not layout.devices:
        return None
    multi = len(layout.devices) > 1
    last = len(layout.devices) - 1
    rooms: list[DeviceRoom] = []
    for position, device in enumerate(layout.devices):
        c = instance.class_of(device.worker, device.gpu_index)
        if c is None:
            return None
        cls = instance.classes[c]
        local = device.worker == layout.main_worker
        role = DeviceRole.RPC if not local else DeviceRole.MAIN if position == last else DeviceRole.LOCAL
        fixed = device_fixed(instance.costs, role, instance.workers[cls.worker].unified, multi=multi)
        fixed += instance.costs.output if position == last else 0
        fixed += instance.costs.first_device if position == 0 and multi else 0
        rooms.append(
            DeviceRoom(cls.capacity, gpu_room(instance, cls, SlotKind.LOCAL if local else SlotKind.RPC), fixed)
        )
    return rooms


def _runs(instance: Instance, devices: Sequence[DeviceRoom], reserve: int, *, empty: bool) -> list[int] | None:
    """Blocks per device when each keeps ``reserve`` free: from the last device back, each takes the
    longest run it holds; ``None``: some block finds no room. ``empty``: a device may hold no block
    (else each holds one, and one is left for each device before it)."""
    up, down = instance.costs.block_prefix_up, instance.costs.block_prefix_down
    uniform = instance.costs.uniform_block  # blocks all alike: the model counts them one by one
    end = instance.n_blocks
    counts = [0] * len(devices)
    for position in reversed(range(len(devices))):
        free = min(devices[position].room, devices[position].capacity - reserve) - devices[position].fixed
        if free < 0:
            return None
        if uniform is not None:
            begin = max(0, end - free // uniform) if uniform > 0 else 0
        else:
            begin = min(end, bisect_left(down, up[end] - free, 0, end + 1))  # no block costs nothing
        if not empty:
            begin = max(position, begin)
            if begin >= end:
                return None
        counts[position] = end - begin
        end = begin
    return counts if end == 0 else None
