"""An upper bound on the GPU layers of any layout, from the bounds the worker-count steps use.

When no worker count reaches the layer ceiling (partial offload), ``search`` asks for the most
layers these bounds allow: one worker on ``k`` of its GPUs (``single_worker_layers`` and the
order search ``single_worker_ordered_layers``), or ``t`` workers on some GPU count
(``multi_worker_candidates`` and ``gpu_count.fewest_gpus``), each a valid bound for a given layer
count. Counts are checked downwards from one bound on every layout (the order search over the
largest rooms of all GPUs); step 1 then runs again at the first count they allow: a layout found
there has the most layers any layout can have.
"""

from __future__ import annotations

from layerfit.solver.model.capacity import (
    most_remote_gpus,
    multi_worker_candidates,
    ordered_layers,
    single_worker_layers,
    single_worker_ordered_layers,
    single_worker_reaches,
)
from layerfit.solver.model.instance import Instance
from layerfit.solver.shortcuts.gpu_count import all_rooms, coarse_rooms, fewest_gpus, most_gpus

SCAN = 8
"""Layer counts ``most_layers`` checks at most (each check runs the bounds of every worker count)."""


def may_reach(instance: Instance, layers: int) -> bool:
    """Whether the capacity bounds allow a layout with ``layers`` GPU layers (with any worker count)."""
    for w, view in enumerate(instance.workers):
        if not view.main_ok:
            continue
        for k in range(1, instance.local_slots + 1):
            if single_worker_reaches(instance, w, k, layers):
                return True
    for workers in range(2, instance.rpc_slots + 2):
        mains, rpc = multi_worker_candidates(instance, workers, layers)
        if not mains or len(rpc) < workers - 1:
            continue
        candidates = instance.restricted(
            rpc_slots=most_remote_gpus(instance, rpc, workers - 1),
            local_slots=instance.local_slots,
            mains=mains,
            rpc_workers=rpc,
        )
        if fewest_gpus(candidates, workers, layers) is not None:
            return True
    return False


def most_layers(instance: Instance, reached: int, ceiling: int) -> int | None:
    """The most GPU layers the bounds allow below ``ceiling`` (which no layout reaches), given that
    a valid layout has ``reached`` (0: none is known); ``None`` when more than ``SCAN`` counts would
    need checking, or none but 0 is left.

    The counts are checked downwards from a bound for every layout at once (``layers_upper_bound``),
    so every larger count is ruled out by its own bound."""
    start = min(ceiling - 1, layers_upper_bound(instance, ceiling - 1))
    for layers in range(start, max(reached, start - SCAN) - 1, -1):
        if layers <= reached or may_reach(instance, layers):
            return max(layers, reached) or None
    return None


def layers_upper_bound(instance: Instance, layers: int) -> int:
    """An upper bound on the GPU layers of every layout with at most ``layers`` of them: the order
    search over each main worker's own GPUs (one of them, or as many as the slots take: more
    devices only help the search) and, with rpc-servers, over the largest rooms of all GPUs."""
    most = 0
    for w, view in enumerate(instance.workers):
        if not view.main_ok:
            continue
        own = sum(instance.classes[c].count for c in view.classes if instance.classes[c].local_ok)
        for k in {1, min(own, instance.local_slots)} - {0}:
            most = max(
                most, min(single_worker_layers(instance, w, k), single_worker_ordered_layers(instance, w, k, layers))
            )
    if instance.rpc_slots:
        several = all_rooms(instance, layers)[: most_gpus(instance, 2)]
        one = all_rooms(instance, layers, devices=1)[:1]
        most = max(most, ordered_layers(instance, coarse_rooms(several)), ordered_layers(instance, tuple(one)))
    return most
