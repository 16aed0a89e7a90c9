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
their blocks rebalanced to keep the largest reserve (``rebalanced``), a solution of the model.
Blocks of different sizes count, in the bound, as the lightest run of each length
(``bounds.lightest_runs``). Not with experts placed apart or a rule fixing the layout's shape.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layerfit.domain.config import Policy
from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.domain.profile import DeviceRole
from layerfit.solver.bounds import blocks_within, class_blocks, gpu_room, lightest_runs
from layerfit.solver.build import BuiltModel
from layerfit.solver.costs import device_fixed
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
    """Whether the bound is computed for this model: every layer on GPUs, no experts placed apart,
    no rule fixing the layout's shape."""
    rules = instance.rules
    return (
        instance.experts is None
        and layers == instance.n_layers
        and rules.tensor_split is None
        and rules.device_count is None
        and rules.layer_target in (None, instance.n_layers)
    )


def most_blocks(devices: Sequence[DeviceRoom], reserve: int, runs: tuple[int, ...]) -> int:
    """An upper bound on the blocks the devices hold when each keeps ``reserve`` of its capacity free,
    each taking the lightest run of its length (``runs``: ``bounds.lightest_runs``); -1: one cannot."""
    total = 0
    for device in devices:
        free = min(device.room, device.capacity - reserve) - device.fixed
        if free < 0:
            return -1
        total += blocks_within(runs, free)
    return total


def best_reserve(devices: Sequence[DeviceRoom], blocks: int, runs: tuple[int, ...]) -> int | None:
    """The largest reserve with which ``devices`` still hold ``blocks`` blocks (``None``: not even 0)."""
    if not devices or most_blocks(devices, 0, runs) < blocks:
        return None
    low, high = 0, max(device.capacity for device in devices)
    while low < high:
        middle = (low + high + 1) // 2
        if most_blocks(devices, middle, runs) >= blocks:
            low = middle
        else:
            high = middle - 1
    return low


def _charged(devices: list[DeviceRoom], extra: int, runs: tuple[int, ...], reserve: int) -> list[DeviceRoom]:
    """``devices`` with ``extra`` charged to the one where it costs the fewest blocks at ``reserve``."""
    if not extra or not devices:
        return devices

    def loss(i: int) -> int:
        free = min(devices[i].room, devices[i].capacity - reserve) - devices[i].fixed
        return blocks_within(runs, free) - blocks_within(runs, free - extra) if free >= extra else 1 << 62

    cheapest = min(range(len(devices)), key=loss)
    return [
        device if i != cheapest else DeviceRoom(device.capacity, device.room, device.fixed + extra)
        for i, device in enumerate(devices)
    ]


def _largest(instance: Instance, kind: SlotKind, count: int, worker: int | None) -> list[tuple[int, int]]:
    """The ``count`` largest (capacity, room) pairs of GPUs that may fill a ``kind`` slot (of
    ``worker`` only, unless ``None``), each list sorted on its own (so the i-th pair dominates the
    i-th GPU of any choice); short: fewer."""
    gpus = [
        (instance.classes[c].capacity, gpu_room(instance, instance.classes[c], kind))
        for c in instance.classes_for(kind)
        if worker is None or instance.classes[c].worker == worker
        for _ in range(instance.classes[c].count)
    ]
    capacities = sorted((capacity for capacity, _ in gpus), reverse=True)[:count]
    rooms = sorted((room for _, room in gpus), reverse=True)[:count]
    return list(zip(capacities, rooms, strict=True))


PER_WORKER_LIMIT = 48
"""Up to this many candidate workers, the spread bound also takes the main worker's GPUs (and,
with one rpc-server worker, that worker's) from one worker at a time."""


def spread_bound(instance: Instance, gpus: int, workers: int, known: int | None = None) -> int | None:
    """An upper bound on the headroom of the tightest GPU over layouts with every layer on ``gpus``
    GPUs of ``workers`` workers (``None``: the relaxation holds no such layout). The least of the
    pooled relaxation and, on clusters of at most ``PER_WORKER_LIMIT`` candidate workers, the same
    with the local GPUs from each main worker in turn, and with one rpc-server worker, the remote
    GPUs from each in turn: each is a relaxation, so each bounds the optimum. ``known``: a headroom
    already reached; a pooled bound at or below it needs no refining."""
    pooled = _bound_over(instance, gpus, workers, [None], [None])
    if pooled is not None and known is not None and pooled <= known:
        return pooled
    mains = [w for w, view in enumerate(instance.workers) if view.main_ok]
    servers = [w for w, view in enumerate(instance.workers) if view.rpc_ok]
    if pooled is None or len(mains) + len(servers) > PER_WORKER_LIMIT:
        return pooled
    bounds = [pooled, _bound_over(instance, gpus, workers, [*mains], [None])]
    if workers == 2:
        bounds.append(_bound_over(instance, gpus, workers, [None], [*servers]))
    return min(bound for bound in bounds if bound is not None)


