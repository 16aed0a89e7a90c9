"""What a strategy is, and helpers every strategy shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from layerfit.check import capacity_reasons
from layerfit.domain.layout import Claims
from layerfit.domain.plan import Reason, ReasonKind, StrategyClass
from layerfit.heuristics.context import Context, StrategyResult
from layerfit.heuristics.notes import Action
from layerfit.heuristics.placement import Placement, placement
from layerfit.heuristics.rules import SkipRule
from layerfit.heuristics.views import GpuView, WorkerView, worker_view


@dataclass(frozen=True)
class Strategy:
    """One of GPUStack's five strategies: its name, class, when it is skipped and its search."""

    action: Action
    kind: StrategyClass
    skip_rules: tuple[SkipRule, ...]
    """Rules that rule it out, in GPUStack's order; it runs when none does."""
    search: Callable[[Context], StrategyResult]


def rejection(ctx: Context, action: Action, where: Placement, n_gpu_layers: int) -> tuple[Claims, tuple[Reason, ...]]:
    """Claims of a placement that does not fit and, from ``check.capacity_reasons``, why not."""
    layout = ctx.evaluator.layout(where, n_gpu_layers)
    needed = ctx.evaluator.claims(layout, ctx.unified_workers)
    reasons = tuple(
        reason.model_copy(update={"strategy": action.value}) for reason in capacity_reasons(ctx.cluster, needed)
    )
    return needed, reasons


def advised_need(ctx: Context, where: Placement, n_gpu_layers: int) -> Claims:
    """What GPUStack's advice says a placement needs: discrete-memory claims (its ``nonuma``
    figures), also on a unified-memory worker. A placement without devices (a worker without GPUs)
    is priced as gguf-parser prices a model given no ``--tensor-split``: on one device."""
    if not where.devices:
        return ctx.evaluator.claims(ctx.evaluator.shape(n_gpu_layers, (1.0,)), frozenset())
    return ctx.evaluator.claims(ctx.evaluator.layout(where, n_gpu_layers), frozenset())


def advised_worker(ctx: Context) -> WorkerView:
    """GPUStack's ``workers[0]``: the most allocatable VRAM, ties in the cluster's order, among
    every worker. ``ctx.workers[0]`` when a GPU has VRAM left; on a cluster without GPUs, the
    first worker, even with nothing allocatable (``ctx.workers`` leaves such a worker out)."""
    views = (worker_view(worker, ctx.selection) for worker in ctx.cluster.workers)
    return min(views, key=lambda view: -view.vram_bytes)


def no_candidate(action: Action, message: str, worker: str | None = None) -> Reason:
    return Reason(kind=ReasonKind.NO_CANDIDATE, strategy=action.value, message=message, worker=worker)


def can_hold_a_layer(ctx: Context, gpus: tuple[GpuView, ...]) -> tuple[GpuView, ...]:
    """GPUs with room for at least one layer on the main worker (GPUStack drops the others)."""
    return tuple(gpu for gpu in gpus if gpu.vram_bytes >= ctx.local_floor(gpu.unified))


def fills_selection(ctx: Context) -> bool:
    """Placements are a manual selection used whole under GPUStack's VRAM split: a selected GPU
    the split leaves empty is given a layer (``Placement.fill_every_device``)."""
    return ctx.selection is not None and ctx.tensor_split is None


def worker_placement(ctx: Context, worker: WorkerView, devices: tuple[GpuView, ...]) -> Placement:
    """Several GPUs of one worker, split by the user's ``-ts`` or by allocatable VRAM."""
    idle = ctx.tensor_split is not None and ctx.selection is None
    return placement(worker, devices, ctx.tensor_split, devices_may_idle=idle, fill_every_device=fills_selection(ctx))


def tensor_split_devices(
    worker: WorkerView, shares: tuple[float, ...], selected: bool = False
) -> tuple[GpuView, ...] | None:
    """The devices an ``n``-share ``--tensor-split`` maps onto: GPUs ``0..n-1`` of the worker
    (GPUStack's positional rule) or, with a manual selection, its selected GPUs in index order.

    ``None`` when the worker lacks one of them, or when a GPU with a non-zero share has no
    allocatable VRAM.
    """
    if selected:
        chosen = tuple(sorted(worker.gpus, key=lambda gpu: gpu.index))
        return chosen if len(chosen) == len(shares) else None
    devices = []
    for index, share in enumerate(shares):
        gpu = worker.gpu_at(index)
        if gpu is None or (share > 0 and gpu.vram_bytes == 0):
            return None
        devices.append(gpu)
    return tuple(devices)


def with_share(ctx: Context, devices: tuple[GpuView, ...]) -> tuple[GpuView, ...]:
    """The devices a ``--tensor-split`` gives a non-zero share (all of them without one)."""
    if ctx.tensor_split is None:
        return devices
    return tuple(gpu for gpu, share in zip(devices, ctx.tensor_split, strict=True) if share > 0)


def room_for_layers(ctx: Context, devices: tuple[GpuView, ...]) -> int:
    """VRAM of the devices less the least they cost besides layers: an upper bound for layer bytes.
    Under a user ``-ts`` on one worker a device may be left empty: only one is sure to cost."""
    paying = with_share(ctx, devices)
    if ctx.tensor_split is not None and ctx.selection is None and paying:
        least = min(ctx.evaluator.devices_overhead((gpu,)) for gpu in paying)
        return sum(gpu.vram_bytes for gpu in devices) - least
    return sum(gpu.vram_bytes for gpu in devices) - ctx.evaluator.devices_overhead(paying)
