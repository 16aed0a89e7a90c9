"""A bound on the decode time by main worker and number of rpc-servers, from the GPUs' room and speed.

Every block sits somewhere: on the main worker's CPU or on one device. For a main worker ``m`` and
``r`` rpc-servers, the blocks' time is at least the cheapest fractional fill: blocks weighed by
``w[b]`` (their time on the fastest table), each place taking ``alpha`` microseconds a unit of
weight (its table's least ratio to ``w``, so ``alpha * w[b]`` never exceeds block ``b``'s time
there), and each device holding at most the heaviest contiguous run of ``class_blocks`` blocks.
Which ``r`` servers and which of ``m``'s GPUs is left open: at each speed the room counted is that
of the ``r`` (and ``local_slots``) roomiest GPUs at least that fast, more than any one choice has,
so the fill costs no more than any layout's. The CPU takes the rest at its own ratio. Added: the
main worker's fixed cost, the output layer at its cheapest place and ``r`` of the cheapest round
trip from ``m``'s network; every other figure the model adds is at least 0.

So a layout of ``m`` and ``r`` servers takes at least ``bound(m, r)`` in the model (whole
microseconds, rounded down, less one for the floating-point sums): the several-workers step of the
speed search keeps only the pairs whose bound is within the time to beat, and the GPU classes a
layout within it can use (``narrow``).
Only where blocks keep their experts (experts that may leave a block change its time and room).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate, pairwise

from layerfit.solver.model.capacity import class_blocks
from layerfit.solver.model.instance import Instance, SlotKind
from layerfit.solver.model.speed_costs import SpeedCosts

SERVER_BOUND = "server-count-bound"
"""Shortcut name: main workers and server counts whose fill bound exceeds the time to beat left out."""


def _steps(prefix: Sequence[int]) -> list[int]:
    return [b - a for a, b in pairwise(prefix)]


def _alpha(steps: Sequence[int], weight: Sequence[int]) -> float:
    """The largest ratio with ``alpha * weight[b] <= steps[b]`` for every block."""
    ratios = [s / w for s, w in zip(steps, weight, strict=True) if w > 0]
    return max(0.0, min(ratios, default=0.0))


def _heaviest_runs(weight: Sequence[int]) -> list[float]:
    """``runs[c]``: the most weight of ``c`` or fewer contiguous blocks."""
    n = len(weight)
    prefix = list(accumulate(weight, initial=0))
    runs = [0.0] * (n + 1)
    for length in range(1, n + 1):
        runs[length] = max(runs[length - 1], max(prefix[i + length] - prefix[i] for i in range(n - length + 1)))
    return runs


def _tops(rooms: Sequence[tuple[float, float]], levels: Sequence[float], most: int) -> list[list[float]]:
    """Per level, the room of the ``0 .. most`` roomiest GPUs at least that fast (``rooms``:
    ``(alpha, room)`` per GPU)."""
    tops = []
    for level in levels:
        chosen = sorted((room for alpha, room in rooms if alpha <= level), reverse=True)[:most]
        tops.append(list(accumulate(chosen, initial=0.0)))
    return tops


@dataclass(frozen=True)
class ServerBound:
    """``bounds(m)[r]`` for every main worker ``m`` and server count ``r`` (see the module)."""

    instance: Instance
    costs: SpeedCosts
    total: float
    """The weight of every block."""
    lightest: float
    """The least weight of a block."""
    runs: tuple[float, ...]
    alphas: tuple[float, ...]
    """Per table: its ratio to the weights."""
    host_alphas: tuple[float, ...]
    """Per host: its ratio to the weights."""
    levels: tuple[float, ...]
    """Every table's ratio, in order."""
    local_rooms: tuple[float, ...]
    """Per GPU class: the most weight one of its GPUs holds as a local device (0: no local role)."""
    server_tops: tuple[tuple[float, ...], ...]
    """Per level, the room of the ``r`` roomiest rpc-servers at least that fast, ``r`` = 0 .. rpc slots."""
    output: int

    def _local_tops(self, worker: int) -> list[float]:
        """Per level, the room of the ``local_slots`` roomiest GPUs of ``worker`` at least that fast."""
        instance, costs = self.instance, self.costs
        rooms = []
        for c in instance.workers[worker].classes:
            cls, t = instance.classes[c], costs.local_table[c]
            if cls.local_ok and t is not None:
                rooms += [(self.alphas[t], self.local_rooms[c])] * min(cls.count, instance.local_slots)
        return [top[-1] for top in _tops(rooms, self.levels, instance.local_slots)]

    def bounds(self, worker: int) -> tuple[tuple[int, float], ...]:
        """Per server count ``r`` = 0 .. rpc slots, a lower bound on every layout with ``worker``
        as main and ``r`` rpc-servers, in the model's microseconds, and the fill's price (the ratio
        at which it completes); empty: ``worker`` cannot be main."""
        costs = self.costs
        h = costs.host_of[worker]
        if h is None or not self.instance.workers[worker].main_ok:
            return ()
        host_alpha, local, hop = self.host_alphas[h], self._local_tops(worker), self.hop(worker)
        found = []
        for r in range(self.instance.rpc_slots + 1):
            cost = placed = 0.0
            price = host_alpha
            for i, alpha in enumerate(self.levels):
                if alpha >= host_alpha:
                    break
                tops = self.server_tops[i]
                reach = min(self.total, local[i] + tops[min(r, len(tops) - 1)])
                if reach > placed:
                    cost, placed = cost + (reach - placed) * alpha, reach
                if placed >= self.total:
                    price = alpha
                    break
            fill = cost + (self.total - placed) * host_alpha
            value = costs.hosts[h].fixed + self.output + fill + r * hop
            found.append((max(0, math.floor(value) - 1), price))
        return tuple(found)

    def hop(self, worker: int) -> int:
        """The cheapest round trip of an rpc-server to ``worker`` as main."""
        net = self.costs.net_of[worker]
        return min((link.hop for (a, _), link in self.costs.links.items() if a == net), default=0)

    def forced(self, worker: int, table: int, bounds: tuple[tuple[int, float], ...], servers: int, *, rpc: bool) -> int:
        """A lower bound on the layouts of main ``worker`` (``bounds``: its ``bounds``) and
        ``servers`` rpc-servers that use a GPU of ``table``: it holds a block, the lightest weight
        moved at least from the fill's price to its ratio (the fill's dual); or, as the last
        device, the output layer alone (an rpc-server so placed leaves the blocks to the other
        ``servers - 1``)."""
        bound, price = bounds[servers]
        moved = bound + self.lightest * max(0.0, self.alphas[table] - price)
        extra = self.costs.tables[table].output - self.output
        alone = bound + extra
        if rpc:
            alone = max(alone, bounds[servers - 1][0] + self.hop(worker) + extra)
        return max(0, math.floor(min(moved, float(alone))) - 1)


