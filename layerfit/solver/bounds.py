"""Cheap, valid bounds that let the search skip models that cannot reach a tier value.

All figures are in the model's own scaled units, so a bound holds for the model exactly (also when
scaling is inexact): a device's block cost in the model is at least the rounded-down prefix-sum
difference, and its fixed cost at least the smallest device-kind cost of its role.
"""

from __future__ import annotations

from functools import cache

from layerfit.domain.profile import DeviceRole
from layerfit.solver.instance import Instance, SlotKind


def layer_ceiling(instance: Instance) -> int:
    """The most GPU layers any layout can have under the rules."""
    rules = instance.rules
    ceiling = instance.n_layers if rules.layer_target is None else rules.layer_target
    if rules.tensor_split is not None:
        ceiling = min(ceiling, max(rules.tensor_split.blocks_by_layers, default=0))
    if instance.rpc_slots + instance.local_slots == 0:
        ceiling = 0
    return ceiling


def device_blocks(instance: Instance, capacity: int, kind: SlotKind) -> int:
    """An upper bound on the blocks one device of ``capacity`` holds in a slot of ``kind``: its
    contiguous run of blocks costs at least the lightest run of that length, on top of the role's
    smallest fixed cost."""
    roles = (DeviceRole.RPC,) if kind is SlotKind.RPC else (DeviceRole.LOCAL, DeviceRole.MAIN)
    overhead = min(cost for device, cost in instance.costs.device.items() if device.role in roles)
    return _blocks_within(_lightest_runs(instance), capacity - overhead)


def block_capacity(instance: Instance, worker: int, kind: SlotKind, gpus: int) -> int:
    """An upper bound on the blocks ``worker``'s GPUs hold in slots of ``kind`` (RPC servers, or
    local GPUs of the main worker), using at most ``gpus`` of them."""
    eligible = [
        instance.classes[c]
        for c in instance.workers[worker].classes
        if (instance.classes[c].rpc_ok if kind is SlotKind.RPC else instance.classes[c].local_ok)
    ]
    capacities = sorted((cls.capacity for cls in eligible for _ in range(cls.count)), reverse=True)[:gpus]
    return sum(device_blocks(instance, capacity, kind) for capacity in capacities)


def single_worker_layers(instance: Instance, worker: int, gpus: int) -> int:
    """An upper bound on the GPU layers ``worker`` can hold alone on at most ``gpus`` of its GPUs."""
    blocks = block_capacity(instance, worker, SlotKind.LOCAL, gpus)
    has_gpu = any(instance.classes[c].local_ok for c in instance.workers[worker].classes)
    return min(blocks, instance.n_blocks) + (1 if has_gpu and gpus > 0 else 0)


def multi_worker_candidates(instance: Instance, workers: int, ceiling: int) -> tuple[frozenset[int], frozenset[int]]:
    """Main workers and rpc-server workers that can be part of a layout with ``workers`` workers
    reaching ``ceiling`` GPU layers, by the capacity bound above (the output layer adds one)."""
    n = instance.n_blocks
    local = {
        w: block_capacity(instance, w, SlotKind.LOCAL, instance.local_slots)
        for w, view in enumerate(instance.workers)
        if view.main_ok
    }
    remote = {
        w: block_capacity(instance, w, SlotKind.RPC, instance.rpc_slots)
        for w, view in enumerate(instance.workers)
        if view.rpc_ok
    }
    remote = {w: blocks for w, blocks in remote.items() if blocks > 0}
    ranked = sorted(remote.values(), reverse=True)

    def top(count: int, without: int) -> int:
        """The ``count`` largest RPC capacities, leaving out ``without``'s own once."""
        chosen = ranked[: count + 1]
        if without in remote and remote[without] in chosen:
            chosen.remove(remote[without])
        return sum(chosen[:count])

    best_local = max(local.values(), default=-1)
    mains = frozenset(w for w, blocks in local.items() if min(n, blocks + top(workers - 1, w)) + 1 >= ceiling)
    rpc = frozenset(
        v
        for v, blocks in remote.items()
        if best_local >= 0 and min(n, blocks + best_local + top(workers - 2, v)) + 1 >= ceiling
    )
    return mains, rpc


@cache
def _lightest_runs_of(prefix: tuple[int, ...]) -> tuple[int, ...]:
    """``runs[b-1]``: the least any ``b`` consecutive blocks cost (non-decreasing in ``b``)."""
    n = len(prefix) - 1
    return tuple(min(prefix[i + b] - prefix[i] for i in range(n - b + 1)) for b in range(1, n + 1))


def _lightest_runs(instance: Instance) -> tuple[int, ...]:
    return _lightest_runs_of(instance.costs.block_prefix_down)


def _blocks_within(cumulative: tuple[int, ...], room: int) -> int:
    """The longest run whose least cost (``cumulative``, non-decreasing) fits in ``room``."""
    low, high = 0, len(cumulative)
    while low < high:
        middle = (low + high + 1) // 2
        if cumulative[middle - 1] <= room:
            low = middle
        else:
            high = middle - 1
    return low
