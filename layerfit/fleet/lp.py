"""The master's LP relaxation for one tier over the current columns, its duals as prices, and
what a bound over all layouts needs from them.

Every tier is a maximisation: priority weight placed, layers on GPUs, replicas kept (the moves
tier: replicas moved = replicas with a current placement less those kept) and minus the GPUs and
workers used (the GPUs tier: ``GPUs * (workers + 1) + workers``). Every row is ``<=``, so every
multiplier is non-negative:

* per deployment, its replicas at most its count (the domain of its columns in the bound);
* per GPU and per worker's RAM or pool, the claims at most the capacity (on the GPUs tier: the
  capacity times the resource's opened variable);
* the earlier tiers' values as floors: weight placed, layers on GPUs, replicas kept;
* replicas kept on a current layout at most those on it (only current layouts keep one);
* the GPUs tier: per group of identical deployments and GPU (or worker), the group's replicas
  that use it at most its replicas times the opened variable; a GPU opened only with its worker.

A column's value under the multipliers is its tier value, plus the floors' multipliers times
its weight and layers, less the priced claims and opening prices (``pricing.claim_value``), plus
a kept row's multiplier for a current layout. For any multipliers, no integer plan (pins
included: they only restrict it) beats the Lagrangian

    sum of multiplier * right-hand side + sum over the other variables of their best term
    + sum over deployments of replicas * max(0, best column value over every layout),

and with the LP's own duals the LP's value plus replicas times each deployment's best reduced
cost bounds the LP over all layouts (pins included). Rows no known column enters are left out:
their multiplier is zero, and so is their part of both bounds.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ortools.linear_solver import pywraplp

from layerfit.domain.base import MiB
from layerfit.domain.cluster import Cluster
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Claims, Layout
from layerfit.errors import SolverError
from layerfit.fleet.master import ResourceKey, capacity_bytes, claim_bytes, gpu_weight
from layerfit.fleet.prices import Prices, claim_value

PLACED = "priority weight placed"
LAYERS = "layers on GPUs"
MOVES = "replicas moved"
GPUS = "GPUs and workers used"

Columns = Sequence[Sequence[tuple[Layout, Claims]]]


@dataclass(frozen=True)
class Goal:
    """The tier to maximise and the earlier tiers' values it keeps."""

    tier: str
    placed_floor: float = 0.0
    layers_floor: float = 0.0
    kept_floor: float = 0.0


@dataclass(frozen=True)
class Fleetwide:
    """What the LP needs besides the columns."""

    cluster: Cluster
    deployments: Sequence[Deployment]
    weights: Mapping[str, int]
    groups: Sequence[Sequence[int]]
    pins: Mapping[str, Mapping[Layout, int]] = field(default_factory=dict)
    current: Mapping[str, Counter[Layout]] = field(default_factory=dict)
    """Replicas per current layout, per deployment (only replicas the deployment still has)."""


@dataclass(frozen=True)
class LpSolution:
    value: float
    prices: tuple[Prices, ...]
    """Per group of identical deployments (opening prices differ between groups)."""
    constants: tuple[float, ...]
    """Per deployment: a replica's value apart from its layout (tier weight, floors' multipliers)."""
    replica_duals: tuple[float, ...]
    kept_duals: tuple[Mapping[Layout, float], ...]
    """Per deployment: the kept row's multiplier of each current layout."""
    fixed: float
    """The Lagrangian's part that does not depend on the columns."""

    def column_value(self, fleet: Fleetwide, d: int, group: int, layout: Layout, claims: Claims) -> float:
        """A replica of deployment ``d`` on this layout, under the multipliers."""
        base = self.constants[d] + claim_value(fleet.cluster, self.prices[group], layout, claims)
        return base + self.kept_duals[d].get(layout, 0.0)


def exact_capacities(cluster: Cluster) -> dict[ResourceKey, float]:
    return {key: n_bytes / MiB for key, n_bytes in capacity_bytes(cluster).items()}


def _opened(claims: Claims) -> list[ResourceKey]:
    """The GPUs and workers a layout uses at all."""
    gpus: list[ResourceKey] = list(dict.fromkeys((d.worker, d.gpu_index) for d in claims.devices))
    return [*gpus, *dict.fromkeys(claim.worker for claim in claims.workers)]


CHECK_EVERY = 256
"""Columns between two looks at the deadline while the LP is built."""


