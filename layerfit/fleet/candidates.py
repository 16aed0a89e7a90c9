"""Candidate layouts for one deployment, each checked alone against the cluster.

Its current layouts; a single-GPU full offload on every GPU that can hold it (``single_gpu``); for the workers
with several GPUs, the fewest-GPU full offloads on that worker alone; and, when nothing fits on one
worker, the single-deployment planner's layouts over the whole cluster.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from layerfit.budget.deadline import Deadline
from layerfit.budget.fleet import HOST_LAYOUT_S, PLANNER_S
from layerfit.check import checked_claims
from layerfit.domain.cluster import Cluster, Worker
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.layout import Claims, Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.fleet.gpu_table import GpuTable
from layerfit.fleet.single_gpu import chosen_singles, fitting_gpus, multi_gpu_hosts, stratified
from layerfit.planning.layouts import worker_layouts

CandidateSet = tuple[tuple[Layout, Claims], ...]


def _planner_candidates(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, until: float | None
) -> tuple[CandidateSet, bool]:
    """The single-deployment planner's layouts over the whole cluster (distributed or partial),
    within its own time limit and the safety stop ``until`` (``time.time()``); and whether a time
    limit cut its search (``planner.time_cuts``: another run may find other layouts)."""
    from layerfit.planning.planner import plan as plan_one

    deadline = None if until is None else Deadline.after(until - time.time())
    result = plan_one(cluster, deployment, config, profile, explain=False, deadline=deadline)
    layouts = [c.layout for c in ([result.best] if result.best else []) + list(result.alternatives)]
    return valid_candidates(cluster, deployment, profile, config, layouts), bool(result.time_cuts)


Member = tuple[tuple[Layout, ...], int, int, int]
"""A deployment of a group: its current layouts, its offset among the GPUs, its replicas and the
most single-GPU (and multi-GPU host) layouts it gets."""
SPARE = 2
"""Beyond twice its replicas, the layouts a deployment gets whatever the budget (their work is
not optional: fewer leave replicas without a place)."""


def needed_layouts(replicas: int, limit: int) -> int:
    """The layouts a deployment of ``replicas`` gets whatever the work budget: twice its replicas
    and ``SPARE`` (the tightest half of the single-GPU layouts is the same for every deployment),
    at most ``limit`` (0: no cap)."""
    floor = 2 * replicas + SPARE
    return floor if limit <= 0 else min(limit, floor)


class _Shared:
    """What the candidates of identical deployments share, each piece computed once when first needed."""

    def __init__(
        self, cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, table: GpuTable
    ) -> None:
        self.cluster, self.deployment, self.profile, self.config = cluster, deployment, profile, config
        self.fitting = fitting_gpus(cluster, deployment, profile, config, table)
        self.hosts = [] if deployment.kind is ModelKind.IMAGE else multi_gpu_hosts(deployment, profile, table)
        self._on_host: dict[str, tuple[Layout, Claims] | None] = {}
        self._planner: CandidateSet | None = None
        self.singles: dict[int, tuple[Layout, Claims]] = {}

    def on_host(self, worker: Worker) -> tuple[Layout, Claims] | None:
        """The first valid fewest-GPU full offload on this worker alone."""
        if worker.name not in self._on_host:
            layouts = worker_layouts(worker, self.profile, self.config)
            self._on_host[worker.name] = _first_valid(self.cluster, self.deployment, self.profile, self.config, layouts)
        return self._on_host[worker.name]

    def has_host(self, worker: Worker) -> bool:
        return worker.name in self._on_host

    def has_planner(self) -> bool:
        return self._planner is not None

    def planner(self, allowance: Allowance) -> CandidateSet:
        """The planner's layouts (computed once); a time limit that cuts its search marks ``allowance``."""
        if self._planner is None:
            self._planner, cut = _planner_candidates(
                self.cluster, self.deployment, self.profile, self.config, allowance.until
            )
            allowance.planner_cut = allowance.planner_cut or cut
        return self._planner


@dataclass
class Allowance:
    """What one group's candidate generation may still do: ``work_s`` nominal seconds (each
    worker's multi-GPU layout and the planner's layouts at a fixed cost), and ``until``
    (``time.time()``, comparable across processes) as the wall-clock safety stop."""

    work_s: float = math.inf
    until: float | None = None
    final: float | None = None
    """``time.time()`` of the plan's own deadline: past it even the layouts a deployment needs
    are not looked for (it keeps its current ones), and ``stopped`` says so."""
    cut: bool = False
    """A layout was not looked for: the work budget was spent."""
    stopped: bool = False
    """A layout was not looked for: the safety stop fired first."""
    planner_cut: bool = False
    """A time limit (the planner's own, or the safety stop) cut the single-deployment planner's
    search short: its layouts may differ from run to run."""

    def take(self, cost_s: float) -> bool:
        """Whether an optional step of this cost may run (charged if so)."""
        if cost_s > self.work_s:
            self.cut = True
            return False
        if self.until is not None and time.time() >= self.until:
            self.stopped = True
            return False
        self.work_s -= cost_s
        return True

    def charge(self, cost_s: float) -> None:
        """A step that runs whatever is left."""
        self.work_s = max(0.0, self.work_s - cost_s)

    def past_final(self) -> bool:
        """The plan's deadline has passed (and ``stopped`` is set)."""
        if self.final is not None and time.time() >= self.final:
            self.stopped = True
            return True
        return False


