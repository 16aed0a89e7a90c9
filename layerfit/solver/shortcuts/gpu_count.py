"""A lower bound on the GPUs of a layout with a given number of workers (``fewest_gpus``).

Like ``model.capacity``, every figure is in the model's own scaled units, so the bound holds for the model.
"""

from __future__ import annotations

from collections.abc import Iterable

from layerfit.domain.limits import MAX_DEVICES
from layerfit.domain.profile import DeviceRole
from layerfit.solver.model.capacity import (
    blocks_within,
    gpu_room,
    least_overhead,
    lightest_runs,
    ordered_layers,
    ordered_layers_ending_on,
)
from layerfit.solver.model.instance import Instance, SlotKind

Measures = tuple[tuple[int, ...], tuple[int, ...]]
"""Per worker: prefix sums over its best GPUs of (blocks they hold, bytes they offer blocks)."""
MEASURES = (0, 1)


def _worker_measures(instance: Instance, worker: int, kind: SlotKind, layers: int, *, multi: bool) -> Measures:
    """``(blocks, room)`` prefix sums over ``worker``'s best GPUs for slots of ``kind`` (at most the
    slots of that kind): each GPU's room less the least fixed cost of a device of that kind in a
    layout of ``layers`` GPU layers (of several devices when ``multi``), and the longest run of
    blocks that fits in it. Each sorted best first."""
    view = instance.workers[worker]
    if not (view.rpc_ok if kind is SlotKind.RPC else view.main_ok):
        return (0,), (0,)
    classes = [instance.classes[c] for c in view.classes]
    eligible = [cls for cls in classes if (cls.rpc_ok if kind is SlotKind.RPC else cls.local_ok)]
    rooms = sorted((gpu_room(instance, cls, kind) for cls in eligible for _ in range(cls.count)), reverse=True)
    rooms = rooms[: instance.slots(kind)]
    roles = (DeviceRole.RPC,) if kind is SlotKind.RPC else (DeviceRole.LOCAL, DeviceRole.MAIN)
    overhead = min(
        least_overhead(instance, roles, unified=view.unified, devices=devices, layers=layers)
        for devices in ((2,) if multi else (1, 2))
    )
    runs = lightest_runs(instance)
    return _prefix(blocks_within(runs, room - overhead) for room in rooms), _prefix(room - overhead for room in rooms)


def _prefix(values: Iterable[int]) -> tuple[int, ...]:
    sums = [0]
    for value in values:
        sums.append(sums[-1] + max(0, value))
    return tuple(sums)


def _most_remote(prefixes: list[tuple[int, ...]], servers: int, gpus: int) -> list[int]:
    """``best[j]``: the most ``j`` remote GPUs of at most ``servers`` workers give (a knapsack over
    the workers, each giving its ``i`` best GPUs: ``prefix[i]``)."""
    best = [[0] * (gpus + 1) for _ in range(servers + 1)]
    for prefix in prefixes:
        for k in range(servers, 0, -1):
            row, fewer = best[k], best[k - 1]
            for j in range(gpus, 0, -1):
                for i in range(1, min(j, len(prefix) - 1) + 1):
                    row[j] = max(row[j], fewer[j - i] + prefix[i])
    return best[servers]


def _layer_needs(instance: Instance, layers: int) -> tuple[int, int]:
    """The least blocks and the least bytes (blocks and output layer) a layout of ``layers`` GPU
    layers puts on GPUs: ``layers - 1`` blocks and the output layer, or ``layers`` blocks."""
    n = instance.n_blocks
    prefix = instance.costs.block_prefix_down

    def offloaded(blocks: int) -> int:
        return prefix[n] - prefix[n - blocks]

    with_output = offloaded(min(n, max(0, layers - 1))) + instance.costs.output
    without = offloaded(layers) if layers <= n else with_output
    return max(0, layers - 1), min(with_output, without)


