"""The master problem: how many replicas of each deployment use each candidate layout.

``x[d, c]`` = replicas of deployment ``d`` on candidate ``c``. The claims of all chosen candidates
add up per GPU and per worker (RAM, or the whole pool on unified-memory workers) and must fit,
exactly in bytes: each capacity row is written with numbers under ``solver.scale.MAX_SCALED``
(``scale.add_at_most``), which CP-SAT's presolve handles (sizes in MiB rounded up, as before,
left out plans that fit by less than a MiB per replica). The plan is checked in bytes again.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ortools.sat.python import cp_model

from layerfit.budget.deadline import Deadline, DeadlinePassed
from layerfit.domain.cluster import Cluster
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Claims, Layout
from layerfit.errors import InputError
from layerfit.fleet.busy import BusyTable, layout_gpus
from layerfit.fleet.candidates import CandidateSet
from layerfit.solver.model.scale import add_at_most

ResourceKey = tuple[str, int] | str
"""A GPU as (worker, index), or a worker's RAM (or unified pool) by its name."""
Takes = list[tuple[ResourceKey, int]]
"""What one replica on a candidate takes: (resource, bytes) pairs."""
Counts = list[list[int]]
"""Replicas per candidate, per deployment."""


def priority_weights(deployments: Sequence[Deployment]) -> dict[str, int]:
    """Weights such that one replica of a priority outweighs all replicas of every lower priority."""
    replicas_at: Counter[int] = Counter()
    for deployment in deployments:
        replicas_at[deployment.priority] += deployment.replicas
    weight_of: dict[int, int] = {}
    lower_total = 0
    for priority in sorted(replicas_at):
        weight_of[priority] = lower_total + 1
        lower_total += weight_of[priority] * replicas_at[priority]
    if lower_total >= 2**50:
        raise InputError("priority", "too many distinct priorities to weigh exactly; use fewer levels")
    return {deployment.name: weight_of[deployment.priority] for deployment in deployments}


def gpu_weight(cluster: Cluster) -> int:
    """A GPU's weight in the GPUs and workers tier: one GPU outweighs every worker."""
    return len(cluster.workers) + 1


def claim_bytes(cluster: Cluster | frozenset[str], claims: Claims) -> list[tuple[ResourceKey, int]]:
    """The bytes a layout's claims take from each GPU and each worker's RAM (or unified pool; the
    cluster, or the names of its unified-memory workers)."""
    unified = cluster.unified_names if isinstance(cluster, Cluster) else cluster
    taken: list[tuple[ResourceKey, int]] = [((d.worker, d.gpu_index), d.total_bytes) for d in claims.devices]
    for worker_claim in claims.workers:
        pooled = worker_claim.worker in unified
        taken.append((worker_claim.worker, worker_claim.pool_bytes if pooled else worker_claim.ram_bytes))
    return taken


CHECK_EVERY = 512
"""Terms added to the master between two looks at the deadline."""


class _Checks:
    """``DeadlinePassed`` once the deadline passes, looked at every ``CHECK_EVERY`` terms added."""

    def __init__(self, deadline: Deadline | None) -> None:
        self.deadline, self.since = deadline, 0

    def after(self, terms: int) -> None:
        self.since += terms
        if self.deadline is not None and self.since >= CHECK_EVERY:
            self.since = 0
            self.deadline.check()


def capacity_bytes(cluster: Cluster) -> dict[ResourceKey, int]:
    """Allocatable VRAM per GPU and RAM (or pool) per worker."""
    capacity: dict[ResourceKey, int] = {}
    for worker in cluster.workers:
        for gpu in worker.gpus:
            capacity[(worker.name, gpu.index)] = gpu.allocatable_vram_bytes
        capacity[worker.name] = worker.allocatable_ram_bytes
    return capacity


