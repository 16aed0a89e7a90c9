"""Dominance pruning for the strict tiers (layers, workers, GPUs) on large clusters.

Worker ``D`` dominates worker ``B`` for a role when both have the same memory type, ``D`` has at
least ``B``'s allocatable RAM, and ``D``'s candidate GPUs for that role, largest first, are each at
least as large as ``B``'s (missing GPUs count as zero); identical workers are ordered by position.
This order is strict and transitive.

A layout involves at most ``1 + rpc_slots`` workers (fewer when the worker count is fixed). If
``B`` has more dominators than the other workers a layout can involve, some dominator ``D`` is
unused in any layout using ``B``; moving ``B``'s role to ``D`` (its i-th largest GPU to ``D``'s
i-th largest) keeps every device and pool within capacity and changes neither the layers, nor the
worker count, nor the GPU count. Repeating
the exchange ends at an unpruned worker. So removing ``B`` from that role keeps an optimum of the
strict tiers. It may lose the tie-break optimum (binpack prefers smaller GPUs), so the tie-break
stage runs on the unpruned candidates.
"""

from __future__ import annotations

from dataclasses import replace

from layerfit.solver.model.instance import Instance, SlotKind


def prune_dominated(instance: Instance, others: int | None = None) -> Instance:
    """The instance without workers' roles that more dominators than a layout's other workers cover.

    ``others``: how many other workers a layout can involve besides any given one (default: one per
    RPC slot).
    """
    others = instance.rpc_slots if others is None else others
    rpc_pruned = _dominated(instance, SlotKind.RPC, instance.rpc_slots, others)
    main_pruned = _dominated(instance, SlotKind.LOCAL, instance.local_slots, others)
    if not rpc_pruned and not main_pruned:
        return instance
    workers = tuple(
        replace(view, main_ok=view.main_ok and w not in main_pruned, rpc_ok=view.rpc_ok and w not in rpc_pruned)
        for w, view in enumerate(instance.workers)
    )
    classes = tuple(
        replace(
            cls,
            rpc_ok=cls.rpc_ok and workers[cls.worker].rpc_ok,
            local_ok=cls.local_ok and workers[cls.worker].main_ok,
        )
        for cls in instance.classes
    )
    return replace(instance, workers=workers, classes=classes)


def _profile(instance: Instance, w: int, kind: SlotKind, slots: int) -> tuple[int, ...] | None:
    """The worker's candidate GPU capacities for a role, largest first, padded to ``slots``."""
    view = instance.workers[w]
    if (kind is SlotKind.RPC and not view.rpc_ok) or (kind is SlotKind.LOCAL and not view.main_ok):
        return None
    eligible = [
        instance.classes[c]
        for c in view.classes
        if (instance.classes[c].rpc_ok if kind is SlotKind.RPC else instance.classes[c].local_ok)
    ]
    capacities = sorted((cls.capacity for cls in eligible for _ in range(cls.count)), reverse=True)[:slots]
    return (*capacities, *([0] * (slots - len(capacities))))


def _dominated(instance: Instance, kind: SlotKind, slots: int, others: int) -> frozenset[int]:
    if slots == 0:
        return frozenset()
    profiles = {w: p for w in range(len(instance.workers)) if (p := _profile(instance, w, kind, slots)) is not None}
    if len(profiles) <= others + 1:
        return frozenset()
    order = sorted(profiles, key=lambda w: (sum(profiles[w]), instance.workers[w].ram_capacity), reverse=True)
    pruned: set[int] = set()
    for position, b in enumerate(order):
        dominators = 0
        for d in order[:position]:
            if _dominates(instance, d, b, profiles):
                dominators += 1
                if dominators > others:
                    pruned.add(b)
                    break
        # later workers in ``order`` have a smaller or equal total, so only equal totals can dominate
        for d in order[position + 1 :]:
            if b in pruned or sum(profiles[d]) < sum(profiles[b]):
                break
            if _dominates(instance, d, b, profiles):
                dominators += 1
                if dominators > others:
                    pruned.add(b)
    return frozenset(pruned)


def _dominates(instance: Instance, d: int, b: int, profiles: dict[int, tuple[int, ...]]) -> bool:
    vd, vb = instance.workers[d], instance.workers[b]
    if vd.unified != vb.unified or vd.ram_capacity < vb.ram_capacity:
        return False
    pd, pb = profiles[d], profiles[b]
    if any(x < y for x, y in zip(pd, pb, strict=True)):
        return False
    return pd != pb or vd.ram_capacity != vb.ram_capacity or d < b
