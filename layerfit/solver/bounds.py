"""Cheap, valid bounds that let the search skip models that cannot reach a tier value.

All figures are in the model's own scaled units, so a bound holds for the model exactly (also when
scaling is inexact): a device's block cost in the model is at least the rounded-down prefix-sum
difference, and its fixed cost at least the smallest device-kind cost of its role.
"""

from __future__ import annotations

from itertools import accumulate, pairwise

from layerfit.domain.profile import DeviceRole
from layerfit.solver.instance import Instance


def layer_ceiling(instance: Instance) -> int:
    """The most GPU layers any layout can have under the rules."""
    rules = instance.rules
    ceiling = instance.n_layers if rules.layer_target is None else rules.layer_target
    if rules.tensor_split is not None:
        ceiling = min(ceiling, max(rules.tensor_split.blocks_by_layers, default=0))
    if instance.rpc_slots + instance.local_slots == 0:
        ceiling = 0
    return ceiling


def single_worker_layers(instance: Instance, worker: int, gpus: int) -> int:
    """An upper bound on the GPU layers ``worker`` can hold alone on at most ``gpus`` of its GPUs.

    Each device holds a contiguous run of blocks that costs at least the same number of the smallest
    blocks, on top of its role's smallest fixed cost.
    """
    costs = instance.costs
    local_costs = [cost for kind, cost in costs.device.items() if kind.role is not DeviceRole.RPC]
    overhead = min(local_costs)
    prefix = costs.block_prefix_down
    smallest_first = sorted(b - a for a, b in pairwise(prefix))
    cumulative = list(accumulate(smallest_first))
    capacities = sorted(
        (
            instance.classes[c].capacity
            for c in instance.workers[worker].classes
            if instance.classes[c].local_ok
            for _ in range(instance.classes[c].count)
        ),
        reverse=True,
    )[:gpus]
    blocks = sum(_blocks_within(cumulative, capacity - overhead) for capacity in capacities)
    return min(blocks, instance.n_blocks) + (1 if capacities else 0)


def _blocks_within(cumulative: list[int], room: int) -> int:
    """How many of the smallest blocks fit in ``room``."""
    low, high = 0, len(cumulative)
    while low < high:
        middle = (low + high + 1) // 2
        if cumulative[middle - 1] <= room:
            low = middle
        else:
            high = middle - 1
    return low
