"""Cheap, valid bounds that let the search skip models that cannot reach a tier value.

All figures are in the model's own scaled units, so a bound holds for the model exactly (also when
scaling is inexact): a device's block cost in the model is at least the rounded-down prefix-sum
difference, and its fixed cost at least the smallest device-kind cost of its role.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from functools import lru_cache

from layerfit.domain.profile import DeviceRole
from layerfit.solver.model.costs import least_fixed
from layerfit.solver.model.instance import GpuClass, Instance, SlotKind

COVERED_CACHE = 1 << 15
"""Entries kept by each memo of the order searches (a long-running planner sees many profiles)."""


def layer_ceiling(instance: Instance) -> int:
    """The most GPU layers any layout can have under the rules."""
    rules = instance.rules
    ceiling = instance.n_layers if rules.layer_target is None else rules.layer_target
    if rules.tensor_split is not None:
        ceiling = min(ceiling, max(rules.tensor_split.blocks_by_layers, default=0))
    if instance.rpc_slots + instance.local_slots == 0:
        ceiling = 0
    return ceiling


def device_blocks(
    instance: Instance, capacity: int, kind: SlotKind, *, unified: bool | None = None, multi: bool = False
) -> int:
    """An upper bound on the blocks one device of ``capacity`` holds in a slot of ``kind``: its
    contiguous run of blocks costs at least the lightest run of that length, on top of the least
    fixed cost of a device of that role under the rules, on a worker of memory type ``unified``
    (``None``: either), in a layout of several devices when ``multi``."""
    roles = (DeviceRole.RPC,) if kind is SlotKind.RPC else (DeviceRole.LOCAL, DeviceRole.MAIN)
    overhead = least_fixed(
        instance.costs, roles, unified=unified, partial=instance.rules.partial_values, multi=True if multi else None
    )
    return blocks_within(lightest_runs(instance), capacity - overhead)


def class_blocks(instance: Instance, cls: GpuClass, kind: SlotKind, *, multi: bool = False) -> int:
    """``device_blocks`` of one GPU of ``cls``: its room (``gpu_room``) and its worker's memory type."""
    unified = instance.workers[cls.worker].unified
    return device_blocks(instance, gpu_room(instance, cls, kind), kind, unified=unified, multi=multi)


def block_capacity(instance: Instance, worker: int, kind: SlotKind, gpus: int) -> int:
    """An upper bound on the blocks ``worker``'s GPUs hold in slots of ``kind`` (RPC servers, or
    local GPUs of the main worker), using at most ``gpus`` of them."""
    eligible = [
        instance.classes[c]
        for c in instance.workers[worker].classes
        if (instance.classes[c].rpc_ok if kind is SlotKind.RPC else instance.classes[c].local_ok)
    ]
    blocks = sorted((class_blocks(instance, cls, kind) for cls in eligible for _ in range(cls.count)), reverse=True)
    return sum(blocks[:gpus])


def single_worker_layers(instance: Instance, worker: int, gpus: int) -> int:
    """An upper bound on the GPU layers ``worker`` can hold alone on at most ``gpus`` of its GPUs."""
    blocks = block_capacity(instance, worker, SlotKind.LOCAL, gpus)
    has_gpu = any(instance.classes[c].local_ok for c in instance.workers[worker].classes)
    return min(blocks, instance.n_blocks) + (1 if has_gpu and gpus > 0 else 0)


def remote_gpu_blocks(instance: Instance) -> tuple[tuple[int, int], ...]:
    """``(device_blocks, worker)`` of every GPU that can serve an RPC slot, most blocks first (at
    most ``rpc_slots`` per class: no layout uses more)."""
    return tuple(
        sorted(
            (
                (class_blocks(instance, cls, SlotKind.RPC), cls.worker)
                for cls in instance.classes
                if cls.rpc_ok and instance.workers[cls.worker].rpc_ok
                for _ in range(min(cls.count, instance.rpc_slots))
            ),
            reverse=True,
        )
    )


