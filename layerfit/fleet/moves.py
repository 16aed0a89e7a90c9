"""Replica numbers for the chosen layouts, and the order of stops and starts that gets there."""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from typing import Literal

from layerfit.domain.cluster import Cluster
from layerfit.domain.deployment import Deployment
from layerfit.domain.fleet import Move, ReplicaChange
from layerfit.domain.layout import Claims, Layout
from layerfit.errors import SolverError

Key = tuple[str, int]
"""(deployment, replica)."""


def gpu_names(cluster: Cluster, layout: Layout) -> tuple[str, ...]:
    """``worker:type:index`` of every GPU the layout uses."""
    return tuple(cluster.gpu_id(d.worker, d.gpu_index) for d in layout.devices)


def assign_replicas(
    deployment: Deployment, chosen: list[Layout], now: dict[int, Layout]
) -> tuple[list[tuple[int, Layout, ReplicaChange]], list[int]]:
    """Give chosen layouts replica numbers: kept replicas keep theirs; returns (placed, unplaced).

    A replica with a current placement that gets another layout is moved; one without is started.
    """
    pool = Counter(chosen)
    placed: list[tuple[int, Layout, ReplicaChange]] = []
    free_ids = []
    for replica in range(deployment.replicas):
        layout = now.get(replica)
        if layout is not None and pool[layout] > 0:
            pool[layout] -= 1
            placed.append((replica, layout, ReplicaChange.KEPT))
        else:
            free_ids.append(replica)
    rest = list(pool.elements())
    for replica, layout in zip(free_ids, rest, strict=False):
        placed.append((replica, layout, ReplicaChange.MOVED if replica in now else ReplicaChange.STARTED))
    unplaced = free_ids[len(rest) :]
    return sorted(placed, key=lambda item: item[0]), unplaced


Resource = tuple[str, int] | str
"""A GPU (worker, index), or a worker's RAM (or unified pool)."""