class Master:
    """The master CP-SAT model: replicas per candidate, capacities, tier expressions.

    The data (what each candidate takes, capacities, weights, current and pinned layouts) is
    always there; the model is built after it, and not at all once ``deadline`` passes (``built``
    says whether it was: 8,192 replicas' candidates make a model of seconds to build in Python),
    for the greedy start needs only the data."""

    x: list[list[cp_model.IntVar]]
    placed: cp_model.LinearExprT
    layers: cp_model.LinearExprT
    kept: cp_model.LinearExprT
    moved: cp_model.LinearExprT
    footprint: cp_model.LinearExprT
    used_gpus: list[cp_model.IntVar]
    used_workers: list[cp_model.IntVar]
    busy_time: cp_model.LinearExprT
    """The speed tier's expression (``busy.BusyTable.total_us``), where a deployment has ``objective: speed``."""

    def __init__(
        self,
        cluster: Cluster,
        deployments: Sequence[Deployment],
        candidates: Sequence[CandidateSet],
        current: dict[str, Counter[Layout]],
        pins: dict[str, Counter[Layout]],
        seed: dict[str, Counter[Layout]] | None = None,
        deadline: Deadline | None = None,
        busy: BusyTable | None = None,
    ) -> None:
        self.model = cp_model.CpModel()
        self.busy = busy
        """Busy decode times, where a deployment sets ``min_decode_tokens_per_s`` or ``objective: speed``."""
        self.layouts = [[layout for layout, _ in options] for options in candidates]
        self.seed = seed or {}
        self.deployments = deployments
        self.candidates = candidates
        self.current = current
        self.pins = pins
        self.weights = priority_weights(deployments)
        self.capacity = capacity_bytes(cluster)
        unified = cluster.unified_names
        self.loads: list[list[Takes]] = [
            [claim_bytes(unified, claims) for _, claims in options] for options in candidates
        ]
        """Per deployment, per candidate: (GPU or worker key, bytes) it takes."""
        self.gpu_layers = [[layout.gpu_layers for layout, _ in options] for options in candidates]
        """Per deployment, per candidate: its layers on GPUs."""
        self.moves_total = sum(sum(current.get(d.name, Counter()).values()) for d in deployments)
        self.n_workers = len(cluster.workers)
        self.gpu_weight = gpu_weight(cluster)
        self.built = False
        try:
            self._build(cluster, deadline)
            self.built = True
        except DeadlinePassed:
            self.model = cp_model.CpModel()  # nothing half built is solved

    def _build(self, cluster: Cluster, deadline: Deadline | None) -> None:
        """The model; ``DeadlinePassed`` once ``deadline`` passes while it is built."""
        if deadline is not None:
            deadline.check()
        check = _Checks(deadline)
        self.x = []
        kept_terms: list[cp_model.IntVar] = []
        for d, deployment in enumerate(self.deployments):
            check.after(len(self.candidates[d]))
            self.x.append(self._replica_row(d, deployment))
            kept_terms += self._kept_and_pinned(d, deployment)
        self._capacity_rows(cluster, check)
        if self.busy is not None and (self.busy.has_limits or self.busy.has_speed_tier):
            on_gpu = self._gpu_replicas()
            self._busy_rows(self.busy, on_gpu, check)
            self.busy_time = self._busy_objective(self.busy, on_gpu) if self.busy.has_speed_tier else 0
        self.used_gpus = self._usage(self._users(lambda key: isinstance(key, tuple)), "gpu", check)
        self.used_workers = self._usage(self._users(lambda key: isinstance(key, str)), "worker", check)
        self.placed = sum(
            self.weights[d.name] * var for d, row in zip(self.deployments, self.x, strict=True) for var in row
        )
        self.layers = sum(
            layers * var
            for row_layers, row in zip(self.gpu_layers, self.x, strict=True)
            for layers, var in zip(row_layers, row, strict=True)
        )
        self.kept = sum(kept_terms)
        self.moved = self.moves_total - self.kept
        """Replicas with a current placement, that the deployment still has, and that do not stay in
        it (first starts are not moves; replicas beyond the replica count stop, which is no move)."""
        self.footprint = sum(self.used_gpus) * self.gpu_weight + sum(self.used_workers)
        """GPUs used, then workers used, as one number: ``GPUs x (workers + 1) + workers``."""

    def _replica_row(self, d: int, deployment: Deployment) -> list[cp_model.IntVar]:
        row = [self.model.new_int_var(0, deployment.replicas, f"x_{d}_{c}") for c in range(len(self.candidates[d]))]
        if row:
            self.model.add(sum(row) <= deployment.replicas)
        return row

    def _kept_and_pinned(self, d: int, deployment: Deployment) -> list[cp_model.IntVar]:
        """Replicas kept where they run now (at most the current count), and pins as lower bounds."""
        now = self.current.get(deployment.name, Counter())
        pinned_here = self.pins.get(deployment.name, Counter())
        kept: list[cp_model.IntVar] = []
        for c, (layout, _) in enumerate(self.candidates[d]):
            var = self.x[d][c]
            if layout in now:
                kept.append(self.model.new_int_var(0, now[layout], f"kept_{d}_{c}"))
                self.model.add(kept[-1] <= var)
            if pinned_here.get(layout, 0):
                self.model.add(var >= pinned_here[layout])
        return kept

    def _capacity_rows(self, cluster: Cluster, check: _Checks) -> None:
        load: dict[ResourceKey, list[tuple[int, cp_model.IntVar, int]]] = defaultdict(list)
        for deployment, row, row_loads in zip(self.deployments, self.x, self.loads, strict=True):
            for var, takes in zip(row, row_loads, strict=True):
                for key, n_bytes in takes:
                    load[key].append((n_bytes, var, deployment.replicas))
        for worker in cluster.workers:
            keys: list[ResourceKey] = [(worker.name, gpu.index) for gpu in worker.gpus]
            for i, key in enumerate([*keys, worker.name]):
                if load.get(key):
                    check.after(len(load[key]))
                    add_at_most(self.model, load[key], self.capacity[key], f"{worker.name}_{i}")

    def _gpu_replicas(self) -> dict[tuple[str, int], tuple[int, list[cp_model.IntVar]]]:
        """Per GPU: the most replicas its candidates can place on it, and their variables (by the
        layouts' devices, as ``busy.gpu_sharing`` counts them)."""
        on_gpu: dict[tuple[str, int], tuple[int, list[cp_model.IntVar]]] = {}
        for deployment, row, layouts in zip(self.deployments, self.x, self.layouts, strict=True):
            for var, layout in zip(row, layouts, strict=True):
                for gpu in layout_gpus(layout):
                    most, users = on_gpu.get(gpu, (0, []))
                    users.append(var)
                    on_gpu[gpu] = (most + deployment.replicas, users)
        return on_gpu

    def _busy_rows(
        self, busy: BusyTable, on_gpu: Mapping[tuple[str, int], tuple[int, list[cp_model.IntVar]]], check: _Checks
    ) -> None:
        """``min_decode_tokens_per_s`` with every replica on a candidate's GPUs decoding at once
        (``busy`` module): a candidate in use keeps ``rest + sum share_g x replicas on g <= limit``.
        A candidate that keeps it however full its GPUs get needs no row; one that breaks it alone
        is not used."""
        for d, row in enumerate(self.x):
            limit = busy.limits[d]
            if limit is None:
                continue
            replicas = self.deployments[d].replicas
            for var, time in zip(row, busy.times[d], strict=True):
                assert time is not None  # a deployment with a minimum has every candidate's time
                check.after(len(time.shares_us))
                if time.time_us({gpu: on_gpu[gpu][0] for gpu, _ in time.shares_us}) <= limit:
                    continue
                if time.time_us({}) > limit:
                    self.model.add(var == 0)
                    continue
                used = self.model.new_bool_var(f"busy_{var.name}")
                self.model.add(var <= replicas * used)
                shared = sum(share * sum(on_gpu[gpu][1]) for gpu, share in time.shares_us)
                self.model.add(time.rest_us + shared <= limit).only_enforce_if(used)

    def _busy_objective(
        self, busy: BusyTable, on_gpu: Mapping[tuple[str, int], tuple[int, list[cp_model.IntVar]]]
    ) -> cp_model.LinearExprT:
        """The busy decode time of every replica of a speed deployment, summed, exactly: per
        replica ``rest + sum share_g n_g``, so in all ``sum rest x + sum over GPUs g of n_g times
        (the shares on g of the speed replicas there)``, one product per GPU."""
        linear: list[cp_model.LinearExprT] = []
        on: dict[tuple[str, int], list[tuple[int, cp_model.IntVar, int]]] = defaultdict(list)
        for d, row in enumerate(self.x):
            if not busy.speedy[d]:
                continue
            replicas = self.deployments[d].replicas
            for var, time in zip(row, busy.times[d], strict=True):
                assert time is not None  # a speed deployment has every candidate's time
                linear.append(time.rest_us * var)
                for gpu, share in time.shares_us:
                    on[gpu].append((share, var, replicas))
        for i, (gpu, parts) in enumerate(on.items()):
            most, users = on_gpu[gpu]
            shares = self.model.new_int_var(0, sum(share * n for share, _, n in parts), f"shares_{i}")
            self.model.add(shares == sum(share * var for share, var, _ in parts))
            count = self.model.new_int_var(0, most, f"on_{i}")
            self.model.add(count == sum(users))
            product = self.model.new_int_var(0, sum(share * n for share, _, n in parts) * most, f"busy_{i}")
            self.model.add_multiplication_equality(product, [shares, count])
            linear.append(product)
        return sum(linear)

    def busy_value(self, counts: Sequence[Sequence[int]]) -> int:
        """The speed tier's value of a solution given as replicas per candidate."""
        return 0 if self.busy is None else self.busy.total_us(self.layouts, counts)

    def keeps_minimums(self, counts: Sequence[Sequence[int]]) -> bool:
        """Every placed replica's busy time keeps its deployment's minimum (``busy`` module)."""
        return self.busy is None or not self.busy.violated(self.layouts, counts)

    def _users(self, selects: Any) -> dict[ResourceKey, list[tuple[int, cp_model.IntVar]]]:
        """Per resource that ``selects`` keeps, in first-use order: (replica bound, variable) of its users."""
        users: dict[ResourceKey, list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
        for deployment, row, row_loads in zip(self.deployments, self.x, self.loads, strict=True):
            for var, takes in zip(row, row_loads, strict=True):
                for key, _ in takes:
                    if selects(key):
                        users[key].append((deployment.replicas, var))
        return users

    def _usage(
        self, users: Mapping[Any, list[tuple[int, cp_model.IntVar]]], name: str, check: _Checks
    ) -> list[cp_model.IntVar]:
        flags = []
        for i, terms in enumerate(users.values()):
            check.after(len(terms))
            flag = self.model.new_bool_var(f"used_{name}_{i}")
            for replicas, var in terms:
                self.model.add(var <= replicas * flag)
            flags.append(flag)
        return flags

    def all_vars(self) -> list[cp_model.IntVar]:
        return [var for row in self.x for var in row]

    def simple_bounds(self) -> tuple[int, int, int]:
        """Simple bounds of the first three tiers: every replica placed, with all its layers on
        GPUs, and every current replica kept (the fewest moves)."""
        placed = layers = kept = 0
        for d, deployment in enumerate(self.deployments):
            options = self.candidates[d]
            if not options:
                continue
            placed += self.weights[deployment.name] * deployment.replicas
            layers += deployment.replicas * max(self.gpu_layers[d])
            now = self.current.get(deployment.name, Counter())
            kept += sum(min(now[layout], deployment.replicas) for layout, _ in options if layout in now)
        return placed, layers, self.moves_total - kept

    def tier_values(self, counts: Sequence[Sequence[int]]) -> tuple[int, int, int]:
        """The first three tiers' values of a solution given as replicas per candidate: priority
        weight placed, layers on GPUs, replicas moved."""
        placed = layers = kept = 0
        for d, deployment in enumerate(self.deployments):
            row = counts[d]
            placed += self.weights[deployment.name] * sum(row)
            layers += sum(n * on_gpus for n, on_gpus in zip(row, self.gpu_layers[d], strict=True) if n)
            now = self.current.get(deployment.name)
            if now:
                kept += sum(min(n, now.get(layout, 0)) for (layout, _), n in zip(self.candidates[d], row, strict=True))
        return placed, layers, self.moves_total - kept

    def satisfies_pins(self, counts: Sequence[Sequence[int]]) -> bool:
        return all(
            n >= pins.get(layout, 0)
            for d, deployment in enumerate(self.deployments)
            if (pins := self.pins.get(deployment.name))
            for (layout, _), n in zip(self.candidates[d], counts[d], strict=True)
        )