def top_remote_blocks(remote: tuple[tuple[int, int], ...], gpus: int, without: frozenset[int]) -> int:
    """The blocks of the ``gpus`` best remote GPUs outside the workers ``without`` (``remote`` is
    sorted, so the scan stops after ``gpus`` of them and the GPUs of ``without`` before them)."""
    total = taken = 0
    for blocks, owner in remote:
        if taken >= gpus:
            break
        if owner not in without:
            total += blocks
            taken += 1
    return total


def most_remote_gpus(instance: Instance, rpc_workers: frozenset[int], servers: int) -> int:
    """The most RPC slots ``servers`` of these workers can fill: their largest GPU counts."""
    counts = sorted(
        (
            sum(instance.classes[c].count for c in instance.workers[w].classes if instance.classes[c].rpc_ok)
            for w in rpc_workers
        ),
        reverse=True,
    )
    return min(instance.rpc_slots, sum(counts[:servers]))


def _holds_output_alone(instance: Instance, worker: int) -> bool:
    """Whether one of ``worker``'s GPUs has room, as an rpc-server, for the output layer alone."""
    view = instance.workers[worker]
    overhead = least_fixed(
        instance.costs, (DeviceRole.RPC,), unified=view.unified, partial=instance.rules.partial_values, multi=None
    )
    need = overhead + instance.costs.output
    classes = (instance.classes[c] for c in view.classes)
    return any(cls.rpc_ok and gpu_room(instance, cls, SlotKind.RPC) >= need for cls in classes)


def multi_worker_candidates(
    instance: Instance, workers: int, ceiling: int, gpus: int | None = None
) -> tuple[frozenset[int], frozenset[int]]:
    """Main workers and rpc-server workers that can be part of a layout with ``workers`` workers
    reaching ``ceiling`` GPU layers, by the capacity bound above (the output layer adds one): the
    other workers give at most their best workers' blocks, and at most ``rpc_slots`` GPUs. With
    ``gpus``, for layouts of that many GPUs (each rpc-server worker has at least one)."""
    n = instance.n_blocks
    rpc_slots = instance.rpc_slots if gpus is None else min(instance.rpc_slots, gpus)
    local_slots = instance.local_slots if gpus is None else min(instance.local_slots, gpus - (workers - 1))
    local = {
        w: block_capacity(instance, w, SlotKind.LOCAL, local_slots)
        for w, view in enumerate(instance.workers)
        if view.main_ok
    }
    remote = {
        w: block_capacity(instance, w, SlotKind.RPC, rpc_slots)
        for w, view in enumerate(instance.workers)
        if view.rpc_ok
    }
    # a GPU with no room for a block may still hold the output layer alone, as the last device
    remote = {w: blocks for w, blocks in remote.items() if blocks > 0 or _holds_output_alone(instance, w)}
    ranked = sorted(remote.values(), reverse=True)
    remote_list = remote_gpu_blocks(instance)

    def top(count: int, without: int) -> int:
        """The ``count`` largest RPC capacities, leaving out ``without``'s own once."""
        chosen = ranked[: count + 1]
        if without in remote and remote[without] in chosen:
            chosen.remove(remote[without])
        return sum(chosen[:count])

    def others(count: int, slots: int, without: int) -> int:
        """What ``count`` workers besides ``without`` hold on at most ``slots`` RPC GPUs."""
        return min(top(count, without), top_remote_blocks(remote_list, slots, frozenset((without,))))

    best_local = max(local.values(), default=-1)
    mains = frozenset(
        w for w, blocks in local.items() if min(n, blocks + others(workers - 1, rpc_slots, w)) + 1 >= ceiling
    )
    rpc = frozenset(
        v
        for v, blocks in remote.items()
        if best_local >= 0 and min(n, blocks + best_local + others(workers - 2, rpc_slots - 1, v)) + 1 >= ceiling
    )
    return mains, rpc


