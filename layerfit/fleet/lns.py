"""Fewer GPUs and workers on a large fleet: large-neighbourhood search over groups of workers.

The whole master is too big for CP-SAT to improve its GPUs and workers tier within the limit on
a fleet of a thousand GPUs. So, starting from the incumbent, one group of workers at a time is
solved exactly: the replicas whose candidate lies on the group's workers alone may move to any
other candidate of their deployment on those workers; everything else stays, its memory taken out
of the group's capacities. A group's plan replaces the incumbent only when it uses fewer GPUs (then
fewer workers) and keeps every earlier tier: each deployment places as many replicas, with at least
as many layers on GPUs and as many kept where they run, pins honoured. So the result is never worse
than the incumbent on any tier, in order.

A group starts from the worker whose used GPUs are the emptiest and adds the workers where its
replicas' candidates lie, those with the most free VRAM on GPUs already in use first. Each group is
solved with one CP-SAT worker, a fixed seed and a deterministic time limit, and the search stops
when a full pass improves nothing or its work budget (``budget``: each group charged for its size
and its deterministic time) is spent, so the same input gives the same plan; the wall clock only
stops it as a safety stop, which the plan reports.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from layerfit.budget.deadline import Deadline
from layerfit.budget.fleet import DETERMINISTIC_PER_S, GROUP_PER_OPTION_S, GROUP_SOLVE_S, Budget
from layerfit.fleet.master import Counts, Master, ResourceKey
from layerfit.solver.model.scale import add_at_most

GROUP_WORKERS = 4
"""Workers per group: small enough for CP-SAT to solve a group in a fraction of a second."""
GROUP_DETERMINISTIC_S = 0.5
"""CP-SAT's deterministic time limit per group (the same on every machine and under any load)."""


def _worker_of(key: ResourceKey) -> str:
    return key[0] if isinstance(key, tuple) else key


class _Search:
    """The incumbent, what each candidate touches, and the groups tried."""

    def __init__(self, master: Master, counts: Counts, seed: int) -> None:
        self.master = master
        self.counts = [list(row) for row in counts]
        self.seed = seed
        self.workers_of = [[frozenset(_worker_of(key) for key, _ in takes) for takes in row] for row in master.loads]
        self.on_worker: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for d, row in enumerate(self.workers_of):
            for c, workers in enumerate(row):
                for worker in workers:
                    self.on_worker[worker].append((d, c))
        self.worker_names = sorted({_worker_of(key) for key in master.capacity})

    def used(self) -> dict[ResourceKey, int]:
        """Bytes taken per resource by the incumbent."""
        taken: dict[ResourceKey, int] = defaultdict(int)
        for d, row in enumerate(self.counts):
            for c, n in enumerate(row):
                for key, n_bytes in self.master.loads[d][c] if n else ():
                    taken[key] += n * n_bytes
        return taken

    def order(self) -> list[str]:
        """Workers whose used GPUs are the emptiest first (the ones a group may empty)."""
        taken = self.used()
        fill: dict[str, list[float]] = defaultdict(list)
        for key, n_bytes in taken.items():
            if isinstance(key, tuple) and n_bytes:
                fill[key[0]].append(n_bytes / max(1, self.master.capacity[key]))
        return sorted(fill, key=lambda worker: (sum(fill[worker]) / len(fill[worker]), -len(fill[worker]), worker))

    def group(self, source: str) -> list[str]:
        """``source`` and the workers where its replicas could go, roomiest used GPUs first."""
        taken = self.used()
        room: Counter[str] = Counter()
        for d, c in self.on_worker[source]:
            if not self.counts[d][c]:
                continue
            for other in self.master.loads[d]:
                for key, _ in other:
                    if isinstance(key, tuple) and key[0] != source and taken.get(key, 0):
                        room[key[0]] += self.master.capacity[key] - taken[key]
        ranked = sorted(room, key=lambda worker: (-room[worker], worker))
        return [source, *ranked[: GROUP_WORKERS - 1]]


def footprint(master: Master, counts: Counts) -> int:
    """GPUs x (workers + 1) + workers used by a solution given as replicas per candidate."""
    keys = {key for d, row in enumerate(counts) for c, n in enumerate(row) if n for key, _ in master.loads[d][c]}
    gpus = sum(1 for key in keys if isinstance(key, tuple))
    return gpus * (master.n_workers + 1) + (len(keys) - gpus)


