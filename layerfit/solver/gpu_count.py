"""A lower bound on the GPUs of a layout with a given number of workers (``fewest_gpus``).

Like ``bounds``, every figure is in the model's own scaled units, so the bound holds for the model.
"""

from __future__ import annotations

from collections.abc import Iterable

from layerfit.domain.profile import DeviceRole
from layerfit.solver.bounds import blocks_within, gpu_room, least_overhead, lightest_runs, ordered_layers
from layerfit.solver.instance import Instance, SlotKind

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

    Then blocks cannot be split between devices: the count grows until some order of the largest
    rooms of all candidate GPUs holds the layers (``bounds.ordered_layers``, an exact search over
    orders, each device taking the longest run of blocks that fits).
    """
    most_gpus = instance.local_slots + (instance.rpc_slots if workers > 1 else 0)
    if workers <= 2 and _fewest(instance, workers, ceiling, multi=False, gpus=range(1, 2)) == 1:
        return 1
    fewest = _fewest(instance, workers, ceiling, multi=True, gpus=range(max(2, workers - 1), most_gpus + 1))
    if fewest is None:
        return None
    rooms = _all_rooms(instance, ceiling)
    while fewest <= most_gpus and ordered_layers(instance, coarse_rooms(rooms[:fewest])) < ceiling:
        fewest += 1  # no order of the largest rooms holds the layers: blocks cannot be split
    return fewest if fewest <= most_gpus else None


ORDER_VALUES = 8
"""``coarse_rooms``: at most this many distinct rooms in the exact search over device orders."""


def _all_rooms(instance: Instance, layers: int) -> list[int]:
    """Every candidate GPU's room in a layout of several devices and ``layers`` GPU layers, largest
    first: its capacity (``gpu_room``) less the least fixed cost of any role on its worker."""
    roles = (DeviceRole.RPC, DeviceRole.LOCAL, DeviceRole.MAIN)
    rooms = []
    for cls in instance.classes:
        if not (cls.rpc_ok or cls.local_ok):
            continue
        unified = instance.workers[cls.worker].unified
        overhead = least_overhead(instance, roles, unified=unified, devices=2, layers=layers)
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
