"""The fleet's candidates: every deployment's layouts (one task per group of identical
deployments, on the configured executor), and the one-at-a-time seed that joins them."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence

from layerfit.deadline import Deadline
from layerfit.domain.config import PlannerConfig
from layerfit.domain.fleet import Fleet, FleetConfig
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Reason, ReasonKind, Severity
from layerfit.domain.profile import MemoryProfile
from layerfit.fleet.candidates import CandidateSet, GroupTask, group_task, identical_groups, valid_candidates
from layerfit.fleet.executors import run_tasks
from layerfit.fleet.sequential import heuristic_layout, plan_sequential


def fleet_candidates(
    fleet: Fleet,
    profiles: Mapping[str, MemoryProfile],
    config: FleetConfig,
    planner_config: PlannerConfig,
    deadline: Deadline | None = None,
) -> tuple[list[CandidateSet], list[str]]:
    """Every deployment's candidates, one task per group of identical deployments; and the
    deployments whose candidates were cut short at ``deadline`` (no multi-GPU or planner layouts
    looked for past it)."""
    current_layouts: dict[str, list[Layout]] = defaultdict(list)
    for placement in fleet.current:
        current_layouts[placement.deployment].append(placement.layout)
    groups = identical_groups(fleet.deployments, profiles)
    # time.time(), not the deadline's perf_counter: the tasks may run in other processes
    until = None if deadline is None else time.time() + deadline.remaining()
    tasks: list[GroupTask] = []
    for group in groups:
        first = fleet.deployments[group[0]]
        members = tuple(
            (tuple(dict.fromkeys(current_layouts[fleet.deployments[d].name])), d, fleet.deployments[d].replicas)
            for d in group
        )
        limit = config.max_single_gpu_candidates
        tasks.append((fleet.cluster, first, profiles[first.name], planner_config, members, limit, until))
    found: list[CandidateSet] = [()] * len(fleet.deployments)
    cut: list[str] = []
    for group, (sets, cut_short) in zip(groups, run_tasks(group_task, tasks, config), strict=True):
        for d, options in zip(group, sets, strict=True):
            found[d] = options
        cut += [fleet.deployments[d].name for d in group] if cut_short else []
    return found, cut


def cut_candidates(cut: Sequence[str]) -> tuple[str, tuple[Reason, ...]]:
    """What the plan says of candidate generation: ``complete``, or cut short at its deadline."""
    if not cut:
        return "complete", ()
    named = ", ".join(cut[:5]) + (f" and {len(cut) - 5} more" if len(cut) > 5 else "")
    message = (
        f"candidate generation reached its share of the time limit: for {len(cut)} deployments ({named}) "
        "only their current and single-GPU layouts (and those column generation and the one-at-a-time seed "
        "find) are candidates; a larger time_limit_s gives them their multi-GPU and distributed layouts"
    )
    reason = Reason(kind=ReasonKind.STRATEGY_SKIPPED, resource="time_limit_s", severity=Severity.INFO, message=message)
    return f"cut short at the deadline for {len(cut)} deployments", (reason,)


def with_sequential_seed(
    fleet: Fleet,
    profiles: Mapping[str, MemoryProfile],
    candidates: list[CandidateSet],
    config: FleetConfig,
    planner_config: PlannerConfig,
    deadline: Deadline | None = None,
) -> tuple[list[CandidateSet], list[tuple[str, Layout]], bool]:
    """One at a time, GPUStack's way: its layouts join the candidates and its assignment is one of
    the starting solutions, so the joint plan is never behind it on the tiers. Past ``deadline`` the
    replicas left are not tried (the last value: whether every replica was)."""
    if config.sequential_seed is None:
        return candidates, [], True
    seed_config = planner_config.model_copy(update={"policy": config.sequential_seed})
    placed, _ = plan_sequential(
        fleet, lambda c, d, p: heuristic_layout(c, d, p, seed_config, deadline), profiles, deadline
    )
    complete = deadline is None or not deadline.expired()
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