class _Group:
    """One group's CP-SAT model: the movable replicas over the candidates on the group's workers."""

    def __init__(self, search: _Search, workers: Sequence[str]) -> None:
        master, counts = search.master, search.counts
        self.search = search
        inside = set(workers)
        self.model = cp_model.CpModel()
        movable: Counter[int] = Counter()
        self.inside: dict[int, list[int]] = defaultdict(list)
        for worker in workers:
            for d, c in search.on_worker[worker]:
                if search.workers_of[d][c] <= inside and c not in self.inside[d]:
                    self.inside[d].append(c)
                    movable[d] += counts[d][c]
        self.free = dict(master.capacity)
        fixed: set[ResourceKey] = set()
        for d, row in enumerate(counts):
            for c, n in enumerate(row):
                if n and not (search.workers_of[d][c] <= inside):
                    for key, n_bytes in master.loads[d][c]:
                        if _worker_of(key) in inside:
                            self.free[key] -= n * n_bytes
                            fixed.add(key)
        self.y: dict[tuple[int, int], cp_model.IntVar] = {}
        for d, options in self.inside.items():
            if movable[d]:
                self._deployment(d, options, movable[d])
        self._capacities_and_usage(fixed, movable)

    def _deployment(self, d: int, options: list[int], replicas: int) -> None:
        master, counts = self.search.master, self.search.counts
        deployment = master.deployments[d]
        pins = master.pins.get(deployment.name, Counter())
        now = master.current.get(deployment.name, Counter())
        row = {c: self.model.new_int_var(0, replicas, f"y_{d}_{c}") for c in options}
        for c, var in row.items():
            layout = master.candidates[d][c][0]
            self.model.add(var >= min(pins.get(layout, 0), replicas))
            self.model.add_hint(var, counts[d][c])
        self.model.add(sum(row.values()) == replicas)
        layers = {c: master.candidates[d][c][0].gpu_layers for c in options}
        self.model.add(sum(layers[c] * var for c, var in row.items()) >= sum(layers[c] * counts[d][c] for c in options))
        kept_now = sum(min(counts[d][c], now.get(master.candidates[d][c][0], 0)) for c in options)
        if kept_now:
            kept = []
            for c, var in row.items():
                here = now.get(master.candidates[d][c][0], 0)
                if here:
                    kept.append(self.model.new_int_var(0, here, f"k_{d}_{c}"))
                    self.model.add(kept[-1] <= var)
            self.model.add(sum(kept) >= kept_now)
        self.y.update({(d, c): var for c, var in row.items()})

    def _capacities_and_usage(self, fixed: set[ResourceKey], movable: Counter[int]) -> None:
        master = self.search.master
        load: dict[ResourceKey, list[tuple[int, cp_model.IntVar, int]]] = defaultdict(list)
        for (d, c), var in self.y.items():
            for key, n_bytes in master.loads[d][c]:
                load[key].append((n_bytes, var, movable[d]))
        weight = {True: master.n_workers + 1, False: 1}
        objective = []
        for i, (key, terms) in enumerate(load.items()):
            add_at_most(self.model, terms, self.free[key], str(i))  # exact in bytes (``solver.scale``)
            if key in fixed:
                continue
            flag = self.model.new_bool_var(f"used_{key}")
            for _, var, replicas in terms:
                self.model.add(var <= replicas * flag)
            objective.append(weight[isinstance(key, tuple)] * flag)
        self.model.minimize(sum(objective))

    def solve(self, seed: int, budget: Budget) -> bool:
        """Solve the group within ``budget``; move the incumbent to its plan when it has a smaller footprint."""
        if not self.y:
            return False
        master, counts = self.search.master, self.search.counts
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = seed
        budget.limit(solver, min(GROUP_DETERMINISTIC_S / DETERMINISTIC_PER_S, budget.left()))
        status = solver.solve(self.model)
        budget.charge(solver, status, STAGE)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return False
        proposal = [list(row) for row in counts]
        for (d, c), var in self.y.items():
            proposal[d][c] = solver.value(var)
        if footprint(master, proposal) >= footprint(master, counts):
            return False
        # the group's model knows no busy time: a proposal that breaks a minimum, or does worse on
        # the speed tier (solved before this one), is not taken
        if not master.keeps_minimums(proposal) or master.busy_value(proposal) > master.busy_value(counts):
            return False
        self.search.counts = proposal
        return True


STAGE = "the footprint search by groups of workers"


@dataclass(frozen=True)
class SearchOutcome:
    """The incumbent after the search, the groups solved, and why it ended: ``converged`` (a full
    pass improved nothing), ``budget`` (its work budget was spent) or ``wall clock`` (the safety stop)."""

    counts: Counts
    groups: int
    ended: str


def group_cost(master: Master) -> float:
    """Nominal cost of building and solving one group, beyond its deterministic time."""
    return GROUP_SOLVE_S + GROUP_PER_OPTION_S * sum(len(row) for row in master.loads)


def search_footprint(master: Master, counts: Counts, budget: Budget, seed: int = 0) -> SearchOutcome:
    """The incumbent with fewer GPUs and workers where groups of workers allow it (module docstring)."""
    search = _Search(master, counts, seed)
    tried: set[tuple[str, ...]] = set()
    cost = group_cost(master)
    groups = 0
    improved = True
    while improved:
        improved = False
        for source in search.order():
            if not budget.affords(cost):
                return SearchOutcome(search.counts, groups, "budget")
            if budget.expired(STAGE):
                return SearchOutcome(search.counts, groups, "wall clock")
            workers = search.group(source)
            key = tuple(sorted(workers))
            if key in tried:
                continue
            tried.add(key)
            budget.spend(cost)
            groups += 1
            if _Group(search, workers).solve(seed, budget):
                improved = True
                tried.clear()
    return SearchOutcome(search.counts, groups, "converged")


def improve_footprint(master: Master, counts: Counts, limit: Deadline | Budget, seed: int = 0) -> Counts:
    """``search_footprint`` within a work budget, or (given a deadline) until it converges or the
    deadline passes."""
    budget = limit if isinstance(limit, Budget) else Budget(math.inf, limit)
    return search_footprint(master, counts, budget, seed).counts
