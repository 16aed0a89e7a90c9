"""Replica numbers for the chosen layouts, and the order of stops and starts that gets there."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import Literal

from layerfit.check import capacity_reasons
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


class _Transition:
    """The running replicas while moves are recorded, and the moves so far."""

    def __init__(
        self,
        cluster: Cluster,
        current: Sequence[tuple[str, int, Layout, Claims]],
        target: Sequence[tuple[str, int, Layout, Claims]],
        placed_before: Collection[Key],
    ) -> None:
        self.cluster = cluster
        self.running = {(d, r): claims for d, r, _, claims in current}
        self.placed_before = {*placed_before, *self.running}
        self.layout_of = {(d, r): layout for d, r, layout, _ in current}
        self.wanted = {(d, r): (layout, claims) for d, r, layout, claims in target}
        self.stops = [key for key in self.running if self._changes(key)]
        self.starts = [key for key in self.wanted if key not in self.running or self._changes(key)]
        self.moves: list[Move] = []
        self.stopped_first: set[Key] = set()

    def _changes(self, key: Key) -> bool:
        return key not in self.wanted or self.wanted[key][0] != self.layout_of.get(key)

    def fits(self, extra: Claims) -> bool:
        return not capacity_reasons(self.cluster, *self.running.values(), extra)

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
        del self.running[key]
        self.stops.remove(key)

    def start(self, key: Key) -> None:
        layout, claims = self.wanted[key]
        self.record("start", key, layout, downtime=key in self.stopped_first)
        self.starts.remove(key)
        if key in self.stops:  # started next to its old placement: now stop that one
            self.stop(key)
        self.running[key] = claims

    def make_room(self) -> None:
        """Stop a replica that must go anyway: one that also restarts, else any."""
        blocker = next((key for key in self.starts if key in self.stops), None) or (
            self.stops[0] if self.stops else None
        )
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
        ready = next((key for key in transition.starts if transition.fits(transition.wanted[key][1])), None)
        if ready is None:
            transition.make_room()
        else:
            transition.start(ready)
    for key in list(transition.stops):
        transition.stop(key)
    return tuple(transition.moves)
