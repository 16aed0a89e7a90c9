"""The tie-break decided without a search, where a bound meets a layout (shortcut ``tie-break-bound-met``).

With the strict tiers fixed (every layer on ``g`` GPUs), the tie-break's optimum is bounded by a
relaxation that forgets the order of the devices and, first, which worker each GPU belongs to:

* **spread** (the most headroom on the tightest GPU): for each split into ``r`` rpc-server devices
  and ``k`` local ones, the ``r`` (``k``) largest GPUs that may fill such a slot, each charged the
  fixed cost of its role (on the memory type of the workers they may come from), the output
  layer on the main GPU (the last rpc device when ``k = 0``) and the first device's input copies,
  each on whichever device of its group holds the most blocks with it (every choice is tried:
  ``most_charged``). The largest reserve ``H`` such that these devices, each keeping ``H`` free,
  still hold every block, each the lightest run of its length, and together room for what every
  block costs, bounds the headroom of every layout of ``g`` GPUs from above. It is refined per main
  worker and, with one rpc-server worker, per (main, server) pair, exactly over the device orders
  where the relaxation is not enough (``ordered_reserve.pair_bound``; see ``spread_bound``).
* **binpack** (the least allocatable VRAM over the GPUs used, in the tie-break's unit): the ``g``
  smallest GPUs that may fill a slot bound it from below.

A layout meets the bound when its value in the model (read from the model's own solution of it)
equals it: the tie-break is then proven optimal. For spread the layout is the step's own GPUs with
their blocks rebalanced to keep the largest reserve (``ordered_reserve.rebalanced``), or the best
order of the pair that gives the bound, each a solution of the model. Not with experts placed
apart or a rule fixing the layout's shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layerfit.domain.config import Policy
from layerfit.domain.layout import Layout
from layerfit.domain.profile import DeviceRole
from layerfit.solver.model.build import BuiltModel
from layerfit.solver.model.capacity import blocks_total, blocks_within, class_blocks, gpu_room, lightest_runs
from layerfit.solver.model.costs import device_fixed
from layerfit.solver.model.instance import Instance, SlotKind
from layerfit.solver.model.runner import Run
from layerfit.solver.shortcuts.ordered_reserve import ORDER_LIMIT, DeviceRoom, PairBound, pair_bound, pair_orders

TIE_BREAK_BOUND_MET = "tie-break-bound-met"
"""Shortcut name: a layout's tie-break equals the relaxation's bound, so no search is needed."""


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


def _largest(instance: Instance, kind: SlotKind, count: int, workers: frozenset[int] | None) -> list[tuple[int, int]]:
    """The ``count`` largest (capacity, room) pairs of GPUs that may fill a ``kind`` slot (of
    ``workers`` only, unless ``None``), each list sorted on its own (so the i-th pair dominates the
    i-th GPU of any choice); short: fewer."""
    gpus = [
        (instance.classes[c].capacity, gpu_room(instance, instance.classes[c], kind))
        for c in instance.classes_for(kind)
        if workers is None or instance.classes[c].worker in workers
        for _ in range(instance.classes[c].count)
    ]
    capacities = sorted((capacity for capacity, _ in gpus), reverse=True)[:count]
    rooms = sorted((room for _, room in gpus), reverse=True)[:count]
    return list(zip(capacities, rooms, strict=True))


PER_WORKER_LIMIT = 48
"""Up to this many candidate workers, the spread bound also takes the local GPUs from one main
worker at a time and, with one rpc-server worker, the remote GPUs from one worker at a time."""

_Choice = tuple[frozenset[int] | None, frozenset[int] | None]
"""Where the local and where the remote GPUs of a relaxation come from (``None``: any worker)."""


@dataclass(frozen=True)
class SpreadBound:
    """``spread_bound``'s answer: the bound (``None``: the relaxation holds no layout) and, when an
    exact pair bound (``ordered_reserve.pair_bound``) above the known headroom gives the bound, a
    layout of that pair's best order, blocks unset (``ordered_reserve.rebalanced`` places them)."""

    headroom: int | None
    witness: Layout | None = None


def spread_bound(instance: Instance, gpus: int, workers: int, known: int | None = None) -> SpreadBound:
    """An upper bound on the headroom of the tightest GPU over layouts with every layer on ``gpus``
    GPUs of ``workers`` workers.

    The pooled relaxation takes the GPUs from any worker. On clusters of at most
    ``PER_WORKER_LIMIT`` candidate workers it is refined: every layout has one main worker, whose
    GPUs are the local ones, and its remote GPUs on other workers (an rpc-server never runs on the
    main worker), so the largest bound over the main workers, each with the remote GPUs of the
    others, bounds them all. With one rpc-server worker, likewise over each (main, server) pair: the
    pair's relaxation where it is at or below ``known`` (a headroom already reached), else the pair's
    exact bound over device orders (``pair_bound``). Refining stops where it cannot reach ``known``
    (the bound returned is valid either way)."""
    pooled = _bound_over(instance, gpus, workers, [(None, None)])
    if pooled is None or (known is not None and pooled <= known):
        return SpreadBound(pooled)
    mains = [w for w, view in enumerate(instance.workers) if view.main_ok]
    servers = [w for w, view in enumerate(instance.workers) if view.rpc_ok]
    if len(mains) + len(servers) > PER_WORKER_LIMIT:
        return SpreadBound(pooled)
    per_main = {m: _bound_over(instance, gpus, workers, [(frozenset({m}), frozenset(servers) - {m})]) for m in mains}
    reached = [bound for bound in per_main.values() if bound is not None]
    if not reached:
        return SpreadBound(pooled)  # no layout at all: left to the search
    refined = min(pooled, max(reached))
    if workers != 2 or known is None or refined <= known:
        return SpreadBound(refined)
    pairs: list[int] = []
    best: PairBound | None = None
    for m, bound in per_main.items():
        if bound is None:
            continue
        if bound <= known:
            pairs.append(bound)
            continue
        for server in servers:
            relaxed = (
                None if server == m else _bound_over(instance, gpus, workers, [(frozenset({m}), frozenset({server}))])
            )
            if relaxed is None or relaxed <= known:
                pairs.extend([] if relaxed is None else [relaxed])
                continue
            if pair_orders(instance, gpus, m, server) > ORDER_LIMIT:
                return SpreadBound(refined)  # this pair may beat ``known``: not bounded exactly
            exact = pair_bound(instance, gpus, m, server)
            if exact is not None:
                pairs.append(min(relaxed, exact.reserve))
                if best is None or exact.reserve > best.reserve:
                    best = exact
    bound = min(refined, max(pairs, default=refined))
    witness = best.order if best is not None and best.reserve == bound else None
    return SpreadBound(bound, witness)


