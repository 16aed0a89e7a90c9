"""The fleet's candidates: every deployment's layouts (one task per group of identical
deployments, on the configured executor), and the one-at-a-time seed that joins them."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence

from layerfit.budget.fleet import COLUMN_S, SEED_PER_GPU_S, Budget
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.fleet import Fleet, FleetConfig
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Reason, ReasonKind, Severity
from layerfit.domain.profile import MemoryProfile
from layerfit.fleet.candidates import (
    Allowance,
    CandidateSet,
    GroupTask,
    budgeted_candidates,
    host_demand,
    identical_groups,
    needed_layouts,
    valid_candidates,
)
from layerfit.fleet.executors import run_shared
from layerfit.fleet.gpu_table import GpuTable
from layerfit.fleet.sequential import heuristic_layout, plan_sequential

SINGLES_SHARE = 0.5
"""Share of candidate generation's budget for the single-GPU layouts beyond what each deployment needs."""
SEED_STAGE = "the one-at-a-time seed"
SEED_GUARD = 2.0
"""A replica is not placed one at a time with less than this many times its nominal cost left
on the clock (the heuristic took 40 µs per GPU on 30,000 GPUs, against 25 µs counted)."""
PLANNER_STAGE = "the single-deployment planner's layouts (its time limit, PlannerConfig.time_limit_s)"


def fleet_candidates(
    fleet: Fleet,
    profiles: Mapping[str, MemoryProfile],
    config: FleetConfig,
    planner_config: PlannerConfig,
    budget: Budget | None = None,
) -> tuple[list[CandidateSet], list[str]]:
    """Every deployment's candidates, one task per group of identical deployments; and the
    deployments whose candidates were cut short by ``budget`` (no more multi-GPU or planner layouts
    looked for). Each group gets a part of the budget in proportion to what it may need, so that
    the cut is the same on every executor and under any load; the wall clock is a safety stop, and
    so is the single-deployment planner's own time limit (``PLANNER_STAGE`` when it cut a search)."""
    current_layouts: dict[str, list[Layout]] = defaultdict(list)
    for placement in fleet.current:
        current_layouts[placement.deployment].append(placement.layout)
    groups = identical_groups(fleet.deployments, profiles)
    # time.time(), not the deadline's perf_counter: the tasks may run in other processes
    until = None if budget is None else time.time() + budget.deadline.remaining()
    limit = config.max_single_gpu_candidates
    table = GpuTable.cached(fleet.cluster)
    replicas = [deployment.replicas for deployment in fleet.deployments]
    # the single-GPU layouts are not charged (as before budgets), only kept within the budget's share
    quotas = single_quotas(replicas, limit, None if budget is None else budget.left() * SINGLES_SHARE)
    final = None if budget is None else time.time() + budget.final().remaining()
    firsts = [fleet.deployments[group[0]] for group in groups]
    demands = [
        host_demand(first, profiles[first.name], [quotas[d] for d in group], table)
        for first, group in zip(firsts, groups, strict=True)
    ]
    scale = 1.0 if budget is None else min(1.0, budget.left() / max(1e-9, sum(demands)))
    tasks: list[GroupTask] = []
    for group, first, demand in zip(groups, firsts, demands, strict=True):
        members = tuple(
            (tuple(dict.fromkeys(current_layouts[fleet.deployments[d].name])), d, replicas[d], quotas[d])
            for d in group
        )
        allowance = Allowance(math.inf if budget is None or scale >= 1.0 else demand * scale, until, final)
        tasks.append((first, profiles[first.name], planner_config, members, allowance))
    found: list[CandidateSet] = [()] * len(fleet.deployments)
    cut: list[str] = []
    results = run_shared(budgeted_candidates, (fleet.cluster, table), tasks, config)
    for group, (sets, allowance) in zip(groups, results, strict=True):
        for d, options in zip(group, sets, strict=True):
            found[d] = options
        cut += [fleet.deployments[d].name for d in group] if allowance.cut or allowance.stopped else []
        if allowance.stopped and budget is not None:
            budget.safety_stop("candidate generation")
        if allowance.planner_cut and budget is not None:
            budget.safety_stop(PLANNER_STAGE)
    if budget is not None:
        budget.spend(min(budget.left(), sum(demands)))
    return found, cut


