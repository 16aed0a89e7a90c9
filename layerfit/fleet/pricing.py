"""Pricing: the layout of one deployment with the best reduced cost, over every valid layout.

Given dual prices on each GPU's VRAM, each worker's RAM and each unified pool (per MiB), and a
value per layer on GPUs, the single-deployment CP-SAT model (``layerfit.solver``: the same memory
model, the same hard rules) is solved with the objective

    maximise  layer_value * gpu_layers - sum of price * claim over every GPU and worker.

A claim's price is linear in the model's variables: a GPU's claim is the need of the slot that
holds it, a worker's the main process's RAM when it is main, its rpc-servers' RAM and its pool
shares. GPUs of one class with different prices are split into classes of their own, and no
symmetry is broken (swapping devices keeps memory figures but moves prices).

The objective is integral: prices are rounded down to a grid and claims to whole MiB, downwards,
so CP-SAT's bound divided by the grid is an upper bound on the true best value (``bound``). Found
layouts are checked again with ``layerfit.check`` and valued exactly in bytes (``value``).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from layerfit.check import check_layout, unified_workers
from layerfit.domain.base import MiB
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Claims, Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.fleet.prices import Prices, claim_value
from layerfit.fleet.pricing_bound import relaxed_bound
from layerfit.memory import claims as compute_claims
from layerfit.solver.model.build import BuiltModel, build_model
from layerfit.solver.model.constraints.ram import main_ram_expression
from layerfit.solver.model.instance import GpuClass, Instance, build_instance
from layerfit.solver.model.runner import solver_for
from layerfit.solver.model.variables import Expr

OBJECTIVE_RANGE = 1 << 46
"""The integral objective's magnitude stays below this (CP-SAT works on 64-bit integers)."""
WALL_GUARD = 4.0
"""A pricing problem's wall-clock limit, in multiples of its deterministic time limit, when no
wall-clock limit is given (column generation gives the time it has left: under a heavy load one
deterministic second took up to 10 s, and a guard cutting problems short by the clock changed
the bound from run to run)."""
ABSOLUTE_GAP = 1e-3
"""Pricing stops this close to the best value (in the tier's units: weight or layers)."""


@dataclass(frozen=True)
class Priced:
    """What pricing found for one deployment."""

    layouts: tuple[tuple[Layout, Claims], ...]
    """The best layouts found (valid, with their claims), best first."""
    bound: float
    """No valid layout has a value above this (``-inf``: no valid layout exists)."""
    proven: bool
    """The search finished: ``bound`` is the best value itself, up to the rounding."""
    work_s: float = 0.0
    """CP-SAT's deterministic time spent on it (the same on every run and executor)."""
    complete: bool = True
    """The model's figures are exact (sizes scaled without rounding, and found layouts valued no
    higher by the model than in bytes), so ``bound`` holds over every valid layout."""


def _split_classes(instance: Instance, prices: Prices) -> Instance:
    """GPU classes split so that all GPUs of a class have one price (per MiB, and to open); no twin
    workers. A class split keeps its decode costs (``Instance.speed``'s tables are per class): the
    pricing model keeps ``min_decode_tokens_per_s`` for one replica alone as the solver does."""
    classes: list[GpuClass] = []
    members: dict[int, list[int]] = defaultdict(list)
    origin: list[int] = []
    """Per class made: the class it was split from (its decode costs, where the instance counts time)."""
    for c, cls in enumerate(instance.classes):
        worker = instance.workers[cls.worker].name
        by_price: dict[tuple[float, float], list[int]] = defaultdict(list)
        for index in cls.gpu_indexes:
            key = (worker, index)
            by_price[(prices.gpu.get(key, 0.0), prices.gpu_open.get(key, 0.0))].append(index)
        for indexes in by_price.values():
            members[cls.worker].append(len(classes))
            classes.append(replace(cls, gpu_indexes=tuple(indexes)))
            origin.append(c)
    workers = tuple(replace(view, classes=tuple(members[w]), twin_of=None) for w, view in enumerate(instance.workers))
    speed = instance.speed
    if speed is not None:
        speed = replace(
            speed,
            local_table=tuple(speed.local_table[c] for c in origin),
            rpc_table=tuple(speed.rpc_table[c] for c in origin),
        )
    return replace(instance, classes=tuple(classes), workers=workers, speed=speed)