def fewest_gpus(instance: Instance, workers: int, ceiling: int) -> int | None:
    """A lower bound on the GPUs of any layout with exactly ``workers`` workers and ``ceiling`` GPU
    layers, ``None`` when no GPU count reaches it.

    The main worker gives its ``j`` best GPUs, the ``workers - 1`` rpc-server workers (each with at
    least one GPU) their best ``g - j`` together. Two capacity rows must both hold: the blocks each
    GPU can hold (``device_blocks``), and the bytes of every offloaded block and the output layer
    against the GPUs' rooms less their least fixed cost. The remote part is a knapsack over the
    workers that can matter: for each GPU count and measure, the ``workers`` best workers at that
    count (one more than the servers, so that any main worker can be left out); leaving a worker
    out is exact, since an unused better one can take its place. Each device of a layout of two or
    more pays at least the several-devices fixed cost.

    A selection used whole fixes the count (when the bound allows it).

    Then blocks cannot be split between devices: the count grows until some order of the largest
    rooms of all candidate GPUs holds the layers (``bounds.ordered_layers``, an exact search over
    orders, each device taking the longest run of blocks that fits).
    """
    fewest = _capacity_count(instance, workers, ceiling)
    used = instance.rules.device_count  # a selection used whole: every layout has its GPUs
    if fewest is None or used is None:
        return fewest
    return used if fewest <= used <= most_gpus(instance, workers) else None


def _capacity_count(instance: Instance, workers: int, ceiling: int) -> int | None:
    """``fewest_gpus`` before a selection used whole fixes the count."""
    most = most_gpus(instance, workers)
    if workers <= 2 and _fewest(instance, workers, ceiling, multi=False, gpus=range(1, 2)) == 1:
        return 1
    fewest = _fewest(instance, workers, ceiling, multi=True, gpus=range(max(2, workers - 1), most + 1))
    if fewest is None:
        return None
    rooms = all_rooms(instance, ceiling)
    while fewest <= most and (
        ordered_layers(instance, coarse_rooms(rooms[:fewest])) < ceiling
        or not _some_split_holds(instance, workers, ceiling, fewest)
    ):
        fewest += 1  # no order of the rooms a layout of this many GPUs can have holds the layers
    return fewest if fewest <= most else None


def most_gpus(instance: Instance, workers: int) -> int:
    """The most devices a layout of ``workers`` workers can have: its slots, and no more than one
    llama.cpp process runs (``domain.limits.MAX_DEVICES``)."""
    return min(MAX_DEVICES, instance.local_slots + (instance.rpc_slots if workers > 1 else 0))


ORDER_VALUES = 8
"""``coarse_rooms``: at most this many distinct rooms in the exact search over device orders."""


def all_rooms(instance: Instance, layers: int, devices: int = 2) -> list[int]:
    """Every candidate GPU's room in a layout of ``devices`` devices (several by default) and
    ``layers`` GPU layers, largest first: its capacity (``gpu_room``) less the least fixed cost of
    any role on its worker."""
    roles = (DeviceRole.RPC, DeviceRole.LOCAL, DeviceRole.MAIN)
    rooms = []
    for cls in instance.classes:
        if not (cls.rpc_ok or cls.local_ok):
            continue
        unified = instance.workers[cls.worker].unified
        overhead = least_overhead(instance, roles, unified=unified, devices=devices, layers=layers)
        room = max(gpu_room(instance, cls, kind) for kind in SlotKind) - overhead
        rooms.extend([room] * cls.count)
    return sorted(rooms, reverse=True)