@lru_cache(maxsize=64)
def _lightest_runs_of(up: tuple[int, ...], down: tuple[int, ...]) -> tuple[int, ...]:
    """``runs[b-1]``: the least any ``b`` consecutive blocks cost, a run ``[s, s + b)`` costing
    ``up[s + b] - down[s]`` as the model counts it (non-decreasing in ``b``)."""
    n = len(up) - 1
    return tuple(min(up[i + b] - down[i] for i in range(n - b + 1)) for b in range(1, n + 1))


def lightest_runs(instance: Instance) -> tuple[int, ...]:
    """``runs[b-1]``: the least any ``b`` consecutive blocks of the model cost, in model units (with
    blocks all alike, ``b`` times one block's cost, as the model counts them then)."""
    costs = instance.costs
    if costs.uniform_block is not None:
        return tuple(costs.uniform_block * b for b in range(1, instance.n_blocks + 1))
    return _lightest_runs_of(costs.block_prefix_up, costs.block_prefix_down)


def blocks_total(instance: Instance) -> int:
    """The least every block together costs in the model (its offloaded-total row; with blocks all
    alike, their count times one block's cost)."""
    costs = instance.costs
    if costs.uniform_block is not None:
        return costs.uniform_block * instance.n_blocks
    return costs.block_prefix_down[-1]


def blocks_within(cumulative: tuple[int, ...], room: int) -> int:
    """The longest run whose least cost (``cumulative``, non-decreasing) fits in ``room``."""
    return bisect_right(cumulative, room)


def least_overhead(
    instance: Instance, roles: tuple[DeviceRole, ...], *, unified: bool, devices: int, layers: int
) -> int:
    """The least fixed cost of a device of these roles on a worker of this memory type, in a layout
    of ``devices`` devices and ``layers`` GPU layers (every layer on GPUs means no partial offload;
    fewer means partial offload unless experts may stay on the host)."""
    partial = instance.rules.partial_values
    if layers == instance.n_layers:
        partial = (False,)
    elif instance.experts is None:
        partial = (True,)
    return least_fixed(instance.costs, roles, unified=unified, partial=partial, multi=devices > 1)


def single_worker_ordered_layers(instance: Instance, worker: int, gpus: int, layers: int) -> int:
    """An upper bound on the GPU layers ``worker`` alone holds on ``gpus`` of its GPUs, in a layout
    of ``layers`` layers (``ordered_layers`` over its largest GPUs, the main GPU holding the output)."""
    view = instance.workers[worker]
    capacities = sorted(
        (cls.capacity for c in view.classes if (cls := instance.classes[c]).local_ok for _ in range(cls.count)),
        reverse=True,
    )[:gpus]
    local = least_overhead(instance, (DeviceRole.LOCAL,), unified=view.unified, devices=gpus, layers=layers)
    main = least_overhead(instance, (DeviceRole.MAIN,), unified=view.unified, devices=gpus, layers=layers)
    if len(capacities) == 1:
        local = main
    return ordered_layers(instance, tuple(capacity - local for capacity in capacities), main - local)


def single_worker_reaches(instance: Instance, worker: int, gpus: int, layers: int) -> bool:
    """Whether both single-worker bounds let ``worker`` alone hold ``layers`` GPU layers on ``gpus``
    of its GPUs (``single_worker_layers``, then ``single_worker_ordered_layers``)."""
    return (
        single_worker_layers(instance, worker, gpus) >= layers
        and single_worker_ordered_layers(instance, worker, gpus, layers) >= layers
    )


def single_worker_mains(instance: Instance, gpus: int, layers: int) -> frozenset[int]:
    """The main workers that the bounds let hold ``layers`` GPU layers alone on ``gpus`` GPUs."""
    return frozenset(
        w
        for w, view in enumerate(instance.workers)
        if view.main_ok and single_worker_reaches(instance, w, gpus, layers)
    )