def _grid(instance: Instance, prices: Prices) -> float:
    """Objective units per price unit: as fine as the objective's range allows."""
    unit_mib = instance.scale.unit_bytes / MiB
    gpu_room = sum(
        prices.gpu.get((instance.workers[cls.worker].name, index), 0.0) * cls.capacity * unit_mib
        for cls in instance.classes
        for index in cls.gpu_indexes
    )
    ram_room = sum(prices.worker.get(view.name, 0.0) * view.ram_capacity * unit_mib for view in instance.workers)
    opening = sum(prices.gpu_open.values()) + sum(prices.worker_open.values())
    layers = prices.layer_value * instance.n_layers
    return OBJECTIVE_RANGE / max(1.0, gpu_room + ram_room + opening + layers)


class _Objective:
    """The priced objective's terms on a built model."""

    def __init__(self, built: BuiltModel, prices: Prices, grid: float) -> None:
        self.model = built.model
        self.instance = built.instance
        self.variables = built.variables
        self.prices = prices
        self.grid = grid
        self.unit = built.instance.scale.unit_bytes

    def _mib_floor(self, units: Expr, upper_units: int, name: str) -> cp_model.IntVar:
        """A variable at least ``units`` (model units) in whole MiB rounded down. The row
        ``MiB * mib >= unit * units - (MiB - 1)`` is divided by the unit's and MiB's common factor
        (exactly: ``mib`` and ``units`` are integers), so that its numbers stay under
        ``solver.scale.MAX_SCALED`` also when the unit is a large power of two (a 2 GiB unit when
        every size is a multiple of it)."""
        mib = self.model.new_int_var(0, upper_units * self.unit // MiB + 1, name)
        common = math.gcd(self.unit, MiB)
        self.model.add(MiB // common * mib >= self.unit // common * units - (MiB - 1) // common)
        return mib

    def gpu_cost(self) -> Expr:
        terms: list[Expr] = []
        for slot in self.variables.slots:
            for c, assigned in slot.assign.items():
                cls = self.instance.classes[c]
                key = (self.instance.workers[cls.worker].name, cls.gpu_indexes[0])
                opening = int(self.prices.gpu_open.get(key, 0.0) * self.grid)
                if opening > 0:
                    terms.append(opening * assigned)
                coefficient = int(self.prices.gpu.get(key, 0.0) * self.grid)
                if coefficient <= 0:
                    continue
                need = self.model.new_int_var(0, cls.capacity + 1, f"priced_{slot.name}_{c}")
                self.model.add(need >= slot.need).only_enforce_if(assigned)
                terms.append(coefficient * self._mib_floor(need, cls.capacity + 1, f"mib_{slot.name}_{c}"))
        return sum(terms)

    def worker_cost(self) -> Expr:
        variables, instance = self.variables, self.instance
        main_ram = main_ram_expression(self.model, instance, variables) if variables.main else 0
        terms: list[Expr] = []
        for w, view in enumerate(instance.workers):
            opening = int(self.prices.worker_open.get(view.name, 0.0) * self.grid)
            if opening > 0:
                terms.append(opening * variables.worker_used[w])
            coefficient = int(self.prices.worker.get(view.name, 0.0) * self.grid)
            if coefficient <= 0:
                continue
            claim: list[Expr] = [slot.pool_share[w] for slot in variables.slots if w in slot.pool_share]
            claim += [instance.costs.rpc_host * slot.on_worker[w] for slot in variables.rpc if w in slot.on_worker]
            main = variables.main.get(w)
            if main is not None:
                ram = self.model.new_int_var(0, view.ram_capacity, f"priced_main_ram{w}")
                self.model.add(ram >= main_ram).only_enforce_if(main)
                claim.append(ram)
            terms.append(coefficient * self._mib_floor(sum(claim), view.ram_capacity, f"mib_ram{w}"))
        return sum(terms)

    def layers(self) -> Expr:
        """Layers at their value, rounded up (the bound must not fall below the true value)."""
        return math.ceil(self.prices.layer_value * self.grid) * self.variables.gpu_layers


def priced_model(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, prices: Prices
) -> tuple[BuiltModel, float]:
    """The pricing problem's model, its objective set, and its grid (objective units per price unit)."""
    instance = _split_classes(build_instance(cluster, deployment, profile, config), prices)
    built = build_model(instance, break_symmetry=False)
    grid = _grid(instance, prices)
    objective = _Objective(built, prices, grid)
    built.model.maximize(objective.layers() - objective.gpu_cost() - objective.worker_cost())
    return built, grid


def price(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    prices: Prices,
    time_limit_s: float,
    wall_limit_s: float | None = None,
) -> Priced:
    """The valid layout of ``deployment`` with the best value under ``prices`` (see the module docstring).
    ``time_limit_s`` is deterministic time; ``wall_limit_s`` caps the wall-clock guard."""
    built, grid = priced_model(cluster, deployment, profile, config, prices)
    instance = built.instance
    # Deterministic time, so that the same input prices the same under any load; wall time as a guard.
    solver = solver_for(config, WALL_GUARD * time_limit_s if wall_limit_s is None else max(0.05, wall_limit_s))
    solver.parameters.max_deterministic_time = time_limit_s
    # Values closer than this to the best are as good for column generation; the bound stays exact.
    solver.parameters.absolute_gap_limit = ABSOLUTE_GAP * grid
    status = solver.solve(built.model)
    trivial = prices.layer_value * instance.n_layers
    work = solver.deterministic_time
    if status == cp_model.INFEASIBLE:
        return Priced(layouts=(), bound=float("-inf"), proven=True, complete=instance.scale.exact, work_s=work)
    # Without a layout found in time CP-SAT's bound means nothing (it reads 0): the trivial one stands.
    model_bound = min(trivial, solver.best_objective_bound / grid) if status != cp_model.UNKNOWN else trivial
    # The relaxation in exact bytes holds over every valid layout, whatever the model's scale.
    relaxed = relaxed_bound(cluster, deployment, profile, prices)
    bound = min(model_bound, relaxed)
    complete = instance.scale.exact or relaxed <= model_bound
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Priced(layouts=(), bound=bound, proven=False, complete=complete, work_s=work)
    from layerfit.solver.model.decode import decode

    layout = decode(instance, built.variables, solver.value)
    found: tuple[tuple[Layout, Claims], ...] = ()
    proven = status == cp_model.OPTIMAL
    if not check_layout(cluster, deployment, profile, layout, config):
        claims = compute_claims(profile, layout, unified_workers(cluster))
        found = ((layout, claims),)
        value = claim_value(cluster, prices, layout, claims)
        # The model must never value a layout below its exact value, or its bound is no bound.
        complete = complete and value <= bound + 1e-6 * max(1.0, abs(bound))
        # Found within the pricing's gap of the relaxation: as good as proven.
        proven = proven or relaxed <= value + ABSOLUTE_GAP
    return Priced(layouts=found, bound=bound, proven=proven, complete=complete, work_s=work)


PricingTask = tuple[Deployment, MemoryProfile, PlannerConfig, Prices, float, float]
"""The problem, its deterministic limit, and when it must end (``time.time()``: tasks run in turn,
maybe in other processes, so each takes what is left of the round's time, not the round's time);
the cluster is shared by every task (``executors.run_shared``)."""
TOO_LATE_S = 0.02
"""A task with less than this left (beyond its model's build) is not searched: the relaxation answers it."""
BUILD_PER_GPU_S = 0.45e-3
"""Nominal cost of building a pricing problem's model, per GPU of the cluster (each GPU a class of
its own under its price): 5.3-6.0 s on 23,600 GPUs and 11.2-12.4 s on 30,000 for a deployment on
one worker."""
DISTRIBUTED_BUILD = 1.8
"""A distributed deployment's model costs this many times more to build (13.7 s and 21.6 s there)."""
BUILD_GUARD = 2.0
"""A problem is not searched with less than this many times its build's nominal cost left on the clock."""


def build_cost(cluster: Cluster, deployment: Deployment) -> float:
    """Nominal seconds to build the pricing model of ``deployment`` on ``cluster`` (before any search)."""
    gpus = sum(len(worker.gpus) for worker in cluster.workers)
    factor = DISTRIBUTED_BUILD if deployment.distributed_inference_across_workers else 1.0
    return BUILD_PER_GPU_S * gpus * factor


def relaxed_answer(cluster: Cluster, deployment: Deployment, profile: MemoryProfile, prices: Prices) -> Priced:
    """The pricing problem answered by its relaxation alone (no layout, a valid bound)."""
    bound = min(prices.layer_value * profile.n_layers, relaxed_bound(cluster, deployment, profile, prices))
    return Priced(layouts=(), bound=bound, proven=False)


def pricing_task(cluster: Cluster, task: PricingTask) -> Priced:
    """One pricing problem from a picklable task (for the executors); the relaxation alone when
    the wall clock leaves too little for its model's build and search."""
    deployment, profile, config, prices, limit, until = task
    left = until - time.time()
    if left < TOO_LATE_S + BUILD_GUARD * build_cost(cluster, deployment):
        return relaxed_answer(cluster, deployment, profile, prices)
    return price(cluster, deployment, profile, config, prices, limit, left)
