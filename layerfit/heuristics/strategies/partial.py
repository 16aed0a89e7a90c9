"""Strategy 4: one worker, some layers on its GPUs and the rest in RAM.

First one GPU per candidate (every GPU of every worker), then several GPUs of one worker split in
proportion to allocatable VRAM; the candidates offloading the most layers win, and within a
worker the fewest GPUs. With ``--gpu-layers`` exactly that many layers must fit. The layer count
is searched directly: on one GPU VRAM grows and RAM shrinks with the layers, so a binary search
finds the most layers (a unified-memory worker's single pool need not be monotone, so it is
scanned); split over several GPUs each device's share moves with the count, so counts are
scanned down from the most the GPUs' total VRAM could hold. Several GPUs: GPU counts grow from
two until a count no longer adds layers. GPUStack also stops at a count that found nothing,
which with ``--gpu-layers`` means it tries one count (the fewest GPUs whose VRAM adds up to the
layers' one-GPU claim; counts below it are skipped); here such a count does not end the search.
"""

from __future__ import annotations

from functools import partial

from layerfit.domain.plan import StrategyClass
from layerfit.heuristics import rules
from layerfit.heuristics.context import Context, StrategyResult
from layerfit.heuristics.evaluate import Verdict
from layerfit.heuristics.notes import Action, Level, Note, largest_worker, requirement, sentences
from layerfit.heuristics.placement import placement
from layerfit.heuristics.search import largest_fitting
from layerfit.heuristics.strategies.base import (
    Strategy,
    advised_need,
    advised_worker,
    can_hold_a_layer,
    no_candidate,
    rejection,
    room_for_layers,
    worker_placement,
)
from layerfit.heuristics.strategies.multi_gpu import device_groups, whole_worker
from layerfit.heuristics.views import WorkerView

ACTION = Action.PARTIAL


def layer_range(ctx: Context) -> tuple[int, int]:
    """The fewest and most GPU layers a partial layout may have."""
    if ctx.gpu_layers is not None:
        return ctx.gpu_layers, ctx.gpu_layers
    return 1, ctx.n_layers - 1


def search(ctx: Context) -> StrategyResult:
    lo, hi = layer_range(ctx)
    single = _single_gpu(ctx, lo, hi)
    best = max((verdict.n_gpu_layers for verdict in single), default=lo)
    found = single + _multi_gpu(ctx, best, hi)
    if found:
        most = max(verdict.n_gpu_layers for verdict in found)
        return StrategyResult(found=tuple(verdict for verdict in found if verdict.n_gpu_layers == most))
    return _advice(ctx, lo)


def _single_gpu(ctx: Context, lo: int, hi: int) -> list[Verdict]:
    if ctx.tensor_split is not None:
        return []
    found: list[Verdict] = []
    best = lo
    for worker in ctx.workers:
        if ctx.selection is not None and len(worker.gpus) != 1:
            continue
        for gpu in can_hold_a_layer(ctx, worker.gpus):
            if not ctx.in_time():
                return found
            where = placement(worker, (gpu,))
            at = partial(ctx.evaluate, where)
            verdict = largest_fitting(at, best, hi, monotone=not gpu.unified, hopeless=ctx.hopeless)
            if verdict is not None:
                found.append(verdict)
                best = verdict.n_gpu_layers
    return found


def _multi_gpu(ctx: Context, lo: int, hi: int) -> list[Verdict]:
    found: list[Verdict] = []
    best = lo
    for worker in ctx.workers:
        result = _worker_multi_gpu(ctx, worker, best, hi)
        if result:
            found.extend(result)
            best = result[0].n_gpu_layers
    return found


def _worker_multi_gpu(ctx: Context, worker: WorkerView, lo: int, hi: int) -> list[Verdict]:
    """The worker's combinations with the most layers (at least ``lo``), fewest GPUs first."""
    found: list[Verdict] = []
    current = previous = lo
    for group in device_groups(ctx, worker):
        found_here = False
        for devices in group:
            if not ctx.in_time():
                break
            most = ctx.evaluator.layers_within(room_for_layers(ctx, devices), current, hi)
            if most < current:
                continue
            where = worker_placement(ctx, worker, devices)
            at = partial(ctx.evaluate, where)
            verdict = largest_fitting(at, current, most, monotone=False, hopeless=ctx.hopeless)
            if verdict is not None:
                found.append(verdict)
                current = verdict.n_gpu_layers
                found_here = True
        if found_here and (current <= previous or current == hi):
            break
        previous = current
    if not found:
        return []
    top = [verdict for verdict in found if verdict.n_gpu_layers == current]
    fewest = min(len(verdict.placement.devices) for verdict in top)
    return [verdict for verdict in top if len(verdict.placement.devices) == fewest]


def _advice(ctx: Context, layers: int) -> StrategyResult:
    worker = advised_worker(ctx)
    where = whole_worker(ctx, worker)
    reasons = rejection(ctx, ACTION, where, layers)[1] if where.devices else ()
    what = "a single layer" if layers == 1 else f"{layers} layers"
    why = f"no GPU or GPU combination of one worker holds {what}" if ctx.gpus else f"no worker has a GPU to hold {what}"
    summary = no_candidate(ACTION, why, worker=worker.name)
    if ctx.gpu_layers is None:
        return StrategyResult(reasons=(*reasons, summary))
    needed = advised_need(ctx, where, layers)
    vram, ram = needed.total_vram_bytes, needed.total_ram_bytes
    enough_overall = worker.vram_bytes > vram and worker.ram_bytes > ram
    # GPUStack's words: its second line runs on past a full stop (see gpustack.messages).
    provides = largest_worker(worker.vram_bytes, worker.ram_bytes)[:-1]
    if enough_overall:
        provides += " but unable to find a combination of GPUs that satisfies the requirements when splitting by layers"
    advice = sentences(
        requirement(vram, ram, f" to offload {layers} layers"),
        f"{provides}. Try offloading fewer layers to lower resource required.",
    )
    return StrategyResult(reasons=(*reasons, summary), notes=(Note(Level.INFO, ACTION, advice),))


STRATEGY = Strategy(
    action=ACTION,
    kind=StrategyClass.PARTIAL_OFFLOAD,
    skip_rules=(
        rules.cpu_offloading_allowed,
        rules.not_image,
        rules.gpu_layers_partial,
        rules.selection_one_worker,
        rules.has_usable_gpu_or_none_at_all,
    ),
    search=search,
)
