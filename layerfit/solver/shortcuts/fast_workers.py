"""The workers a fast layout of several workers most likely uses, for a first, small search.

On a large cluster the several-workers model of ``objective: speed`` is large, and its search may
spend its budget before it finds a layout that beats the one-worker optimum. A small model over the
workers with the fastest room (``fast_workers``) finds one quickly; its layout is a valid solution
of the full model, given to it as a hint. Nothing is proven from the small model: it only seeds.

A worker's pace is the least time its GPUs take for the whole model's blocks (its fastest table's
blocks, in the model's microseconds); its room, the VRAM of its GPUs that may serve (in the model's
units). Workers are taken fastest first (the roomier first among equals) until their room holds
every block (``capacity.blocks_total``) ``ROOM_FACTOR`` times over and at least ``MIN_WORKERS`` are
in, at most half of ``MAX_WORKERS``; then those with the largest GPUs (a layout has few devices,
so a large model needs large ones), up to ``MAX_WORKERS`` in all.
"""

from __future__ import annotations

from layerfit.solver.model.capacity import blocks_total
from layerfit.solver.model.instance import Instance

ROOM_FACTOR = 3
MIN_WORKERS = 4
MAX_WORKERS = 24


def _pace(instance: Instance, worker: int) -> int | None:
    """The least time the worker's GPUs take for every block (``None``: no GPU with a table)."""
    costs = instance.speed
    assert costs is not None
    times = [
        costs.tables[t].prefix[-1]
        for c in instance.workers[worker].classes
        for t in (costs.local_table[c], costs.rpc_table[c])
        if t is not None and (instance.classes[c].local_ok or instance.classes[c].rpc_ok)
    ]
    return min(times, default=None)


def fast_workers(instance: Instance, keep: frozenset[int] = frozenset()) -> frozenset[int] | None:
    """The workers of the first, small search (see the module), with ``keep``; ``None`` when they
    would be (nearly) all the workers anyway, or time is not modelled."""
    if instance.speed is None:
        return None
    paced = []
    for w, view in enumerate(instance.workers):
        if not (view.main_ok or view.rpc_ok):
            continue
        pace = _pace(instance, w)
        usable = [cls for c in view.classes if (cls := instance.classes[c]).rpc_ok or cls.local_ok]
        if pace is not None and usable:
            room = sum(cls.capacity * cls.count for cls in usable)
            paced.append((pace, -room, w, room, max(cls.capacity for cls in usable)))
    if len(paced) <= MAX_WORKERS:
        return None
    chosen: set[int] = set(keep)
    held, need = 0, blocks_total(instance)
    for _pace_us, _, w, room, _largest in sorted(paced):
        if len(chosen) >= MAX_WORKERS // 2 or (held >= ROOM_FACTOR * need and len(chosen) >= MIN_WORKERS):
            break
        chosen.add(w)
        held += room
    # a layout has few devices: a large model needs the largest GPUs, however fast
    for *_, w, _room, _largest in sorted(paced, key=lambda row: (-row[4], row[0])):
        if len(chosen) >= MAX_WORKERS:
            break
        chosen.add(w)
    return frozenset(chosen)
