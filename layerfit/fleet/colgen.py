"""Column generation: the master's LP relaxation, priced over every layout, for a true bound.

For one tier (``lp``: priority weight placed; layers on GPUs; replicas kept, for the moves tier;
minus the GPUs and workers used), with the earlier tiers' values as floors, the LP relaxation of
the master over the current columns is solved with GLOP. Its duals price every GPU's VRAM, every
worker's RAM or pool, the floors, and on the GPUs tier every GPU and worker a layout opens;
pricing (``pricing``) then finds, per group of identical deployments, the layout with the best
reduced cost over every valid layout. Columns with a positive reduced cost join, and the LP is
solved again, until none is left or the budget runs out.

Every round gives a bound that holds for every integer plan (``lp``: the Lagrangian at the LP's
duals, and the LP's value plus replicas times each deployment's best reduced cost); the smallest
is kept. A pricing problem cut short contributes CP-SAT's own bound on its best value, so a round
cut short still gives a valid bound. When no column has a positive reduced cost it meets the LP's
value: the LP bound over all layouts. The LP works in exact bytes (MiB as fractions), so the bound
holds for the byte-exact problem, not only for the master's MiB-rounded one.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.fleet import MAXIMISED_TIERS, FleetConfig, TierBound
from layerfit.domain.layout import Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import SolverError
from layerfit.fleet.candidates import CandidateSet, identical_groups
from layerfit.fleet.executors import run_shared
from layerfit.fleet.gaps import UNITS, gap
from layerfit.fleet.gaps import tier_bound as gap_bound
from layerfit.fleet.lp import GPUS, LAYERS, MOVES, PLACED, Fleetwide, Goal, LpSolution, solve_lp
from layerfit.fleet.prices import Prices, claim_value
from layerfit.fleet.pricing import Priced, PricingTask, build_cost, pricing_task, relaxed_answer

__all__ = ["GPUS", "LAYERS", "MOVES", "PLACED", "Bound", "ColumnGeneration", "Goal"]

TOLERANCE = 1e-6
"""Reduced costs below this (relative to the deployment's value) count as zero."""
BUILD_SHARE = 0.5
"""Share of a round's budget the pricing problems' model builds may take."""
RETRY_FACTOR = 4.0
"""A round that adds no column prices the problems it cut short again with this much more time."""


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
    goal: Goal


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
        current: Mapping[str, Counter[Layout]] | None = None,
    ) -> None:
        self.groups = identical_groups(deployments, profiles)
        self.fleet = Fleetwide(cluster, deployments, weights, self.groups, pins or {}, current or {})
        self.cluster = cluster
        self.deployments = deployments
        self.profiles = profiles
        self.columns = [list(options) for options in columns]
        self.known = [{layout for layout, _ in options} for options in columns]
        self.config = config
        self.planner_config = planner_config
        self.added = 0
        self.work_s = 0.0
        """Deterministic seconds the pricing problems took, over every run."""

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

    def _settled(self, lp: LpSolution, g: int, result: Priced) -> bool:
        """Pricing has nothing left to find for the group: its best is proven, or no layout is
        worth more than a replica's multiplier (no column with a positive reduced cost)."""
        if result.proven:
            return True
        return all(
            lp.constants[d] + result.bound <= lp.replica_duals[d] + TOLERANCE * max(1.0, abs(lp.replica_duals[d]))
            for d in self.groups[g]
        )

    def _screened(self, lp: LpSolution, g: int, deadline: float) -> tuple[Priced, bool]:
        """The group's answer without a search, and whether it settles the group: the known
        columns or the relaxation in bytes (``pricing_bound``); past ``deadline`` (``perf_counter``)
        the trivial bound (every layer, nothing paid)."""
        group = self.groups[g]
        known = self._known_best(group, lp.prices[g])
        if known is not None:
            return known, True
        deployment = self.deployments[group[0]]
        profile = self.profiles[deployment.name]
        if time.perf_counter() >= deadline:
            return Priced(layouts=(), bound=lp.prices[g].layer_value * profile.n_layers, proven=False), False
        relaxed = relaxed_answer(self.cluster, deployment, profile, lp.prices[g])
        return relaxed, self._settled(lp, g, relaxed)

    def _price_all(
        self,
        lp: LpSolution,
        budget_s: float,
        deadline: float,
        earlier: Sequence[Priced] = (),
        builds_s: float | None = None,
    ) -> tuple[list[Priced], float]:
        """Every group's pricing problem, those the screen settles without a search; with
        ``earlier`` results of the same LP, only those not settled are solved again. Also each
        search's deterministic limit. Building a model is charged (``pricing.build_cost``): only
        the problems, in order, whose builds fit in ``builds_s`` (default ``BUILD_SHARE`` of
        ``budget_s``) are searched (on 30,000 GPUs one build takes 11-22 s), the others keep the
        relaxation's answer."""
        screened = [
            (earlier[g], True) if earlier and self._settled(lp, g, earlier[g]) else self._screened(lp, g, deadline)
            for g in range(len(self.groups))
        ]
        unsettled = [g for g, (_, settled) in enumerate(screened) if not settled]
        limit = self._task_limit(budget_s, len(unsettled))
        searched, builds = [], 0.0
        allowed = BUILD_SHARE * budget_s if builds_s is None else builds_s
        for g in unsettled:
            build = build_cost(self.cluster, self.deployments[self.groups[g][0]])
            if builds + build > allowed:
                break
            searched.append(g)
            builds += build
        until = time.time() + (deadline - time.perf_counter())  # the tasks may run in other processes
        tasks: list[PricingTask] = [
            (
                self.deployments[self.groups[g][0]],
                self.profiles[self.deployments[self.groups[g][0]].name],
                self.planner_config,
                lp.prices[g],
                limit,
                until,
            )
            for g in searched
        ]
        results = run_shared(pricing_task, self.cluster, tasks, self.config)
        self.work_s += sum(result.work_s for result in results) + builds
        found = dict(zip(searched, results, strict=True))
        return [found.get(g, answer) for g, (answer, _) in enumerate(screened)], limit

    def _task_limit(self, budget_s: float, problems: int) -> float:
        """Each pricing problem's share of a round's budget, as if the ``problems`` left after the
        screen ran one after another. The budget is nominal (from the configuration, not the
        clock) and the share does not depend on the executor's processes, so that the same input
        prices the same on every executor and under any load (a pool only finishes sooner); the
        deadline still ends the rounds."""
        return max(0.05, min(self.config.pricing_time_limit_s, budget_s / max(1, problems)))

    def _all_settled(self, lp: LpSolution, priced: Sequence[Priced]) -> bool:
        return all(self._settled(lp, g, result) for g, result in enumerate(priced))

    def _best_values(self, lp: LpSolution, priced: Sequence[Priced]) -> list[float]:
        """Per deployment: no replica on any layout is worth more under the multipliers (a current
        layout also earns its kept row's multiplier, which pricing leaves out)."""
        best = [0.0] * len(self.deployments)
        for g, (group, result) in enumerate(zip(self.groups, priced, strict=True)):
            for d in group:
                value = lp.constants[d] + result.bound
                for layout, claims in self.columns[d]:
                    if layout in lp.kept_duals[d]:
                        value = max(value, lp.column_value(self.fleet, d, g, layout, claims))
                best[d] = value
        return best

    def _round_bound(self, lp: LpSolution, priced: Sequence[Priced]) -> float:
        """The smaller of the Lagrangian at the LP's multipliers (valid for any) and the LP's value
        plus replicas times the best reduced cost (valid with pins, which the Lagrangian leaves out)."""
        best = self._best_values(lp, priced)
        replicas = [d.replicas for d in self.deployments]
        lagrangian = lp.fixed + sum(r * max(0.0, b) for r, b in zip(replicas, best, strict=True))
        farley = lp.value + sum(r * max(0.0, b - u) for r, b, u in zip(replicas, best, lp.replica_duals, strict=True))
        return min(lagrangian, farley)

    def _add_columns(self, lp: LpSolution, priced: Sequence[Priced]) -> int:
        added = 0
        for g, (group, result) in enumerate(zip(self.groups, priced, strict=True)):
            for d in group:
                for layout, claims in result.layouts:
                    value = lp.column_value(self.fleet, d, g, layout, claims)
                    reduced = value - lp.replica_duals[d]
                    if reduced > TOLERANCE * max(1.0, abs(value)) and layout not in self.known[d]:
                        self.known[d].add(layout)
                        self.columns[d].append((layout, claims))
                        added += 1
        self.added += added
        return added

    def run(self, goal: Goal, deadline: float, trivial: float, budget_s: float | None = None) -> Bound:
        """Rounds of LP and pricing until no column is added, ``deadline`` (``perf_counter``) passes
        or, with ``budget_s``, the pricing problems' deterministic time adds up to it (the same
        on every run and executor). ``budget_s`` (default: the time to the deadline) also sizes
        each round's pricing problems."""
        budget = deadline - time.perf_counter() if budget_s is None else budget_s
        spent_before = self.work_s

        def spent() -> bool:
            return budget_s is not None and self.work_s - spent_before >= budget_s

        best = trivial
        rounds = added_here = 0
        closed = False
        complete = True
        lp_value = trivial
        while True:
            try:
                lp = solve_lp(self.fleet, self.columns, goal, max(0.0, deadline - time.perf_counter()))
            except SolverError:
                break  # no LP within the deadline: the bound so far (trivial, or earlier rounds') stands
            lp_value = lp.value
            if lp.value >= trivial - TOLERANCE * max(1.0, abs(trivial)):
                # The columns already reach the trivial bound: so does the LP over all layouts.
                closed = True
                break
            remaining = deadline - time.perf_counter()
            if remaining <= 0.05 or spent():
                break
            budget_round = budget
            left = budget - (self.work_s - spent_before)
            priced, limit = self._price_all(lp, budget_round, deadline, (), BUILD_SHARE * max(0.0, left))
            rounds += 1
            new = self._add_columns(lp, priced)
            while new == 0 and not self._all_settled(lp, priced) and limit < self.config.pricing_time_limit_s:
                if deadline - time.perf_counter() <= 0.05 or spent():
                    break
                # No column and some problems cut short: those again, with more time, while the
                # deadline allows (the same LP, so the settled ones stand).
                complete = complete and all(result.complete for result in priced)
                best = min(best, self._round_bound(lp, priced))
                budget_round *= RETRY_FACTOR
                # a retry's searches get more time each; its builds only what is left of the budget
                left = budget - (self.work_s - spent_before)
                priced, limit = self._price_all(lp, budget_round, deadline, priced, BUILD_SHARE * max(0.0, left))
                rounds += 1
                new = self._add_columns(lp, priced)
            complete = complete and all(result.complete for result in priced)
            best = min(best, self._round_bound(lp, priced))
            added_here += new
            if new == 0:
                closed = self._all_settled(lp, priced)
                break
            if rounds >= self.config.max_pricing_rounds:
                break
        return Bound(
            tier=goal.tier,
            value=best,
            over_all_layouts=complete,
            closed=closed,
            lp_value=lp_value,
            rounds=rounds,
            columns_added=added_here,
            goal=goal,
        )