def single_quotas(replicas: Sequence[int], limit: int, budget_s: float | None) -> list[int]:
    """The single-GPU layouts each deployment gets (each also looks at as many multi-GPU hosts):
    ``limit`` where ``budget_s`` affords every one at ``COLUMN_S`` (or without a budget, or with
    no cap: 0), else what each needs (``needed_layouts``) and the same share of the rest for all."""
    if budget_s is None or limit <= 0:
        return [limit] * len(replicas)
    floors = [needed_layouts(r, limit) for r in replicas]
    rest = sum(limit - floor for floor in floors) * COLUMN_S
    share = 1.0 if rest <= 0 else min(1.0, max(0.0, (budget_s - COLUMN_S * sum(floors)) / rest))
    return [floor + int((limit - floor) * share) for floor in floors]


def cut_candidates(cut: Sequence[str]) -> tuple[str, tuple[Reason, ...]]:
    """What the plan says of candidate generation: ``complete``, or cut short at its share of the time limit."""
    if not cut:
        return "complete", ()
    named = ", ".join(cut[:5]) + (f" and {len(cut) - 5} more" if len(cut) > 5 else "")
    message = (
        f"candidate generation reached its share of the time limit: for {len(cut)} deployments ({named}) "
        "only their current and single-GPU layouts (and those column generation and the one-at-a-time seed "
        "find) are candidates; a larger time_limit_s gives them their multi-GPU and distributed layouts"
    )
    reason = Reason(kind=ReasonKind.STRATEGY_SKIPPED, resource="time_limit_s", severity=Severity.INFO, message=message)
    return f"cut short at its share of the time limit for {len(cut)} deployments", (reason,)


def with_sequential_seed(
    fleet: Fleet,
    profiles: Mapping[str, MemoryProfile],
    candidates: list[CandidateSet],
    config: FleetConfig,
    planner_config: PlannerConfig,
    budget: Budget | None = None,
) -> tuple[list[CandidateSet], list[tuple[str, Layout]], bool]:
    """One at a time, GPUStack's way: its layouts join the candidates and its assignment is one of
    the starting solutions, so the joint plan is never behind it on the tiers. Once ``budget`` is
    spent (each replica costs the same, by the cluster's size) or its safety stop fires, the
    replicas left are not tried (the last value: whether every replica was)."""
    if config.sequential_seed is None:
        return candidates, [], True
    seed_config = planner_config.model_copy(update={"policy": config.sequential_seed})
    cost = SEED_PER_GPU_S * sum(len(worker.gpus) for worker in fleet.cluster.workers)
    skipped: list[str] = []

    def seed_layout(cluster: Cluster, deployment: Deployment, profile: MemoryProfile) -> Layout | None:
        if budget is not None and (not budget.affords(cost) or budget.expired(SEED_STAGE)):
            skipped.append(deployment.name)
            return None
        if budget is not None and budget.deadline.remaining() < SEED_GUARD * cost:  # would end past its deadline
            budget.safety_stop(SEED_STAGE)
            skipped.append(deployment.name)
            return None
        if budget is not None:
            budget.spend(cost)
        layout = heuristic_layout(
            cluster, deployment, profile, seed_config, None if budget is None else budget.deadline
        )
        if budget is not None:
            budget.expired(SEED_STAGE)  # the heuristic may have been cut short by the clock
        return layout

    placed, _ = plan_sequential(fleet, seed_layout, profiles)
    complete = not skipped
    seed = [(p.deployment, p.layout) for p in placed]
    extra: dict[str, list[Layout]] = defaultdict(list)
    for name, layout in seed:
        extra[name].append(layout)
    joined = [
        (
            *options,
            *valid_candidates(
                fleet.cluster,
                d,
                profiles[d.name],
                planner_config,
                [lay for lay in extra[d.name] if lay not in dict(options)],
            ),
        )
        for d, options in zip(fleet.deployments, candidates, strict=True)
    ]
    return joined, seed, complete