def _reference_weights(costs: SpeedCosts) -> list[int]:
    """The blocks' weights: their time on the table of the least total (any table would do)."""
    fastest = min(costs.tables, key=lambda table: table.prefix[-1])
    return _steps(fastest.prefix)


def server_bound(instance: Instance) -> ServerBound | None:
    """The bound of the instance, or ``None`` where it does not apply (see the module)."""
    costs = instance.speed
    if costs is None or instance.experts is not None or costs.fixed_host_experts or not costs.tables:
        return None
    if any(any(table.saving) for table in costs.tables):
        return None
    weight = _reference_weights(costs)
    runs = _heaviest_runs(weight)
    alphas = tuple(_alpha(_steps(table.prefix), weight) for table in costs.tables)
    levels = tuple(sorted(set(alphas)))
    rooms = []
    for c, cls in enumerate(instance.classes):
        t = costs.rpc_table[c]
        if cls.rpc_ok and instance.workers[cls.worker].rpc_ok and t is not None:
            room = runs[min(instance.n_blocks, class_blocks(instance, cls, SlotKind.RPC))]
            rooms += [(alphas[t], room)] * min(cls.count, instance.rpc_slots)
    local_rooms = tuple(
        runs[min(instance.n_blocks, class_blocks(instance, cls, SlotKind.LOCAL))] if cls.local_ok else 0.0
        for cls in instance.classes
    )
    outputs = [host.output for host in costs.hosts] + [table.output for table in costs.tables]
    return ServerBound(
        instance=instance,
        costs=costs,
        total=float(sum(weight)),
        lightest=float(min(weight, default=0)),
        runs=tuple(runs),
        alphas=alphas,
        host_alphas=tuple(_alpha(_steps(host.prefix), weight) for host in costs.hosts),
        levels=levels,
        local_rooms=local_rooms,
        server_tops=tuple(tuple(top) for top in _tops(rooms, levels, instance.rpc_slots)),
        output=min(outputs),
    )


@dataclass(frozen=True)
class Narrowed:
    """What a layout within a time to beat may use (``narrow``)."""

    instance: Instance
    """Without the main workers, rpc slots and GPU classes (in a role) no such layout uses."""
    counts: dict[int, tuple[int, ...]]
    """Per main worker left, its server counts."""
    dropped: int
    """Main workers, server counts and GPU classes in a role left out."""
    bound: ServerBound
    """The bound it used (valid for the narrowed instance too: it has less room)."""


def narrow(instance: Instance, cap_us: int, bound: ServerBound | None = None) -> Narrowed | None:
    """The instance for layouts of at most ``cap_us`` with ``1 .. rpc_slots`` servers; ``None``
    where the bound does not apply. ``bound``: one of an instance this one narrows (its figures
    are the same, its room no less), not computed again."""
    found = bound if bound is not None else server_bound(instance)
    if found is None:
        return None
    costs = found.costs
    counts: dict[int, tuple[int, ...]] = {}
    kept_local: set[int] = set()
    kept_tables: set[int] = set()
    rpc_tables = {t for t in costs.rpc_table if t is not None}
    dropped = 0
    for w, view in enumerate(instance.workers):
        if not view.main_ok:
            continue
        bounds = found.bounds(w)
        within = [r for r in range(1, len(bounds)) if bounds[r][0] <= cap_us]
        dropped += instance.rpc_slots - len(within)
        if not within:
            continue
        counts[w] = tuple(within)
        for c in view.classes:
            t = costs.local_table[c]
            if t is not None and any(found.forced(w, t, bounds, r, rpc=False) <= cap_us for r in within):
                kept_local.add(c)
        for t in rpc_tables - kept_tables:
            if any(found.forced(w, t, bounds, r, rpc=True) <= cap_us for r in within):
                kept_tables.add(t)
    classes = []
    for c, cls in enumerate(instance.classes):
        rpc_ok = cls.rpc_ok and costs.rpc_table[c] in kept_tables
        local_ok = cls.local_ok and c in kept_local
        dropped += (cls.rpc_ok and not rpc_ok) + (cls.local_ok and not local_ok)
        classes.append(replace(cls, rpc_ok=rpc_ok, local_ok=local_ok))
    top = max((max(allowed) for allowed in counts.values()), default=0)
    kept = replace(instance, classes=tuple(classes))
    narrowed = kept.restricted(rpc_slots=top, local_slots=instance.local_slots, mains=frozenset(counts))
    return Narrowed(narrowed, counts, dropped, found)