def _member_candidates(shared: _Shared, member: Member, allowance: Allowance) -> CandidateSet:
    """The member's candidates: its current layouts and single-GPU ones (at most its quota); a
    multi-GPU layout per worker (then the planner's) while the allowance lasts, or whatever it
    costs while the deployment has fewer candidates than it needs (``needed_layouts``; for one
    that fits on one GPU, than replicas) or needs several GPUs. Past the plan's deadline
    (``allowance.final``) only its current layouts."""
    current, offset, replicas, quota = member
    found = list(valid_candidates(shared.cluster, shared.deployment, shared.profile, shared.config, current))
    if allowance.past_final():
        return tuple(dict(found).items())
    found += chosen_singles(shared.profile, shared.config, shared.fitting, quota, offset, shared.singles)
    fits_one_worker = bool(shared.fitting)
    needed = replicas if shared.fitting else needed_layouts(replicas, quota)
    for worker in stratified(shared.hosts, quota, offset):
        if not shared.has_host(worker):
            optional = len(found) >= needed
            if optional and not allowance.take(HOST_LAYOUT_S):
                continue
            if allowance.past_final():
                break
            if not optional:
                allowance.charge(HOST_LAYOUT_S)
        multi = shared.on_host(worker)
        if multi is not None:
            found.append(multi)
            fits_one_worker = True
    if not fits_one_worker:
        # Nothing fits fully on one worker: let the single-deployment planner find distributed or
        # partial layouts over the whole cluster.
        wanted = len(found) < replicas and not shared.has_planner()
        if wanted and not allowance.past_final():
            allowance.charge(PLANNER_S)
        elif wanted:
            wanted = False
        if wanted or shared.has_planner() or allowance.take(PLANNER_S):
            found += shared.planner(allowance)
    unique: dict[Layout, Claims] = {}
    for layout, claims in found:
        unique.setdefault(layout, claims)
    return tuple(unique.items())


def host_demand(deployment: Deployment, profile: MemoryProfile, quotas: Sequence[int], table: GpuTable) -> float:
    """Nominal seconds a group of identical deployments' candidates take at most, about (each
    member looks at up to its quota of workers, 0: every one)."""
    hosts = len(multi_gpu_hosts(deployment, profile, table))
    looked_at = hosts if any(q <= 0 for q in quotas) else min(hosts, sum(quotas))
    return HOST_LAYOUT_S * looked_at + (0.0 if hosts else PLANNER_S)


def group_candidates(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    members: Sequence[tuple[tuple[Layout, ...], int, int]],
    limit: int = 0,
    until: float | None = None,
    work_s: float = math.inf,
) -> tuple[tuple[CandidateSet, ...], bool]:
    """``generate_candidates`` for each of identical deployments (same profile and rules; each
    member its current layouts, its offset and its replicas), sharing the work: the fitting GPUs,
    each worker's multi-GPU layout and the planner's layouts; and whether any was cut short (by
    ``work_s``, or at ``until``: ``time.time()``). Each member gets up to ``limit`` single-GPU layouts."""
    quoted = tuple((*member, limit) for member in members)
    task = (deployment, profile, config, quoted, Allowance(work_s, until))
    sets, allowance = budgeted_candidates((cluster, GpuTable.of(cluster)), task)
    return sets, allowance.cut or allowance.stopped


GroupTask = tuple[Deployment, MemoryProfile, PlannerConfig, tuple[Member, ...], Allowance]
"""A group of identical deployments: the first one, its profile, the rules, the members and the allowance."""
Fleetside = tuple[Cluster, GpuTable]
"""What every group's task shares: the cluster, and its GPUs as arrays (sent once per process)."""


def budgeted_candidates(fleetside: Fleetside, task: GroupTask) -> tuple[tuple[CandidateSet, ...], Allowance]:
    """``group_candidates`` within the task's allowance, which comes back with what cut it short;
    past the plan's deadline every member keeps its current layouts only."""
    cluster, table = fleetside
    deployment, profile, config, members, allowance = task
    if allowance.past_final():
        return tuple(valid_candidates(cluster, deployment, profile, config, m[0]) for m in members), allowance
    shared = _Shared(cluster, deployment, profile, config, table)
    return tuple(_member_candidates(shared, member, allowance) for member in members), allowance


def generate_candidates(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    current: Sequence[Layout] = (),
    limit: int = 0,
    offset: int = 0,
) -> CandidateSet:
    """Valid layouts for one deployment, each fitting the cluster alone (see the module docstring).

    ``limit`` caps the single-GPU candidates (spread evenly over the GPUs, from ``offset``).
    """
    return group_candidates(cluster, deployment, profile, config, [(tuple(current), offset, 1)], limit)[0][0]


def _first_valid(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, layouts: Iterable[Layout]
) -> tuple[Layout, Claims] | None:
    for layout in layouts:
        reasons, claims = checked_claims(cluster, deployment, profile, layout, config)
        if not reasons and claims is not None:
            return layout, claims
    return None


def valid_candidates(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, layouts: Iterable[Layout]
) -> CandidateSet:
    """The distinct layouts that pass every check alone, with their claims."""
    seen: set[Layout] = set()
    valid: list[tuple[Layout, Claims]] = []
    for layout in layouts:
        if layout in seen:
            continue
        seen.add(layout)
        reasons, claims = checked_claims(cluster, deployment, profile, layout, config)
        if not reasons and claims is not None:
            valid.append((layout, claims))
    return tuple(valid)


def identical_groups(deployments: Sequence[Deployment], profiles: Mapping[str, MemoryProfile]) -> list[list[int]]:
    """Deployments whose layouts are the same (same profile and rules; names, replicas and
    priorities aside), by position: candidates and pricing do not depend on what sets them apart."""
    groups: dict[object, list[int]] = {}
    for d, deployment in enumerate(deployments):
        key = (
            profiles[deployment.name],
            deployment.model_copy(
                update={"name": "-", "replicas": 1, "priority": 0, "profile": None, "gguf_path": "-"}
            ),
        )
        groups.setdefault(key, []).append(d)
    return list(groups.values())