class _Builder:
    """One LP: rows as ``<=`` with their right-hand sides, and the non-column variables' terms.

    Coefficients are set one by one (GLOP's natural API took 2.5 s for an LP of 4,400 columns
    on 23,600 GPUs), and the build stops with ``SolverError`` at ``deadline`` (``perf_counter``)."""

    def __init__(self, fleet: Fleetwide, goal: Goal, deadline: float = math.inf) -> None:
        solver = pywraplp.Solver.CreateSolver("GLOP")
        if solver is None:
            raise SolverError("the GLOP linear solver is not available")
        self.solver, self.fleet, self.goal, self.deadline = solver, fleet, goal, deadline
        self.vars: list[pywraplp.Variable] = []
        self.rows: dict[object, dict[int, float]] = {}
        self.rhs: dict[object, float] = {}
        self.extra: list[tuple[float, float, list[tuple[object, float]]]] = []
        """Non-column variables: objective, upper bound, (row, coefficient) terms."""
        self.objective: dict[int, float] = {}

    def new_var(self, low: float, high: float, objective: float) -> int:
        self.vars.append(self.solver.NumVar(low, high, ""))
        self.objective[len(self.vars) - 1] = objective
        return len(self.vars) - 1

    def term(self, row: object, coefficient: float, var: int) -> None:
        terms = self.rows.setdefault(row, {})
        terms[var] = terms.get(var, 0.0) + coefficient

    def variable(self, upper: float, objective: float, terms: list[tuple[object, float]]) -> None:
        var = self.new_var(0.0, upper, objective)
        for row, coefficient in terms:
            self.term(row, coefficient, var)
        self.extra.append((objective, upper, terms))

    def check(self) -> None:
        if time.perf_counter() >= self.deadline:
            raise SolverError(f"the LP relaxation of the fleet master ({self.goal.tier}) was not built in time")

    def constraint(self, terms: Mapping[int, float], rhs: float) -> pywraplp.Constraint:
        constraint = self.solver.Constraint(-self.solver.infinity(), rhs)
        for var, coefficient in terms.items():
            constraint.SetCoefficient(self.vars[var], coefficient)
        return constraint

    def columns(self, columns: Columns) -> list[pywraplp.Constraint | None]:
        """The column variables, their terms, and each deployment's replica row."""
        fleet, goal = self.fleet, self.goal
        group_of = {d: g for g, members in enumerate(fleet.groups) for d in members}
        replica_rows: list[pywraplp.Constraint | None] = []
        built = 0
        for d, (deployment, options) in enumerate(zip(fleet.deployments, columns, strict=True)):
            built += len(options)
            if built >= CHECK_EVERY:
                built = 0
                self.check()
            pinned = fleet.pins.get(deployment.name, {})
            now = fleet.current.get(deployment.name, Counter())
            weight = fleet.weights[deployment.name]
            row = []
            for layout, claims in options:
                low = float(min(pinned.get(layout, 0), deployment.replicas))
                # no upper bound of its own: the replica row implies it, and then carries its multiplier
                # (a column held at a bound of its own would leave its reduced cost in the bound)
                tier_value = weight if goal.tier == PLACED else layout.gpu_layers if goal.tier == LAYERS else 0
                var = self.new_var(low, self.solver.infinity(), float(tier_value))
                row.append(var)
                for key, n_bytes in claim_bytes(fleet.cluster, claims):
                    self.term(("capacity", key), n_bytes / MiB, var)
                self.term("placed", -float(weight), var)
                self.term("layers", -float(layout.gpu_layers), var)
                if goal.tier == GPUS:
                    for key in _opened(claims):
                        self.term(("open", group_of[d], key), 1.0, var)
                if now.get(layout, 0) and goal.tier in (MOVES, GPUS):
                    kept = ("kept", d, layout)
                    self.term(kept, -1.0, var)
                    self.variable(
                        min(now[layout], deployment.replicas),
                        float(goal.tier == MOVES),
                        [(kept, 1.0), ("kept floor", -1.0)],
                    )
            replica_rows.append(self.constraint(dict.fromkeys(row, 1.0), deployment.replicas) if row else None)
        return replica_rows

    def right_hand_sides(self) -> None:
        goal = self.goal
        capacity = exact_capacities(self.fleet.cluster)
        for row in self.rows:
            if isinstance(row, tuple) and row[0] == "capacity":
                self.rhs[row] = 0.0 if goal.tier == GPUS else capacity[row[1]]
            elif isinstance(row, tuple) and row[0] in ("kept", "open", "gpu in worker"):
                self.rhs[row] = 0.0
        floors = []
        if goal.tier != PLACED:
            floors.append(("placed", goal.placed_floor))
        if goal.tier in (MOVES, GPUS):
            floors.append(("layers", goal.layers_floor))
        if goal.tier == GPUS:
            floors.append(("kept floor", goal.kept_floor))
        for row, floor in floors:
            if floor > 0 and row in self.rows:
                self.rhs[row] = -floor

    def opened(self) -> None:
        """The GPUs tier's opened variables: one per GPU and worker some known column uses."""
        cluster = self.fleet.cluster
        capacity = exact_capacities(cluster)
        replicas = [sum(self.fleet.deployments[d].replicas for d in members) for members in self.fleet.groups]
        keys = dict.fromkeys(row[2] for row in self.rows if isinstance(row, tuple) and row[0] == "open")
        gpus_of: dict[str, list[ResourceKey]] = {}
        for gpu in keys:
            if isinstance(gpu, tuple):
                gpus_of.setdefault(gpu[0], []).append(gpu)
        for key in keys:
            self.check()
            terms: list[tuple[object, float]] = [(("capacity", key), -capacity[key])]
            terms += [(("open", g, key), -float(n)) for g, n in enumerate(replicas) if ("open", g, key) in self.rows]
            if isinstance(key, tuple):
                if key[0] in keys:  # every layout on a GPU runs a process on its worker
                    terms.append((("gpu in worker", key), 1.0))
                self.variable(1.0, -float(gpu_weight(cluster)), terms)
            else:
                terms += [(("gpu in worker", gpu), -1.0) for gpu in gpus_of.get(key, ())]
                self.variable(1.0, -1.0, terms)


