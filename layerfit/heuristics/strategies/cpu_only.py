"""Strategy 5: every layer in RAM of one worker (``-ngl 0``).

Workers are tried by allocatable RAM, largest first; every worker whose RAM holds the model is a
candidate. The claim does not depend on the worker, so the first worker that is too small ends
the search. A ``--tensor-split`` does not rule it out: llama.cpp ignores the split when no layer is
on a GPU.
"""

from __future__ import annotations

from layerfit.domain.plan import StrategyClass
from layerfit.heuristics import rules
from layerfit.heuristics.context import Context, StrategyResult
from layerfit.heuristics.evaluate import Verdict
from layerfit.heuristics.notes import Action, Level, Note, gib, sentences
from layerfit.heuristics.placement import placement
from layerfit.heuristics.strategies.base import Strategy, advised_need, advised_worker, rejection

ACTION = Action.CPU_ONLY


def search(ctx: Context) -> StrategyResult:
    by_ram = sorted(ctx.workers, key=lambda worker: -worker.ram_bytes)
    found: list[Verdict] = []
    for worker in by_ram:
        verdict = ctx.evaluate(placement(worker, ()), 0)
        if not verdict.fits:
            break
        found.append(verdict)
    if found:
        return StrategyResult(found=tuple(found))
    richest = by_ram[0] if by_ram else advised_worker(ctx)  # nothing allocatable: GPUStack's first worker
    _, reasons = rejection(ctx, ACTION, placement(richest, ()), 0)
    needed = advised_need(ctx, placement(richest, ()), 0)
    advice = sentences(
        f"The model requires approximately {gib(needed.total_ram_bytes)} GiB RAM.",
        f"The largest available worker provides {gib(richest.ram_bytes)} GiB RAM.",
    )
    return StrategyResult(reasons=reasons, notes=(Note(Level.INFO, ACTION, advice),))


STRATEGY = Strategy(
    action=ACTION,
    kind=StrategyClass.CPU_ONLY,
    skip_rules=(
        rules.cpu_offloading_allowed,
        rules.not_image,
        rules.gpu_layers_none,
        rules.no_selection,
    ),
    search=search,
)