class _Usage:
    """Bytes taken per GPU and per worker's RAM (or pool) by the running replicas, and those
    over capacity: ``capacity_reasons`` over every running replica, kept up to date per change."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.used: Counter[Resource] = Counter()
        self.over: set[Resource] = set()
        self._capacity: dict[Resource, int] = {}

    def capacity(self, key: Resource) -> int:
        if key not in self._capacity:
            if isinstance(key, tuple):
                self._capacity[key] = self.cluster.worker(key[0]).gpu(key[1]).allocatable_vram_bytes
            else:
                self._capacity[key] = self.cluster.worker(key).allocatable_ram_bytes
        return self._capacity[key]

    def takes(self, claims: Claims) -> Counter[Resource]:
        taken: Counter[Resource] = Counter()
        for device in claims.devices:
            taken[(device.worker, device.gpu_index)] += device.total_bytes
        unified = self.cluster.unified_names
        for claim in claims.workers:
            taken[claim.worker] += claim.pool_bytes if claim.worker in unified else claim.ram_bytes
        return taken

    def change(self, claims: Claims, sign: int) -> None:
        for key, n_bytes in self.takes(claims).items():
            self.used[key] += sign * n_bytes
            if self.used[key] > self.capacity(key):
                self.over.add(key)
            else:
                self.over.discard(key)

    def fits(self, claims: Claims) -> bool:
        """Nothing overflows with ``claims`` added."""
        return not self.over and all(
            self.used[key] + n_bytes <= self.capacity(key) for key, n_bytes in self.takes(claims).items()
        )


class _Transition:
    """The running replicas while moves are recorded, and the moves so far.

    Starts are tried in order; one that does not fit waits (``blocked``, under the resources it
    needs) until a stop frees one of them, so that each step looks at few starts, not all of them
    (8,192 replicas made that minutes)."""

    def __init__(
        self,
        cluster: Cluster,
        current: Sequence[tuple[str, int, Layout, Claims]],
        target: Sequence[tuple[str, int, Layout, Claims]],
        placed_before: Collection[Key],
    ) -> None:
        self.cluster = cluster
        self.running = {(d, r): claims for d, r, _, claims in current}
        self.usage = _Usage(cluster)
        for claims in self.running.values():
            self.usage.change(claims, 1)
        self.placed_before = {*placed_before, *self.running}
        self.layout_of = {(d, r): layout for d, r, layout, _ in current}
        self.wanted = {(d, r): (layout, claims) for d, r, layout, claims in target}
        self.stops = dict.fromkeys(key for key in self.running if self._changes(key))
        starts = [key for key in self.wanted if key not in self.running or self._changes(key)]
        self.starts = dict.fromkeys(starts)
        self.order = starts
        self.ready = list(range(len(starts)))
        """Positions of the starts not known to be blocked (a heap)."""
        self.blocked: dict[Resource | None, list[int]] = defaultdict(list)
        """Starts that did not fit, under each resource they need (``None``: something else overflowed)."""
        self.restarts = [i for i, key in enumerate(starts) if key in self.stops]
        """Positions of the starts that also stop a running replica (a heap)."""
        self.moves: list[Move] = []
        self.stopped_first: set[Key] = set()

    def _changes(self, key: Key) -> bool:
        return key not in self.wanted or self.wanted[key][0] != self.layout_of.get(key)

    def next_ready(self) -> Key | None:
        """The first start, in order, that fits next to what runs now."""
        while self.ready:
            position = heapq.heappop(self.ready)
            key = self.order[position]
            if key not in self.starts:
                continue
            claims = self.wanted[key][1]
            if self.usage.fits(claims):
                return key
            for resource in [*self.usage.takes(claims), *([None] if self.usage.over else [])]:
                self.blocked[resource].append(position)
        return None

    def _release(self, claims: Claims) -> None:
        """Starts blocked on what ``claims`` took (or on an overflow now gone) may fit again."""
        freed = [*self.usage.takes(claims), *([None] if not self.usage.over else [])]
        for resource in freed:
            for position in self.blocked.pop(resource, []):
                heapq.heappush(self.ready, position)

    def record(self, action: Literal["stop", "start"], key: Key, layout: Layout, downtime: bool = False) -> None:
        if action == "stop":
            change = ReplicaChange.MOVED if key in self.wanted else ReplicaChange.STOPPED
        else:
            change = ReplicaChange.MOVED if key in self.placed_before else ReplicaChange.STARTED
        self.moves.append(
            Move(
                step=len(self.moves),
                action=action,
                deployment=key[0],
                replica=key[1],
                worker=layout.main_worker,
                gpus=gpu_names(self.cluster, layout),
                change=change,
                downtime=downtime,
            )
        )

    def stop(self, key: Key) -> None:
        self.record("stop", key, self.layout_of[key])
        claims = self.running.pop(key)
        self.usage.change(claims, -1)
        del self.stops[key]
        self._release(claims)

    def start(self, key: Key) -> None:
        layout, claims = self.wanted[key]
        self.record("start", key, layout, downtime=key in self.stopped_first)
        del self.starts[key]
        old = self.running.get(key) if key in self.stops else None
        self.usage.change(claims, 1)
        if old is not None:  # started next to its old placement: now stop that one
            self.stop(key)
        self.running[key] = claims

    def _restarts(self, position: int) -> bool:
        key = self.order[position]
        return key in self.starts and key in self.stops

    def make_room(self) -> None:
        """Stop a replica that must go anyway: one that also restarts, else any."""
        while self.restarts and not self._restarts(self.restarts[0]):
            heapq.heappop(self.restarts)
        blocker = self.order[self.restarts[0]] if self.restarts else next(iter(self.stops), None)
        if blocker is None:
            raise SolverError("moves cannot be ordered: the target placement does not fit")
        self.stop(blocker)
        self.stopped_first.add(blocker)


def order_moves(
    cluster: Cluster,
    current: Sequence[tuple[str, int, Layout, Claims]],
    target: Sequence[tuple[str, int, Layout, Claims]],
    placed_before: Collection[Key] = (),
) -> tuple[Move, ...]:
    """Stops and starts in an order that never exceeds capacity.

    ``current`` lists the replicas that run now; ``placed_before`` also names those whose current
    placement is gone (lost worker or GPU), whose start is then a move, not a first start.

    Starts go first whenever they fit next to what still runs (no downtime); otherwise the replica
    that blocks is stopped first, and the start is marked ``downtime``. Since the final state fits,
    stopping everything that must go always makes room, so no double booking is ever needed.
    """
    transition = _Transition(cluster, current, target, placed_before)
    while transition.starts:
        ready = transition.next_ready()
        if ready is None:
            transition.make_room()
        else:
            transition.start(ready)
    for key in list(transition.stops):
        transition.stop(key)
    return tuple(transition.moves)