def reached(goal: Goal, trivial: float) -> Bound:
    """The bound of a tier whose plan reaches its trivial bound (every replica placed, every layer
    on GPUs, every current replica kept): no LP or pricing is needed to prove it over all layouts."""
    return Bound(
        tier=goal.tier,
        value=trivial,
        over_all_layouts=True,
        closed=True,
        lp_value=trivial,
        rounds=0,
        columns_added=0,
        goal=goal,
    )


def tier_bound(
    bound: Bound,
    count: int,
    reported: float | None = None,
    candidates_bound: float | None = None,
    moved_ceiling: int | None = None,
) -> TierBound:
    """The plan's count on the tier, in the tier's own units, against a column-generation bound;
    ``reported``: the bound in those units where the LP's differ (moves: the LP counts replicas
    kept; GPUs: it counts ``GPUs x (workers + 1) + workers``)."""
    goal = bound.goal
    over: Literal["all layouts", "candidates"] = "all layouts" if bound.over_all_layouts else "candidates"
    value = bound.value if reported is None else reported
    maximised = goal.tier in MAXIMISED_TIERS
    proven = gap(count, value, maximised) == 0.0  # no integer beats the count
    base = gap_bound(goal.tier, UNITS[goal.tier], count, value, maximised, proven, over)
    return base.model_copy(
        update={
            "closed": bound.closed,
            "placed_floor": round(goal.placed_floor) if goal.tier != PLACED else 0,
            "layers_floor": round(goal.layers_floor) if goal.tier in (MOVES, GPUS) else 0,
            "moved_ceiling": moved_ceiling,
            "candidates_bound": candidates_bound,
            "rounds": bound.rounds,
            "columns_added": bound.columns_added,
        }
    )


def trivial_bounds(
    deployments: Sequence[Deployment], profiles: Mapping[str, MemoryProfile], weights: Mapping[str, int]
) -> tuple[float, float]:
    """Every replica placed, with every layer on GPUs: no plan does better on the first two tiers."""
    placed = sum(weights[d.name] * d.replicas for d in deployments)
    layers = sum(profiles[d.name].n_layers * d.replicas for d in deployments)
    return float(placed), float(layers)
