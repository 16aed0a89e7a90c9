"""Strategy 2: the whole model on several GPUs of one worker, split by layers.

Per worker, GPU counts grow from two; each count tries every combination of the worker's GPUs
that can hold a layer (largest first), split in proportion to allocatable VRAM as GPUStack does,
and the first count with a fitting combination ends that worker's search. Across workers only
candidates with the fewest GPUs are kept. A manual selection fixes the combination to the
selected GPUs; a ``--tensor-split`` fixes it to GPUs ``0..n-1`` with the user's shares, which are
applied through llama.cpp's split rule (GPUStack adds the shares up as if they were bytes in a
pre-check, so it never finds a layout for a user split).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import combinations

from layerfit.domain.plan import Reason, ReasonKind, StrategyClass
from layerfit.heuristics import rules
from layerfit.heuristics.context import Context, StrategyResult
from layerfit.heuristics.evaluate import Verdict
from layerfit.heuristics.notes import Action, Level, Note, largest_worker, requirement, sentences
from layerfit.heuristics.placement import Placement, placement
from layerfit.heuristics.strategies.base import (
    Strategy,
    advised_need,
    can_hold_a_layer,
    rejection,
    room_for_layers,
    tensor_split_devices,
    worker_placement,
)
from layerfit.heuristics.views import GpuView, WorkerView

ACTION = Action.MULTI_GPU


Devices = tuple[GpuView, ...]


def device_groups(ctx: Context, worker: WorkerView) -> Iterator[Iterable[Devices]]:
    """GPU combinations of one worker, grouped by GPU count in increasing order."""
    if ctx.tensor_split is not None:
        devices = tensor_split_devices(worker, ctx.tensor_split, ctx.selection is not None)
        if devices is not None:
            yield (devices,)
        return
    if ctx.selection is not None:
        if len(worker.gpus) >= 2:
            yield (worker.gpus,)
        return
    gpus = can_hold_a_layer(ctx, worker.gpus)
    for count in range(2, len(gpus) + 1):
        yield combinations(gpus, count)


def _worker_search(ctx: Context, worker: WorkerView) -> list[Verdict]:
    total = ctx.n_layers
    layers = ctx.evaluator.layer_bytes(total)
    for group in device_groups(ctx, worker):
        found: list[Verdict] = []
        for devices in group:
            if not ctx.in_time():
                return found
            if room_for_layers(ctx, devices) < layers:
                continue
            verdict = ctx.evaluate(worker_placement(ctx, worker, devices), total)
            if verdict.fits:
                found.append(verdict)
        if found:
            return found
    return []


def search(ctx: Context) -> StrategyResult:
    found: list[Verdict] = []
    advise_on: WorkerView | None = None
    for worker in ctx.workers:
        if not worker.gpus:
            continue
        result = _worker_search(ctx, worker)
        found.extend(result)
        if not result and advise_on is None:
            advise_on = worker
    if found:
        fewest = min(len(verdict.placement.devices) for verdict in found)
        return StrategyResult(found=tuple(v for v in found if len(v.placement.devices) == fewest))
    return _advice(ctx, advise_on)


def _advice(ctx: Context, worker: WorkerView | None) -> StrategyResult:
    reasons: tuple[Reason, ...] = ()
    if ctx.tensor_split is not None and not any(
        tensor_split_devices(view, ctx.tensor_split, ctx.selection is not None) is not None for view in ctx.workers
    ):
        reasons = (_tensor_split_reason(ctx),)
    if worker is None:
        return StrategyResult(reasons=reasons)
    where = whole_worker(ctx, worker)
    _, capacity = rejection(ctx, ACTION, where, ctx.n_layers)
    needed = advised_need(ctx, where, ctx.n_layers)
    vram, ram = needed.total_vram_bytes, needed.total_ram_bytes
    enough_overall = worker.vram_bytes > vram and worker.ram_bytes > ram
    advice = sentences(
        requirement(vram, ram),
        largest_worker(worker.vram_bytes, worker.ram_bytes),
        "Unable to find a combination of GPUs that satisfies the requirements when splitting by layers."
        if enough_overall
        else "",
    )
    return StrategyResult(reasons=(*reasons, *capacity), notes=(Note(Level.INFO, ACTION, advice),))


def whole_worker(ctx: Context, worker: WorkerView) -> Placement:
    """The placement GPUStack's advice prices: every GPU of the worker (the selected ones, with a
    selection) in index order, split by allocatable VRAM; with ``--tensor-split``, its devices."""
    if ctx.tensor_split is not None:
        devices = tensor_split_devices(worker, ctx.tensor_split, ctx.selection is not None)
        if devices is not None:
            return placement(worker, devices, ctx.tensor_split)
    return placement(worker, tuple(sorted(worker.gpus, key=lambda gpu: gpu.index)))


def _tensor_split_reason(ctx: Context) -> Reason:
    count = len(ctx.tensor_split or ())
    return Reason(
        kind=ReasonKind.TENSOR_SPLIT_NOT_HONOURED,
        strategy=ACTION.value,
        resource="tensor_split",
        message=f"--tensor-split has {count} shares but no worker has GPUs 0..{count - 1} "
        "with allocatable VRAM where the share is not zero",
    )


STRATEGY = Strategy(
    action=ACTION,
    kind=StrategyClass.MULTI_GPU,
    skip_rules=(
        rules.not_image,
        rules.gpu_layers_full,
        rules.selection_several_gpus_one_worker,
        rules.has_usable_gpu,
        rules.two_usable_gpus,
    ),
    search=search,
)