def _bound_over(instance: Instance, gpus: int, workers: int, choices: list[_Choice]) -> int | None:
    """The largest reserve over the splits into rpc and local devices and the given choices of
    where the local and the remote GPUs come from. A device's fixed cost is its role's on the
    memory type of the workers its GPUs may come from (the least of both types when they differ)."""
    runs = lightest_runs(instance)
    multi = gpus > 1
    best: int | None = None
    for local in range(min(gpus, instance.local_slots) + 1):
        remote = gpus - local
        if remote > instance.rpc_slots or (workers > 1) != (remote > 0) or remote < workers - 1:
            continue
        for own_from, remote_from in choices:
            rpc_fixed = device_fixed(instance.costs, DeviceRole.RPC, _memory_type(instance, remote_from), multi=multi)
            rpc = [DeviceRoom(c, r, rpc_fixed) for c, r in _largest(instance, SlotKind.RPC, remote, remote_from)]
            own = _largest(instance, SlotKind.LOCAL, local, own_from)
            if len(rpc) < remote or len(own) < local:
                continue
            found = _group_bound(instance, rpc, own, _memory_type(instance, own_from), multi, runs)
            if found is not None and (best is None or found > best):
                best = found
    return best


def _memory_type(instance: Instance, workers: frozenset[int] | None) -> bool | None:
    """Whether the given workers (``None``: all) have unified memory, ``None`` when they differ."""
    types = {view.unified for w, view in enumerate(instance.workers) if workers is None or w in workers}
    return types.pop() if len(types) == 1 else None


def _group_bound(
    instance: Instance,
    rpc: list[DeviceRoom],
    own: list[tuple[int, int]],
    unified: bool | None,
    multi: bool,
    runs: tuple[int, ...],
) -> int | None:
    """The largest reserve for one split: the main GPU (the output layer, and the main role's fixed
    cost for the local one's) is whichever local GPU (rpc GPU without local ones) holds the most
    blocks with it, the first device's copies whichever other GPU of the first group. The local
    GPUs' fixed costs are those of memory type ``unified`` (``None``: the least of both)."""
    costs = instance.costs
    local_fixed = device_fixed(instance.costs, DeviceRole.LOCAL, unified, multi=multi) if own else 0
    main_fixed = device_fixed(instance.costs, DeviceRole.MAIN, unified, multi=multi) if own else 0
    devices = [*rpc, *(DeviceRoom(c, r, local_fixed) for c, r in own)]
    local = range(len(rpc), len(devices))
    charges = (
        (main_fixed - local_fixed + costs.output if own else costs.output, local if own else range(len(rpc))),
        (costs.first_device if multi else 0, range(len(rpc)) if rpc else local),
    )
    total = blocks_total(instance)

    def holds(reserve: int) -> bool:
        frees = [min(device.room, device.capacity - reserve) - device.fixed for device in devices]
        if sum(frees) - sum(extra for extra, _ in charges) < total:
            return False  # the blocks' costs add up to at least ``total``, whatever the split
        return most_charged(frees, charges, runs) >= instance.n_blocks

    if not devices or not holds(0):
        return None
    low, high = 0, max(device.capacity for device in devices)
    while low < high:
        middle = (low + high + 1) // 2
        if holds(middle):
            low = middle
        else:
            high = middle - 1
    return low


_UNHELD = -(1 << 40)
"""Blocks a device with negative room "holds": any total with it is below every block count."""


def most_charged(frees: Sequence[int], charges: tuple[tuple[int, range], ...], runs: tuple[int, ...]) -> int:
    """The most blocks devices with these rooms (``frees``, each less its fixed cost) hold, each the
    lightest run of its length, when each of the two charges (``(extra, devices that may take
    it)``, a charge of 0 taking none) goes to a different device of its range: every choice is
    tried. Below 0 when some device's room stays negative."""

    def held(free: int) -> int:
        return blocks_within(runs, free) if free >= 0 else _UNHELD

    base = [held(free) for free in frees]
    total = sum(base)
    (main_extra, mains), (first_extra, firsts) = charges
    best = _UNHELD * (len(frees) + 2)
    for i in mains if main_extra else (None,):
        for j in firsts if first_extra else (None,):
            if i is not None and i == j:
                continue
            found = total
            if i is not None:
                found += held(frees[i] - main_extra) - base[i]
            if j is not None:
                found += held(frees[j] - first_extra) - base[j]
            best = max(best, found)
    return best


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