def _bound_over(
    instance: Instance, gpus: int, workers: int, mains: list[int | None], servers: list[int | None]
) -> int | None:
    """The largest reserve over the splits into rpc and local devices and the given choices of
    where the local (``mains``) and the remote (``servers``) GPUs come from (``None``: anywhere)."""
    runs = lightest_runs(instance)
    multi = gpus > 1
    rpc_fixed = device_fixed(instance.costs, DeviceRole.RPC, None, multi=multi)
    best: int | None = None
    for local in range(min(gpus, instance.local_slots) + 1):
        remote = gpus - local
        if remote > instance.rpc_slots or (workers > 1) != (remote > 0) or remote < workers - 1:
            continue
        for server in servers:
            rpc = [DeviceRoom(c, r, rpc_fixed) for c, r in _largest(instance, SlotKind.RPC, remote, server)]
            if len(rpc) < remote:
                continue
            for main in mains:
                own = _largest(instance, SlotKind.LOCAL, local, main)
                if len(own) < local:
                    continue
                found = _group_bound(instance, rpc, own, multi, runs)
                if found is not None and (best is None or found > best):
                    best = found
    return best


def _group_bound(
    instance: Instance, rpc: list[DeviceRoom], own: list[tuple[int, int]], multi: bool, runs: tuple[int, ...]
) -> int | None:
    """The largest reserve for one split: the main GPU (with the output layer) is whichever local
    GPU that costs the fewest blocks, the first device's copies likewise in the first group."""
    costs = instance.costs
    local_fixed = device_fixed(instance.costs, DeviceRole.LOCAL, None, multi=multi) if own else 0
    main_fixed = device_fixed(instance.costs, DeviceRole.MAIN, None, multi=multi) if own else 0
    first = costs.first_device if multi else 0

    def holds(reserve: int) -> bool:
        local = [DeviceRoom(c, r, local_fixed) for c, r in own]
        if local:
            # becoming the main GPU swaps the local fixed cost for the main one and adds the output
            local = _charged(local, main_fixed - local_fixed + costs.output, runs, reserve)
            remote = rpc
        else:
            remote = _charged(rpc, costs.output, runs, reserve)
        if remote:
            remote = _charged(remote, first, runs, reserve)
        else:
            local = _charged(local, first, runs, reserve)
        return most_blocks([*remote, *local], reserve, runs) >= instance.n_blocks

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
    """A lower bound on the allocatable VRAM (tie-break unit) of ``gpus`` GPUs holding every block:
    the least a choice of ``gpus`` candidate GPUs costs whose whole-block capacities
    (``bounds.class_blocks``, the larger of its two slot kinds) add up to the blocks (a knapsack
    over GPUs, forgetting workers and order); without that, the ``gpus`` smallest."""
    n = instance.n_blocks
    multi = gpus > 1
    by_blocks: dict[int, list[int]] = {}
    for cls in instance.classes:
        if not (cls.rpc_ok or cls.local_ok):
            continue
        kinds = [kind for kind, ok in ((SlotKind.RPC, cls.rpc_ok), (SlotKind.LOCAL, cls.local_ok)) if ok]
        held = min(n, max(class_blocks(instance, cls, kind, multi=multi) for kind in kinds))
        by_blocks.setdefault(held, []).extend([cls.tie_capacity] * cls.count)
    smallest = sorted(size for sizes in by_blocks.values() for size in sizes)
    if len(smallest) < gpus:
        return sum(smallest)
    # least[j][b]: the least total of j GPUs holding b blocks or more (b capped at n)
    least = np.full((gpus + 1, n + 1), _NONE, dtype=np.int64)
    least[0, 0] = 0
    for held, sizes in by_blocks.items():
        costs = np.cumsum(sorted(sizes)[:gpus])
        before = least.copy()
        for taken, cost in enumerate(costs, start=1):
            gain = min(n, held * taken)
            source = before[: gpus + 1 - taken]
            reached = np.full_like(source, _NONE)
            reached[:, gain:n] = source[:, : n - gain]
            reached[:, n] = source[:, n - gain :].min(axis=1)  # n or more blocks count as n
            least[taken:] = np.minimum(least[taken:], reached + int(cost))
    found = int(least[gpus, n])
    return found if found < _NONE else sum(smallest[:gpus])


_NONE = 1 << 60
"""No choice reaches this state."""


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
    """``layout``'s GPUs, in its order, with its blocks placed to keep the largest reserve free on
    every GPU (the spread tie-break); ``None`` when the model cannot hold its GPUs or no reserve
    holds the blocks."""
    devices = _rooms(instance, layout)
    if devices is None or _runs(instance, devices, 0) is None:
        return None
    low, high = 0, max(device.capacity for device in devices)
    while low < high:
        middle = (low + high + 1) // 2
        if _runs(instance, devices, middle) is None:
            high = middle - 1
        else:
            low = middle
    blocks = _runs(instance, devices, low) or []
    placed = tuple(
        DeviceAssignment(worker=device.worker, gpu_index=device.gpu_index, blocks=count)
        for device, count in zip(layout.devices, blocks, strict=True)
    )
    return layout.model_copy(update={"devices": placed, "output_offloaded": True})


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


def _runs(instance: Instance, devices: Sequence[DeviceRoom], reserve: int) -> list[int] | None:
    """Blocks per device when each keeps ``reserve`` free: from the last device back, each takes the
    longest run it holds (at least one block left for each device before it); ``None``: some block
    finds no room."""
    up, down = instance.costs.block_prefix_up, instance.costs.block_prefix_down
    end = instance.n_blocks
    counts = [0] * len(devices)
    for position in reversed(range(len(devices))):
        free = min(devices[position].room, devices[position].capacity - reserve) - devices[position].fixed
        begin = max(position, bisect_left(down, up[end] - free, 0, end + 1))
        if begin >= end:
            return None
        counts[position] = end - begin
        end = begin
    return counts if end == 0 else None