def coarse_rooms(rooms: list[int]) -> tuple[int, ...]:
    """The rooms with each rounded up to the largest of its group, in at most ``ORDER_VALUES``
    groups (rounding up keeps ``ordered_layers`` an upper bound and its search small)."""
    values = sorted(set(rooms), reverse=True)
    if len(values) <= ORDER_VALUES:
        return tuple(rooms)
    step = -(-len(values) // ORDER_VALUES)
    ceiling_of = {value: values[(i // step) * step] for i, value in enumerate(values)}
    return tuple(ceiling_of[room] for room in rooms)


def _fewest(instance: Instance, workers: int, ceiling: int, *, multi: bool, gpus: range) -> int | None:
    """``fewest_gpus`` over the GPU counts ``gpus``, each device paying the fixed costs of a layout of
    several devices when ``multi``."""
    servers = workers - 1
    rpc_slots = instance.rpc_slots if servers else 0
    needs = _layer_needs(instance, ceiling)
    remote = {
        w: _worker_measures(instance, w, SlotKind.RPC, ceiling, multi=multi) for w in range(len(instance.workers))
    }
    remote = {w: measures for w, measures in remote.items() if len(measures[0]) > 1}
    if len(remote) < servers:
        return None
    chosen: set[int] = set()
    for measure in MEASURES:
        for i in range(1, rpc_slots + 1):
            ranked = sorted(remote, key=lambda w: remote[w][measure][min(i, len(remote[w][measure]) - 1)])
            chosen.update(ranked[-(servers + 1) :])

    def others(without: int | None) -> list[list[int]]:
        pool = sorted(chosen - {without})
        return [_most_remote([remote[w][m] for w in pool], servers, rpc_slots) for m in MEASURES]

    def least(local: Measures, remote_best: list[list[int]], below: int) -> int | None:
        for count in range(gpus.start, below):
            for j in range(min(len(local[0]) - 1, count - servers) + 1):
                rest = min(count - j, rpc_slots)
                if all(local[m][j] + remote_best[m][rest] >= needs[m] for m in MEASURES):
                    return count
        return None

    shared = others(None)
    most_gpus = gpus.stop
    mains = {
        m: _worker_measures(instance, m, SlotKind.LOCAL, ceiling, multi=multi)
        for m, view in enumerate(instance.workers)
        if view.main_ok
    }
    optimistic = {m: least(local, shared, most_gpus) for m, local in mains.items()}
    best: int | None = None
    for m in sorted((m for m, g in optimistic.items() if g is not None), key=lambda m: optimistic[m] or 0):
        if best is not None and (optimistic[m] or 0) >= best:
            break
        found = least(mains[m], others(m), most_gpus if best is None else best) if m in chosen else optimistic[m]
        if found is not None:
            best = found
    return best


def _some_split_holds(instance: Instance, workers: int, ceiling: int, gpus: int) -> bool:
    """Whether some split of ``gpus`` GPUs into ``j`` of a main worker's own and ``gpus - j`` of
    ``workers - 1`` rpc-server workers can hold ``ceiling`` layers, by the order search with each
    GPU's room for its role: the main GPU (the last device when ``j > 0``) pays the main device's
    fixed cost and keeps, on a unified-memory worker, the main process's host memory out of its pool;
    the servers' GPUs come from other workers. For a valid upper bound the servers may be any
    workers that can give their share (each at most ``gpus - j - servers + 1`` GPUs, its best),
    and the main workers that own none of the best remote GPUs are merged into one with the largest
    room at each rank."""
    servers = workers - 1
    for j in range(min(instance.local_slots, gpus - servers) + 1):
        pool = _remote_pool(instance, servers, gpus - j, ceiling, gpus)
        remote = None if pool is None else _take(pool, gpus - j, None)
        if pool is None or remote is None:
            continue
        if j == 0:
            if ordered_layers(instance, coarse_rooms(remote)) >= ceiling:
                return True
            continue
        owners = {worker for _, worker in pool[: gpus - j]}
        merged: list[int] = []
        merged_extra: int | None = None
        for m, view in enumerate(instance.workers):
            local = _local_rooms(instance, m, j, ceiling, gpus) if view.main_ok else None
            if local is None:
                continue
            rooms, extra = local
            if m in owners:
                others = _take(pool, gpus - j, m)
                if others is not None and _holds(instance, rooms, extra, others, ceiling):
                    return True
                continue
            merged = [max(pair) for pair in zip(merged, rooms, strict=True)] if merged else rooms
            merged_extra = extra if merged_extra is None else min(merged_extra, extra)
        if merged and _holds(instance, merged, merged_extra or 0, remote, ceiling):
            return True
    return False


def _holds(instance: Instance, local: list[int], extra: int, remote: list[int], ceiling: int) -> bool:
    """Whether the order search over these rooms, one of ``local`` last paying ``extra``, holds
    ``ceiling`` layers."""
    for last in sorted(set(local), reverse=True):
        position = local.index(last)
        rest = coarse_rooms(sorted([*local[:position], *local[position + 1 :], *remote], reverse=True))
        if ordered_layers_ending_on(instance, (last - extra,), rest) >= ceiling:
            return True
    return False


def _local_rooms(instance: Instance, worker: int, j: int, layers: int, gpus: int) -> tuple[list[int], int] | None:
    """The rooms of ``worker``'s ``j`` best GPUs for local slots, less a local device's least fixed
    cost, and what the main GPU pays on top; ``None`` when it has fewer than ``j``."""
    view = instance.workers[worker]
    rooms = sorted(
        (
            gpu_room(instance, cls, SlotKind.LOCAL)
            for c in view.classes
            if (cls := instance.classes[c]).local_ok
            for _ in range(cls.count)
        ),
        reverse=True,
    )[:j]
    if len(rooms) < j:
        return None
    local = least_overhead(instance, (DeviceRole.LOCAL,), unified=view.unified, devices=gpus, layers=layers)
    main = least_overhead(instance, (DeviceRole.MAIN,), unified=view.unified, devices=gpus, layers=layers)
    if j == 1:
        local = main
    return [room - local for room in rooms], main - local


def _remote_pool(instance: Instance, servers: int, count: int, layers: int, gpus: int) -> list[tuple[int, int]] | None:
    """``(room, worker)`` of the GPUs ``servers`` rpc-server workers giving ``count`` GPUs
    together (each at least one) can give, best first: the workers that can give their share, each
    at most ``count - servers + 1`` of its best; ``None`` when they cannot give ``count``."""
    if count == 0:
        return [] if servers == 0 else None
    if servers == 0 or count > instance.rpc_slots or count < servers:
        return None
    share = count - servers + 1
    own: dict[int, list[int]] = {}
    for w, view in enumerate(instance.workers):
        if not view.rpc_ok:
            continue
        overhead = least_overhead(instance, (DeviceRole.RPC,), unified=view.unified, devices=gpus, layers=layers)
        rooms = sorted(
            (
                gpu_room(instance, cls, SlotKind.RPC) - overhead
                for c in view.classes
                if (cls := instance.classes[c]).rpc_ok
                for _ in range(cls.count)
            ),
            reverse=True,
        )[:share]
        if rooms:
            own[w] = rooms
    sizes = sorted((len(rooms) for rooms in own.values()), reverse=True)
    if len(sizes) < servers:
        return None

    def others_give(size: int) -> int:
        """The most GPUs the ``servers - 1`` largest other workers give next to one of ``size``."""
        if size >= sizes[servers - 1]:  # it can be one of the ``servers`` largest
            return sum(sizes[:servers]) - size
        return sum(sizes[: servers - 1])

    pool = [(room, w) for w, rooms in own.items() if len(rooms) + others_give(len(rooms)) >= count for room in rooms]
    return sorted(pool, reverse=True)


def _take(pool: list[tuple[int, int]], count: int, without: int | None) -> list[int] | None:
    """The ``count`` largest rooms of the pool outside ``without``'s GPUs, ``None`` if fewer."""
    taken: list[int] = []
    for room, worker in pool:
        if len(taken) == count:
            break
        if worker != without:
            taken.append(room)
    return taken if len(taken) == count else None