def ordered_layers(instance: Instance, rooms: tuple[int, ...], last_extra: int = 0) -> int:
    """An upper bound on the GPU layers devices with these rooms (capacity less a fixed cost) hold
    together, in the best order: an exact search over the orders of the devices, each taking the
    longest run of blocks that fits, from the last block backwards, the first of them (the last
    device) also paying ``last_extra`` and, when it holds it, the output layer. Tighter than
    summing ``device_blocks`` when blocks differ in size, since a run cannot pick light blocks."""
    n = instance.n_blocks
    prefix = instance.costs.block_prefix_down
    with_output = min(n, _ordered_blocks(prefix, rooms, last_extra + instance.costs.output))
    without = min(n, _ordered_blocks(prefix, rooms, last_extra))
    return max(with_output + 1, without) if rooms else 0


def ordered_layers_ending_on(instance: Instance, last_rooms: tuple[int, ...], rooms: tuple[int, ...]) -> int:
    """``ordered_layers`` when the last device is one of ``last_rooms`` (room less every fixed cost
    it pays as the last device) and the others are ``rooms``: the last one takes the longest run
    from the end (less the output layer when it holds it), then the others in their best order."""
    n = instance.n_blocks
    prefix = instance.costs.block_prefix_down
    values = sorted(set(rooms), reverse=True)
    counts = tuple(rooms.count(value) for value in values)
    best = 0
    for last in set(last_rooms):
        with_output = _extend(prefix, 0, last - instance.costs.output)
        without = _extend(prefix, 0, last)
        covered_with = min(n, _covered_after(prefix, tuple(values), counts, with_output))
        covered_without = min(n, _covered_after(prefix, tuple(values), counts, without))
        best = max(best, covered_with + (1 if last >= instance.costs.output else 0), covered_without)
    return best


def _ordered_blocks(prefix: tuple[int, ...], rooms: tuple[int, ...], output: int) -> int:
    values = sorted(set(rooms), reverse=True)
    counts = tuple(rooms.count(value) for value in values)
    return _covered(prefix, tuple(values), counts, output)


@lru_cache(maxsize=COVERED_CACHE)
def _covered(prefix: tuple[int, ...], values: tuple[int, ...], counts: tuple[int, ...], output: int) -> int:
    """The longest suffix of blocks the devices (``counts[i]`` of room ``values[i]``) cover."""
    best = 0
    for i, count in enumerate(counts):
        if not count:
            continue
        rest = (*counts[:i], count - 1, *counts[i + 1 :])
        if any(rest):
            covered = _covered(prefix, values, rest, output)
            best = max(best, _extend(prefix, covered, values[i]))
        else:
            best = max(best, _extend(prefix, 0, values[i] - output))
    return best


@lru_cache(maxsize=COVERED_CACHE)
def _covered_after(prefix: tuple[int, ...], values: tuple[int, ...], counts: tuple[int, ...], covered: int) -> int:
    """The longest suffix of blocks covered once the devices (``counts[i]`` of room ``values[i]``,
    in their best order) come before a suffix of ``covered`` blocks."""
    best = covered
    for i, count in enumerate(counts):
        if count:
            rest = (*counts[:i], count - 1, *counts[i + 1 :])
            best = max(best, _extend(prefix, _covered_after(prefix, values, rest, covered), values[i]))
    return best


def _extend(prefix: tuple[int, ...], covered: int, room: int) -> int:
    """The suffix covered once a device of ``room`` takes the longest run before ``covered``."""
    if room < 0:
        return covered
    end = len(prefix) - 1 - covered
    return len(prefix) - 1 - bisect_left(prefix, prefix[end] - room, 0, end + 1)


def gpu_room(instance: Instance, cls: GpuClass, kind: SlotKind) -> int:
    """What a GPU of ``cls`` can give a device in a slot of ``kind``: its capacity, and on a
    unified-memory worker no more than the pool less the least its own process keeps there (an
    rpc-server's fixed cost, or the main process's least host cost)."""
    view = instance.workers[cls.worker]
    if not view.unified:
        return cls.capacity
    keep = instance.costs.rpc_host if kind is SlotKind.RPC else min(instance.costs.host.values(), default=0)
    return min(cls.capacity, view.ram_capacity - keep)
