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

Where the instance models time (``Instance.speed``: ``objective: speed``, or a minimum speed), ``D``
must also be at least as fast as ``B`` in that role: each of its GPUs (paired as above, equal
sizes faster first) runs every block, with and without its experts, the output layer and its
fixed cost in no more time than ``B``'s; as main, its CPU is no slower and its links to every
network no worse; as an rpc-server worker, its link from every main network no worse. The
exchange then changes no worker or GPU count and no time upwards, so an optimum of the speed tiers
(and the minimum speed) is kept.
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


def keeping(pruned: Instance, unpruned: Instance, main: str | None, servers: frozenset[str]) -> Instance:
    """``pruned`` with the roles of a known layout's workers given back as ``unpruned`` has them
    (its main worker, its rpc-server workers): a superset of the pruned model, so its optimum still
    holds, and the layout stays a solution (a hint the model can complete)."""
    names = {view.name: w for w, view in enumerate(unpruned.workers)}
    mains = {names[main]} if main in names else set()
    rpc = {names[name] for name in servers if name in names}
    if all(pruned.workers[w].main_ok == unpruned.workers[w].main_ok for w in mains) and all(
        pruned.workers[w].rpc_ok == unpruned.workers[w].rpc_ok for w in rpc
    ):
        return pruned
    workers = tuple(
        replace(
            view,
            main_ok=view.main_ok or (w in mains and unpruned.workers[w].main_ok),
            rpc_ok=view.rpc_ok or (w in rpc and unpruned.workers[w].rpc_ok),
        )
        for w, view in enumerate(pruned.workers)
    )
    classes = tuple(
        replace(
            cls,
            rpc_ok=cls.rpc_ok or (workers[cls.worker].rpc_ok and unpruned.classes[c].rpc_ok),
            local_ok=cls.local_ok or (workers[cls.worker].main_ok and unpruned.classes[c].local_ok),
        )
        for c, cls in enumerate(pruned.classes)
    )
    return replace(pruned, workers=workers, classes=classes)


Profile = tuple[tuple[int, ...], tuple[int | None, ...]]
"""A worker's candidate GPUs for a role: capacities, largest first (equal ones fastest first), and
each one's speed table (``None`` without time, and for the padding)."""


def _profile(instance: Instance, w: int, kind: SlotKind, slots: int) -> Profile | None:
    """The worker's candidate GPUs for a role, largest first, padded to ``slots``."""
    view = instance.workers[w]
    if (kind is SlotKind.RPC and not view.rpc_ok) or (kind is SlotKind.LOCAL and not view.main_ok):
        return None
    speed = instance.speed
    rpc = kind is SlotKind.RPC
    eligible = [c for c in view.classes if (instance.classes[c].rpc_ok if rpc else instance.classes[c].local_ok)]

    def table(c: int) -> int | None:
        if speed is None:
            return None
        return speed.rpc_table[c] if kind is SlotKind.RPC else speed.local_table[c]

    def slowness(t: int | None) -> int:
        return 0 if speed is None or t is None else speed.tables[t].prefix[-1]

    gpus = sorted(
        ((instance.classes[c].capacity, table(c)) for c in eligible for _ in range(instance.classes[c].count)),
        key=lambda gpu: (-gpu[0], slowness(gpu[1])),
    )[:slots]
    padding = slots - len(gpus)
    return (*(g[0] for g in gpus), *([0] * padding)), (*(g[1] for g in gpus), *([None] * padding))


def _dominated(instance: Instance, kind: SlotKind, slots: int, others: int) -> frozenset[int]:
    if slots == 0:
        return frozenset()
    found = {w: p for w in range(len(instance.workers)) if (p := _profile(instance, w, kind, slots)) is not None}
    if len(found) <= others + 1:
        return frozenset()
    profiles = {w: p[0] for w, p in found.items()}
    tables = {w: p[1] for w, p in found.items()}

    def _dominates_here(d: int, b: int) -> bool:
        return _dominates(instance, d, b, profiles) and _faster(instance, kind, d, b, tables)

    order = sorted(profiles, key=lambda w: (sum(profiles[w]), instance.workers[w].ram_capacity), reverse=True)
    pruned: set[int] = set()
    for position, b in enumerate(order):
        dominators = 0
        for d in order[:position]:
            if _dominates_here(d, b):
                dominators += 1
                if dominators > others:
                    pruned.add(b)
                    break
        # later workers in ``order`` have a smaller or equal total, so only equal totals can dominate
        for d in order[position + 1 :]:
            if b in pruned or sum(profiles[d]) < sum(profiles[b]):
                break
            if _dominates_here(d, b):
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


def _faster(instance: Instance, kind: SlotKind, d: int, b: int, tables: dict[int, tuple[int | None, ...]]) -> bool:
    """``d`` is at least as fast as ``b`` in the role (always, without time; see the module)."""
    speed = instance.speed
    if speed is None:
        return True
    for mine, theirs in zip(tables[d], tables[b], strict=True):
        if theirs is not None and (mine is None or not speed.table_order[mine][theirs]):
            return False
    nets = set(speed.net_of)
    if kind is SlotKind.RPC:
        pairs = [((a, speed.net_of[d]), (a, speed.net_of[b])) for a in nets]
    else:
        host_d, host_b = speed.host_of[d], speed.host_of[b]
        if host_d is None or host_b is None or not speed.host_order[host_d][host_b]:
            return False
        pairs = [((speed.net_of[d], a), (speed.net_of[b], a)) for a in nets]
    for mine_pair, their_pair in pairs:
        theirs_link = speed.links.get(their_pair)
        mine_link = speed.links.get(mine_pair)
        if theirs_link is not None and (mine_link is None or not mine_link.at_most(theirs_link)):
            return False
    return True
