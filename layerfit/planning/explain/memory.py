"""Memory to free, or hardware that is lacking: the full offload on one worker that is short of the
fewest bytes.

Each layout the scan checks (one GPU, or one worker's largest GPUs sharing the blocks) is short of
memory on some GPUs or workers (``MemoryNeed``). Freeing what other processes hold can close a
shortfall only up to the hardware's total (a GPU's ``total_vram_bytes``, a worker's
``total_ram_bytes``): ``free_vram``/``free_ram`` is offered for the layout short of the fewest bytes
among those within it. Where no layout is, ``more_hardware`` says what the hardware lacks for the
layout short of the fewest bytes ("needs a GPU with at least 24.67 GiB VRAM allocatable in place of
..."): not a change to make here. Either is offered when the deployment, planned with the memory
there (``with_memory``), is placed (or, that plan cut short by the stage's budget, when the layout
is valid there). Each figure is rounded up to what the message shows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from layerfit.check import check_layout
from layerfit.domain.base import format_bytes, shown_size
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.layout import Layout
from layerfit.domain.plan import MemoryNeed, Reason, ReasonKind, Relaxation, Status
from layerfit.domain.profile import MemoryProfile
from layerfit.planning.explain.applied import with_memory
from layerfit.planning.explain.budget import ExplainBudget
from layerfit.planning.explain.changes import PlanFunction
from layerfit.planning.layouts import single_gpu_layouts, worker_layouts

_CAPACITY = {ReasonKind.INSUFFICIENT_VRAM, ReasonKind.INSUFFICIENT_RAM, ReasonKind.INSUFFICIENT_UNIFIED_MEMORY}
_WHAT = {"vram": "VRAM", "ram": "RAM", "unified": "unified memory"}


def memory_relaxation(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    plan: PlanFunction,
    budget: ExplainBudget | None = None,
) -> Relaxation | None:
    """Memory to free for the full offload short of the fewest bytes within the hardware; else what
    the hardware lacks for the one short of the fewest bytes; ``None`` when no layout is short of
    memory alone, or the deployment planned with that memory there is not placed (the solver rounds
    sizes, ``solver.model.scale``: a layout that fits to the byte may not be found)."""
    within: tuple[int, Layout, tuple[MemoryNeed, ...]] | None = None
    beyond: tuple[int, Layout, tuple[MemoryNeed, ...]] | None = None
    for layout in _layouts(cluster, deployment, profile, config):
        if budget is not None and not budget.next_layout():
            break
        reasons = check_layout(cluster, deployment, profile, layout, config)
        if not reasons or any(reason.kind not in _CAPACITY for reason in reasons):
            continue
        needs = tuple(_need(cluster, reason) for reason in reasons)
        short = sum(need.short_bytes for need in needs)
        if all(need.within_hardware for need in needs):
            if within is None or short < within[0]:
                within = (short, layout, needs)
        elif beyond is None or short < beyond[0]:
            beyond = (short, layout, needs)
    for chosen in (within, beyond):
        if chosen is not None and _places(cluster, deployment, profile, config, plan, chosen[1], chosen[2]):
            return _relaxation(cluster, profile, *chosen)
    return None


def _places(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    plan: PlanFunction,
    layout: Layout,
    needs: Sequence[MemoryNeed],
) -> bool:
    """Whether the deployment, planned with the memory ``needs`` name there, is placed; when that
    plan was cut short (no work left: the stage says ``truncated``), whether ``layout`` is valid
    there, which proves a placement exists."""
    grown = with_memory(cluster, needs)
    result = plan(grown, deployment, config, profile)
    if result.status is Status.UNKNOWN and result.layout is None:
        return not check_layout(grown, deployment, profile, layout, config)
    return result.layout is not None


def _layouts(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig
) -> Iterator[Layout]:
    """Single-GPU layouts, then each worker's, made one worker at a time (so a deadline can stop it)."""
    yield from single_gpu_layouts(cluster, deployment, profile, config)
    if deployment.kind is not ModelKind.IMAGE:
        for worker in cluster.workers:
            yield from worker_layouts(worker, profile, config)


def _need(cluster: Cluster, reason: Reason) -> MemoryNeed:
    """The memory a capacity reason says is short, against what its hardware has in all, rounded up
    to what a message shows (``shown_size``): the figure asked for is the figure applied. Within the
    hardware, the memory to free (at most what others hold); beyond it, the allocatable needed."""
    worker = cluster.worker(reason.worker or "")
    available, exact = reason.available_bytes or 0, reason.needed_bytes or 0
    on_gpu = reason.kind is ReasonKind.INSUFFICIENT_VRAM and reason.gpu_index is not None
    total = worker.gpu(reason.gpu_index or 0).total_vram_bytes if on_gpu else worker.total_ram_bytes
    needed = min(available + shown_size(exact - available), total) if exact <= total else shown_size(exact)
    resource = "vram" if on_gpu else "unified" if reason.kind is ReasonKind.INSUFFICIENT_UNIFIED_MEMORY else "ram"
    return MemoryNeed(
        worker=worker.name,
        gpu_index=reason.gpu_index if on_gpu else None,
        resource=resource,
        short_bytes=needed - available,
        needed_bytes=needed,
        total_bytes=total,
    )


def _relaxation(
    cluster: Cluster, profile: MemoryProfile, short: int, layout: Layout, needs: Sequence[MemoryNeed]
) -> Relaxation:
    gpus = ", ".join(cluster.gpu_id(d.worker, d.gpu_index) for d in layout.devices)
    first = layout.devices[0]
    common = {
        "value": short,
        "worker": first.worker,
        "gpu_index": first.gpu_index if len(layout.devices) == 1 else None,
        "gpu_layers": profile.n_layers,
        "layout": layout,
        "memory": tuple(needs),
    }
    if all(need.within_hardware for need in needs):
        parts = [_freed(cluster, need) for need in needs]
        kind = "free_vram" if any(need.gpu_index is not None for need in needs) else "free_ram"
        message = "free " + " and ".join(parts) + f" to run it fully offloaded on {gpus}"
        return Relaxation(kind=kind, message=message, **common)
    parts = [_lacking(cluster, need) for need in needs]
    message = "needs " + " and ".join(parts) + f" to run it fully offloaded on {gpus}"
    return Relaxation(kind="more_hardware", message=message, **common)


def _where(cluster: Cluster, need: MemoryNeed) -> str:
    return need.worker if need.gpu_index is None else cluster.gpu_id(need.worker, need.gpu_index)


def _freed(cluster: Cluster, need: MemoryNeed) -> str:
    """``2.67 GiB VRAM on gpu-a:cuda:0 (of 2.00 GiB not allocatable now)``."""
    held = need.total_bytes - (need.needed_bytes - need.short_bytes)
    return (
        f"{format_bytes(need.short_bytes)} {_WHAT[need.resource]} on {_where(cluster, need)} "
        f"(of {format_bytes(held)} not allocatable now)"
    )


def _lacking(cluster: Cluster, need: MemoryNeed) -> str:
    """``a GPU with at least 24.67 GiB VRAM allocatable in place of gpu-a:cuda:0 (24.00 GiB in all)``,
    or, within the hardware, the memory to free."""
    if need.within_hardware:
        return f"{format_bytes(need.short_bytes)} {_WHAT[need.resource]} freed on {_where(cluster, need)}"
    what = "a GPU" if need.gpu_index is not None else "a worker"
    return (
        f"{what} with at least {format_bytes(need.needed_bytes)} {_WHAT[need.resource]} allocatable in place of "
        f"{_where(cluster, need)} ({format_bytes(need.total_bytes)} in all)"
    )
