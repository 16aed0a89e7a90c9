"""Column generation: the master's LP relaxation, priced over every layout, for a true bound.

For one tier (priority weight placed, or layers on GPUs among plans that place at least a given
weight) the LP relaxation of the master over the current columns is solved with GLOP. Its duals
price every GPU's VRAM, every worker's RAM or pool, and (for the layers tier) the placed weight;
pricing (``pricing``) then finds, per deployment, the layout with the best reduced cost over every
valid layout. Columns with a positive reduced cost join, and the LP is solved again, until none is
left or the budget runs out.

The bound is Lagrangian: for any prices ``pi >= 0`` on capacities and ``lam >= 0`` on the placed
weight, every plan's tier value is at most

    pi . capacity - lam * floor + sum over deployments of replicas * max(0, best value of one replica)

where one replica's value on layout ``c`` is ``tier value of c + lam * weight - pi . claims(c)``
and the best value is bounded by pricing over all layouts. It holds for integer plans (pins
included: they only restrict them) whatever the prices, so every round gives a valid bound and
the smallest is kept. When no column has a positive reduced cost it meets the LP's value: the LP
bound over all layouts. The LP works in exact bytes (MiB as fractions), so the bound holds for the
byte-exact problem, not only for the master's MiB-rounded one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ortools.linear_solver import pywraplp

from layerfit.domain.base import MiB
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.fleet import Executor, FleetConfig, TierBound
from layerfit.domain.layout import Claims, Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import SolverError
from layerfit.fleet.candidates import CandidateSet, identical_groups
from layerfit.fleet.executors import run_tasks
from layerfit.fleet.gaps import UNITS
from layerfit.fleet.master import ResourceKey, capacity_bytes, claim_bytes
from layerfit.fleet.pricing import Priced, Prices, PricingTask, claim_value, pricing_task

PLACED = "priority weight placed"
LAYERS = "layers on GPUs"
TOLERANCE = 1e-6
"""Reduced costs below this (relative to the deployment's value) count as zero."""


def exact_takes(cluster: Cluster, claims: Claims) -> list[tuple[ResourceKey, float]]:
    """What a layout takes from each GPU and each worker's RAM or pool, in MiB, not rounded."""
    return [(key, n_bytes / MiB) for key, n_bytes in claim_bytes(cluster, claims)]


def exact_capacities(cluster: Cluster) -> dict[ResourceKey, float]:
    return {key: n_bytes / MiB for key, n_bytes in capacity_bytes(cluster).items()}


@dataclass(frozen=True)
class LpSolution:
    value: float
    prices: Prices
    replica_duals: tuple[float, ...]
    placed_dual: float


def column_value(tier: str, weight: int, layout: Layout) -> float:
    """A replica's contribution to the tier on this layout."""
    return float(weight) if tier == PLACED else float(layout.gpu_layers)


def solve_lp(
    cluster: Cluster,
    deployments: Sequence[Deployment],
    columns: Sequence[Sequence[tuple[Layout, Claims]]],
    weights: Mapping[str, int],
    tier: str,
    placed_floor: float = 0.0,
    pins: Mapping[str, Mapping[Layout, int]] | None = None,
) -> LpSolution:
    """The master's LP relaxation for one tier, pinned replicas as lower bounds, with its duals."""
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:
        raise SolverError("the GLOP linear solver is not available")
    capacity = exact_capacities(cluster)
    load: dict[ResourceKey, list[tuple[float, pywraplp.Variable]]] = {key: [] for key in capacity}
    objective, placed = [], []
    replica_rows = []
    for d, (deployment, options) in enumerate(zip(deployments, columns, strict=True)):
        pinned = (pins or {}).get(deployment.name, {})
        row = [
            solver.NumVar(float(min(pinned.get(layout, 0), deployment.replicas)), deployment.replicas, f"x_{d}_{c}")
            for c, (layout, _) in enumerate(options)
        ]
        replica_rows.append(solver.Add(sum(row) <= deployment.replicas) if row else None)
        for var, (layout, claims) in zip(row, options, strict=True):
            objective.append(column_value(tier, weights[deployment.name], layout) * var)
            placed.append(weights[deployment.name] * var)
            for key, mib in exact_takes(cluster, claims):
                load[key].append((mib, var))
    rows = {
        key: solver.Add(sum(mib * var for mib, var in terms) <= capacity[key]) for key, terms in load.items() if terms
    }
    floor_row = solver.Add(sum(placed) >= placed_floor) if tier == LAYERS and placed else None
    solver.Maximize(sum(objective))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        raise SolverError(f"the LP relaxation of the fleet master ({tier}) was not solved to optimality")
    gpu = {key: max(0.0, row.dual_value()) for key, row in rows.items() if isinstance(key, tuple)}
    worker = {key: max(0.0, row.dual_value()) for key, row in rows.items() if isinstance(key, str)}
    return LpSolution(
        value=solver.Objective().Value(),
        prices=Prices(gpu=gpu, worker=worker, layer_value=1.0 if tier == LAYERS else 0.0),
        replica_duals=tuple(0.0 if row is None else max(0.0, row.dual_value()) for row in replica_rows),
        placed_dual=0.0 if floor_row is None else max(0.0, -floor_row.dual_value()),
    )


@dataclass(frozen=True)
class Bound:
    """A tier's bound from column generation."""

    tier: str
    value: float
    """No plan (that places at least ``placed_floor``, for the layers tier) beats this."""
    over_all_layouts: bool
    """Every pricing problem was solved: the bound holds over all layouts, not only the columns."""
    closed: bool
    """No column with a positive reduced cost is left: the LP over the columns is the LP over all."""
    lp_value: float
    rounds: int
    columns_added: int
    placed_floor: float = 0.0


class ColumnGeneration:
    """The columns per deployment, grown by pricing, and the best bound per tier."""

    def __init__(
        self,
        cluster: Cluster,
        deployments: Sequence[Deployment],
        profiles: Mapping[str, MemoryProfile],
        columns: Sequence[CandidateSet],
        weights: Mapping[str, int],
        config: FleetConfig,
        planner_config: PlannerConfig,
        pins: Mapping[str, Mapping[Layout, int]] | None = None,
    ) -> None:
        self.pins = pins or {}
        self.cluster = cluster
        self.deployments = deployments
        self.profiles = profiles
        self.columns = [list(options) for options in columns]
        self.known = [{layout for layout, _ in options} for options in columns]
        self.weights = weights
        self.config = config
        self.planner_config = planner_config
        self.groups = identical_groups(deployments, profiles)
        self.added = 0

    def candidate_sets(self) -> list[CandidateSet]:
        return [tuple(options) for options in self.columns]

    def _known_best(self, group: Sequence[int], prices: Prices) -> Priced | None:
        """A known column at the most any layout can be worth (every layer on GPUs, nothing priced
        it uses) answers the pricing problem without a solve."""
        d = group[0]
        ceiling = prices.layer_value * self.profiles[self.deployments[d].name].n_layers
        for layout, claims in self.columns[d]:
            if claim_value(self.cluster, prices, layout, claims) >= ceiling:
                return Priced(layouts=(), bound=ceiling, proven=True)
        return None

    def _price_all(self, prices: Prices, time_limit_s: float) -> list[Priced]:
        known = [self._known_best(group, prices) for group in self.groups]
        tasks: list[PricingTask] = [
            (
                self.cluster,
                self.deployments[group[0]],
                self.profiles[self.deployments[group[0]].name],
                self.planner_config,
                prices,
                time_limit_s,
            )
            for group, answer in zip(self.groups, known, strict=True)
            if answer is None
        ]
        solved = iter(run_tasks(pricing_task, tasks, self.config))
        return [answer if answer is not None else next(solved) for answer in known]

    def _task_limit(self, budget_s: float) -> float:
        """Each pricing problem's share of a round's budget, on as many processes as the executor has.
        The budget is nominal (from the configuration, not the clock), so that the same input prices
        the same on every executor and under any load; the deadline still ends the rounds."""
        parallel = 1 if self.config.executor is Executor.SERIAL else (self.config.processes or os.cpu_count() or 1)
        waves = -(-len(self.groups) // parallel)
        return max(0.05, min(self.config.pricing_time_limit_s, budget_s / max(1, waves)))

    def _replica_value(self, tier: str, d: int, lp: LpSolution) -> float:
        """A replica's value apart from its layout's claims and (for layers) its layers."""
        weight = self.weights[self.deployments[d].name]
        return float(weight) if tier == PLACED else lp.placed_dual * weight

    def _lagrangian(self, tier: str, lp: LpSolution, priced: Sequence[Priced], floor: float) -> float:
        capacity = exact_capacities(self.cluster)
        total = sum(lp.prices.gpu.get(key, 0.0) * cap for key, cap in capacity.items() if isinstance(key, tuple))
        total += sum(lp.prices.worker.get(key, 0.0) * cap for key, cap in capacity.items() if isinstance(key, str))
        total -= lp.placed_dual * floor
        for group, result in zip(self.groups, priced, strict=True):
            for d in group:
                best = self._replica_value(tier, d, lp) + result.bound
                total += self.deployments[d].replicas * max(0.0, best)
        return total

    def _lp_bound(self, tier: str, lp: LpSolution, priced: Sequence[Priced]) -> float:
        """The LP over the columns plus, per deployment, its replicas times the best reduced cost
        pricing allows: a bound on the LP over all layouts (its dual made feasible by raising each
        deployment's replica dual), pins included, where the Lagrangian leaves them out."""
        total = lp.value
        for group, result in zip(self.groups, priced, strict=True):
            for d in group:
                reduced = self._replica_value(tier, d, lp) + result.bound - lp.replica_duals[d]
                total += self.deployments[d].replicas * max(0.0, reduced)
        return total

    def _add_columns(self, tier: str, lp: LpSolution, priced: Sequence[Priced]) -> int:
        added = 0
        for group, result in zip(self.groups, priced, strict=True):
            for d in group:
                for layout, claims in result.layouts:
                    value = self._replica_value(tier, d, lp) + claim_value(self.cluster, lp.prices, layout, claims)
                    reduced = value - lp.replica_duals[d]
                    if reduced > TOLERANCE * max(1.0, abs(value)) and layout not in self.known[d]:
                        self.known[d].add(layout)
                        self.columns[d].append((layout, claims))
                        added += 1
        self.added += added
        return added

    def run(
        self, tier: str, deadline: float, trivial: float, placed_floor: float = 0.0, budget_s: float | None = None
    ) -> Bound:
        """Rounds of LP and pricing until no column is added or ``deadline`` (``perf_counter``) passes.
        ``budget_s`` (default: the time to the deadline) sizes each round's pricing problems."""
        budget = deadline - time.perf_counter() if budget_s is None else budget_s
        best = trivial
        rounds = added_here = 0
        closed = False
        complete = True
        lp_value = trivial
        while True:
            lp = solve_lp(self.cluster, self.deployments, self.columns, self.weights, tier, placed_floor, self.pins)
            lp_value = lp.value
            if lp.value >= trivial - TOLERANCE * max(1.0, trivial):
                # The columns already reach the trivial bound: so does the LP over all layouts.
                closed = True
                break
            remaining = deadline - time.perf_counter()
            if remaining <= 0.05:
                break
            priced = self._price_all(lp.prices, self._task_limit(budget))
            rounds += 1
            bound = min(self._lagrangian(tier, lp, priced, placed_floor), self._lp_bound(tier, lp, priced))
            complete = complete and all(result.complete for result in priced)
            if bound < best:
                best = bound
            new = self._add_columns(tier, lp, priced)
            added_here += new
            if new == 0:
                closed = all(result.proven for result in priced)
                break
            if rounds >= self.config.max_pricing_rounds:
                break
        return Bound(
            tier=tier,
            value=best,
            over_all_layouts=complete,
            closed=closed,
            lp_value=lp_value,
            rounds=rounds,
            columns_added=added_here,
            placed_floor=placed_floor,
        )


def reached(tier: str, trivial: float, placed_floor: float = 0.0) -> Bound:
    """The bound of a tier whose plan reaches its trivial bound (every replica placed, every layer
    on GPUs): no LP or pricing is needed to prove it over all layouts."""
    return Bound(
        tier=tier,
        value=trivial,
        over_all_layouts=True,
        closed=True,
        lp_value=trivial,
        rounds=0,
        columns_added=0,
        placed_floor=placed_floor,
    )


def gap_of(value: int, bound: float) -> float:
    """Relative gap of an integral tier value to its bound; 0 when no integer lies between them."""
    if bound - value < 1 - TOLERANCE * max(1.0, abs(bound)):
        return 0.0
    return (bound - value) / max(1.0, abs(bound))


def tier_bound(bound: Bound, value: int) -> TierBound:
    """The plan's value against a column-generation bound (never above the trivial one)."""
    tier_gap = gap_of(value, bound.value)
    return TierBound(
        tier=bound.tier,
        unit=UNITS[bound.tier],
        value=value,
        bound=bound.value,
        gap=tier_gap,
        proven=tier_gap == 0.0,
        over="all layouts" if bound.over_all_layouts else "candidates",
        closed=bound.closed,
        placed_floor=round(bound.placed_floor),
        rounds=bound.rounds,
        columns_added=bound.columns_added,
    )


def trivial_bounds(
    deployments: Sequence[Deployment], profiles: Mapping[str, MemoryProfile], weights: Mapping[str, int]
) -> tuple[float, float]:
    """Every replica placed, with every layer on GPUs: no plan does better on the first two tiers."""
    placed = sum(weights[d.name] * d.replicas for d in deployments)
    layers = sum(profiles[d.name].n_layers * d.replicas for d in deployments)
    return float(placed), float(layers)
