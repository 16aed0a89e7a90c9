"""Why a deployment does not fit, and the smallest changes that would make it fit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from layerfit.budget.work import Work
from layerfit.check import check_layout
from layerfit.domain.base import format_bytes
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Plan, ReasonKind, Relaxation, Status
from layerfit.domain.profile import MemoryProfile
from layerfit.planning.layouts import single_gpu_layouts, worker_layouts

SCAN_LAYOUT_S = 250e-6
"""Nominal cost of checking one layout of the memory-to-free scan (``layerfit.budget.work``): about
210 us on 1,024 GPUs of 128 workers."""
WORK = "work"
DEADLINE = "deadline"

PlanFunction = Callable[[Cluster, Deployment, PlannerConfig, MemoryProfile], Plan]


@dataclass
class ExplainBudget:
    """The explain stage's work budget (``layerfit.budget.work``), split evenly over the plans it will make.

    ``next_work()`` gives the next relaxed plan its share (the work left over the plans still to
    come), or ``None`` once the work is spent or the safety stop has fired; a plan cut short
    (UNKNOWN) or a missing share marks the stage ``truncated`` (``work``, or ``deadline`` when the
    wall clock cut it: ``safety_stops``). The memory-to-free scan pays ``SCAN_LAYOUT_S`` a layout.
    """

    work: Work
    ctx_size: int
    plans: int = 0
    truncated: str = ""

    @property
    def expected_plans(self) -> int:
        """Two switches and the ctx bisection's steps, and one slice for the scan of memory to free."""
        return 3 + max(1, (self.ctx_size // _MIN_CTX).bit_length())

    @property
    def safety_stops(self) -> tuple[str, ...]:
        return (DEADLINE,) if self.truncated == DEADLINE else ()

    def _cut(self, limit: str) -> None:
        if not self.truncated or limit == DEADLINE:
            self.truncated = limit

    def _limit_hit(self) -> bool:
        """The work spent (checked first: the same on every run) or the safety stop fired; marks the cut."""
        if self.work.left() <= 0:
            self._cut(WORK)
        elif self.work.expired():
            self._cut(DEADLINE)
        else:
            return False
        return True

    def next_work(self) -> Work | None:
        if self._limit_hit():
            return None
        self.plans += 1
        return self.work.part(self.work.left() / max(1, self.expected_plans - self.plans + 1))

    def saw(self, status: Status, *, stopped: bool = False) -> None:
        """A relaxed plan's status; ``stopped``: the wall clock cut it."""
        if stopped:
            self._cut(DEADLINE)
        elif status is Status.UNKNOWN:
            self._cut(WORK)

    def next_layout(self) -> bool:
        """Whether the scan may check one more layout (and pay for it)."""
        if self._limit_hit():
            return False
        self.work.spend(SCAN_LAYOUT_S)
        return True


ProfileFunction = Callable[[Deployment], MemoryProfile]

_CAPACITY = {ReasonKind.INSUFFICIENT_VRAM, ReasonKind.INSUFFICIENT_RAM, ReasonKind.INSUFFICIENT_UNIFIED_MEMORY}
_MIN_CTX = 256


def _placed(plan: Plan) -> int | None:
    return None if plan.layout is None else plan.layout.gpu_layers


def switch_relaxations(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, plan: PlanFunction
) -> list[Relaxation]:
    """Turning on CPU offloading or distribution, when that alone makes the deployment fit."""
    found = []
    if not deployment.cpu_offloading:
        layers = _placed(plan(cluster, deployment.model_copy(update={"cpu_offloading": True}), config, profile))
        if layers is not None:
            found.append(
                Relaxation(
                    kind="allow_cpu_offloading",
                    message=f"allow CPU offloading: {layers} of {profile.n_layers} layers would run on GPUs",
                    gpu_layers=layers,
                )
            )
    if not deployment.distributed_inference_across_workers and len(cluster.workers) > 1:
        relaxed = deployment.model_copy(update={"distributed_inference_across_workers": True})
        layers = _placed(plan(cluster, relaxed, config, profile))
        if layers is not None:
            found.append(
                Relaxation(
                    kind="allow_distribution",
                    message=f"allow distribution across workers: {layers} of {profile.n_layers} layers on GPUs",
                    gpu_layers=layers,
                )
            )
    return found


def block_ranges(blocks: tuple[int, ...]) -> str:
    """``0–23, 30`` for blocks 0 to 23 and 30."""
    runs: list[list[int]] = []
    for block in blocks:
        if runs and block == runs[-1][-1] + 1:
            runs[-1].append(block)
        else:
            runs.append([block])
    return ", ".join(f"{run[0]}–{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


def expert_relaxation(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, plan: PlanFunction
) -> Relaxation | None:
    """Experts of some blocks in host RAM, where CPU offloading or the settings ruled that out."""
    if not profile.is_moe or profile.fixed_host_experts is not None:
        return None
    if deployment.cpu_offloading and config.expert_offload:
        return None  # the plan already tried it
    relaxed = deployment.model_copy(update={"cpu_offloading": True})
    layout = plan(cluster, relaxed, config.model_copy(update={"expert_offload": True}), profile).layout
    if layout is None or not layout.host_expert_blocks:
        return None
    blocks = layout.host_expert_blocks
    return Relaxation(
        kind="experts_on_host",
        message=f"would fit with experts of blocks {block_ranges(blocks)} on the host: "
        f"{layout.gpu_layers} of {profile.n_layers} layers on GPUs",
        value=len(blocks),
        gpu_layers=layout.gpu_layers,
    )


def ctx_relaxation(
    cluster: Cluster,
    deployment: Deployment,
    config: PlannerConfig,
    plan: PlanFunction,
    profile_at: Callable[[int], MemoryProfile],
) -> Relaxation | None:
    """The largest context size (a multiple of 256) that fits, found by bisection."""
    from layerfit.estimators.estimate import deployment_ctx_size

    ctx = deployment_ctx_size(deployment)
    low, high = _MIN_CTX, ctx - _MIN_CTX
    best: tuple[int, int] | None = None
    while low <= high:
        middle = (low + high) // 2 // _MIN_CTX * _MIN_CTX
        middle = max(middle, low)
        params = deployment.params.model_copy(update={"ctx_size": middle})
        layers = _placed(plan(cluster, deployment.model_copy(update={"params": params}), config, profile_at(middle)))
        if layers is not None:
            best, low = (middle, layers), middle + _MIN_CTX
        else:
            high = middle - _MIN_CTX
    if best is None:
        return None
    return Relaxation(
        kind="ctx_size",
        message=f"reduce --ctx-size from {ctx} to {best[0]}: {best[1]} layers would run on GPUs",
        value=best[0],
        gpu_layers=best[1],
    )


def free_memory_relaxation(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    budget: ExplainBudget | None = None,
) -> Relaxation | None:
    """The full-offload layout on one worker (one GPU, or its largest GPUs sharing the blocks) that
    needs the fewest bytes freed, and where to free them."""
    best: tuple[int, Relaxation] | None = None
    for layout in _free_memory_layouts(cluster, deployment, profile, config):
        if budget is not None and not budget.next_layout():
            break
        reasons = check_layout(cluster, deployment, profile, layout, config)
        if not reasons or any(reason.kind not in _CAPACITY for reason in reasons):
            continue
        short = sum(reason.shortfall_bytes or 0 for reason in reasons)
        if best is not None and short >= best[0]:
            continue
        parts = []
        for reason in reasons:
            on_gpu = reason.gpu_index is not None and reason.worker is not None
            where = cluster.gpu_id(reason.worker or "", reason.gpu_index or 0) if on_gpu else reason.worker
            what = {"vram": "VRAM", "ram": "RAM", "unified": "unified memory"}.get(reason.resource or "", "")
            parts.append(f"{format_bytes(reason.shortfall_bytes or 0)} {what} on {where}")
        gpus = ", ".join(cluster.gpu_id(d.worker, d.gpu_index) for d in layout.devices)
        vram_short = any(reason.kind is ReasonKind.INSUFFICIENT_VRAM for reason in reasons)
        first = layout.devices[0]
        relaxation = Relaxation(
            kind="free_vram" if vram_short else "free_ram",
            message="free " + " and ".join(parts) + f" to run it fully offloaded on {gpus}",
            value=short,
            worker=first.worker,
            gpu_index=first.gpu_index if len(layout.devices) == 1 else None,
            gpu_layers=profile.n_layers,
            layout=layout,
        )
        best = (short, relaxation)
    return None if best is None else best[1]


def _free_memory_layouts(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig
) -> Iterator[Layout]:
    """Single-GPU layouts, then each worker's, made one worker at a time (so a deadline can stop it)."""
    yield from single_gpu_layouts(cluster, deployment, profile, config)
    if deployment.kind is not ModelKind.IMAGE:
        for worker in cluster.workers:
            yield from worker_layouts(worker, profile, config)


def relaxations(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    plan: PlanFunction,
    profile_at: Callable[[int], MemoryProfile] | None = None,
    budget: ExplainBudget | None = None,
) -> tuple[Relaxation, ...]:
    """Every single change that would make the deployment fit: switches, experts on the host, ctx,
    memory to free.

    With a ``budget``, the layouts scanned for memory to free stop when it is spent (``plan`` is
    expected to honour the budget itself)."""
    found = switch_relaxations(cluster, deployment, profile, config, plan)
    experts = expert_relaxation(cluster, deployment, profile, config, plan)
    if experts is not None:
        found.append(experts)
    if profile_at is not None:
        ctx = ctx_relaxation(cluster, deployment, config, plan, profile_at)
        if ctx is not None:
            found.append(ctx)
    free = free_memory_relaxation(cluster, deployment, profile, config, budget)
    if free is not None:
        found.append(free)
    return tuple(found)