def solve_lp(fleet: Fleetwide, columns: Columns, goal: Goal, time_limit_s: float | None = None) -> LpSolution:
    """The LP relaxation of one tier over ``columns`` (pins as lower bounds), with its multipliers.

    ``time_limit_s`` bounds GLOP's run; an LP not solved to optimality in it raises ``SolverError``.
    """
    started = time.perf_counter()
    deadline = math.inf if time_limit_s is None else started + time_limit_s
    builder = _Builder(fleet, goal, deadline)
    replica_rows = builder.columns(columns)
    if goal.tier == GPUS:
        builder.opened()
    builder.right_hand_sides()
    solver = builder.solver
    rows = builder.rows
    added = {row: builder.constraint(rows[row], rhs) for row, rhs in builder.rhs.items() if rows.get(row)}
    builder.check()
    objective = solver.Objective()
    for var, coefficient in builder.objective.items():
        if coefficient:
            objective.SetCoefficient(builder.vars[var], coefficient)
    objective.SetMaximization()
    if time_limit_s is not None:
        solver.SetTimeLimit(max(1, int((deadline - time.perf_counter()) * 1000)))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        raise SolverError(f"the LP relaxation of the fleet master ({goal.tier}) was not solved to optimality")
    duals = {row: max(0.0, constraint.dual_value()) for row, constraint in added.items()}
    return _solution(fleet, goal, builder, duals, solver.Objective().Value(), replica_rows)


def _solution(
    fleet: Fleetwide,
    goal: Goal,
    builder: _Builder,
    duals: Mapping[object, float],
    value: float,
    replica_rows: Sequence[pywraplp.Constraint | None],
) -> LpSolution:
    def dual(row: object) -> float:
        return duals.get(row, 0.0)

    gpu = {
        key[1]: v
        for key, v in duals.items()
        if isinstance(key, tuple) and key[0] == "capacity" and isinstance(key[1], tuple)
    }
    worker = {
        key[1]: v
        for key, v in duals.items()
        if isinstance(key, tuple) and key[0] == "capacity" and isinstance(key[1], str)
    }
    layer_value = float(goal.tier == LAYERS) + dual("layers")
    # each group's opening prices and each deployment's kept rows, in one pass over the duals
    opened: dict[int, dict[ResourceKey, float]] = defaultdict(dict)
    kept_rows: dict[int, dict[Layout, float]] = defaultdict(dict)
    for key, v in duals.items():
        if isinstance(key, tuple) and key[0] == "open":
            opened[key[1]][key[2]] = v
        elif isinstance(key, tuple) and key[0] == "kept":
            kept_rows[key[1]][key[2]] = v
    prices = []
    for g in range(len(fleet.groups)):
        opening = opened.get(g, {})
        prices.append(
            Prices(
                gpu=gpu,
                worker=worker,
                layer_value=layer_value,
                gpu_open={k: v for k, v in opening.items() if isinstance(k, tuple)},
                worker_open={k: v for k, v in opening.items() if isinstance(k, str)},
            )
        )
    constants = tuple(fleet.weights[d.name] * (float(goal.tier == PLACED) + dual("placed")) for d in fleet.deployments)
    kept = tuple(kept_rows.get(d, {}) for d in range(len(fleet.deployments)))
    fixed = sum(dual(row) * rhs for row, rhs in builder.rhs.items())
    for objective, upper, terms in builder.extra:
        reduced = objective - sum(dual(row) * coefficient for row, coefficient in terms)
        fixed += upper * max(0.0, reduced)
    return LpSolution(
        value=value,
        prices=tuple(prices),
        constants=constants,
        replica_duals=tuple(0.0 if row is None else max(0.0, row.dual_value()) for row in replica_rows),
        kept_duals=kept,
        fixed=fixed,
    )
