"""Strategy 1: the whole model on one GPU of one worker.

Every usable GPU is tried, largest first, and every one that fits is a candidate. GPUStack stops
at the first GPU whose worker is short of RAM, which hides smaller GPUs on other workers with
enough RAM; here a worker short of RAM only rules out its own GPUs.
"""

from __future__ import annotations

from layerfit.domain.plan import StrategyClass
from layerfit.heuristics import rules
from layerfit.heuristics.context import Context, StrategyResult
from layerfit.heuristics.notes import Action, Level, Note, gib, requirement, sentences
from layerfit.heuristics.placement import placement
from layerfit.heuristics.strategies.base import Strategy, advised_need, rejection

ACTION = Action.SINGLE_GPU


def search(ctx: Context) -> StrategyResult:
    total = ctx.n_layers
    found = []
    for gpu in ctx.gpus:
        verdict = ctx.evaluate(placement(ctx.worker(gpu.worker), (gpu,)), total)
        if verdict.fits:
            found.append(verdict)
    if found:
        return StrategyResult(found=tuple(found))
    largest = ctx.gpus[0]
    where = placement(ctx.worker(largest.worker), (largest,))
    _, reasons = rejection(ctx, ACTION, where, total)
    needed = advised_need(ctx, where, total)
    advice = sentences(
        requirement(needed.total_vram_bytes, needed.total_ram_bytes),
        f"The available GPU has {gib(largest.vram_bytes)} GiB VRAM and {gib(largest.worker_ram_bytes)} GiB RAM.",
    )
    return StrategyResult(reasons=reasons, notes=(Note(Level.INFO, ACTION, advice),))


STRATEGY = Strategy(
    action=ACTION,
    kind=StrategyClass.SINGLE_GPU,
    skip_rules=(
        rules.gpu_layers_full,
        rules.no_tensor_split,
        rules.selection_one_gpu,
        rules.has_usable_gpu,
    ),
    search=search,
)
