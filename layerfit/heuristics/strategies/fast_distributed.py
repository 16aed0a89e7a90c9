"""Under ``objective: speed`` only: distributed layouts over the fastest GPUs.

GPUStack's distributed strategy (``distributed``) takes the worker with the most VRAM as main and
tries RPC servers by VRAM; a fast layout may rather need the fastest GPUs. This search takes as
main each of the ``MAINS`` workers whose fastest GPU has the most memory bandwidth (then the most
VRAM), and as RPC servers, for each count from one up, that many of the other workers' GPUs,
fastest first (then largest), through the same combination search. Its layouts join the others,
which ``speed_rank`` ranks by predicted time. Not one of GPUStack's strategies: it never runs
under ``objective: layers``.
"""

from __future__ import annotations

from layerfit.heuristics.context import Context, StrategyResult
from layerfit.heuristics.evaluate import Verdict
from layerfit.heuristics.strategies import distributed
from layerfit.heuristics.strategies.base import Strategy, can_hold_a_layer
from layerfit.heuristics.views import GpuView
from layerfit.speed.devices import gpu_facts

MAINS = 3
"""Main workers tried, fastest first."""


def _bandwidth(ctx: Context, gpu: GpuView) -> float:
    worker = next(w for w in ctx.cluster.workers if w.name == gpu.worker)
    spec = next(g for g in worker.gpus if g.index == gpu.index)
    return gpu_facts(gpu.ref, spec).bandwidth_gbps


def search(ctx: Context) -> StrategyResult:
    if ctx.selection is not None or ctx.tensor_split is not None:
        return StrategyResult()  # GPUStack's strategy already tries the one combination they allow
    speed = {(gpu.worker, gpu.index): _bandwidth(ctx, gpu) for gpu in ctx.gpus}

    def fastest(gpus: tuple[GpuView, ...]) -> tuple[GpuView, ...]:
        return tuple(sorted(gpus, key=lambda gpu: (-speed[(gpu.worker, gpu.index)], -gpu.vram_bytes)))

    mains = []
    for worker in ctx.workers:
        held = can_hold_a_layer(ctx, worker.gpus)
        if held and worker.ram_bytes >= ctx.main_ram_floor:
            top = fastest(held)[0]
            mains.append((-speed[(top.worker, top.index)], -sum(g.vram_bytes for g in held), worker.name, worker))
    found: list[Verdict] = []
    for *_, main in sorted(mains)[:MAINS]:
        main_gpus = can_hold_a_layer(ctx, main.gpus)
        pool = fastest(tuple(g for g in ctx.gpus if g.worker != main.name and g.vram_bytes >= ctx.rpc_floor(g.unified)))
        counts = range(1, min(len(pool), ctx.config.max_rpc_servers) + 1)
        combos: distributed.Combos = {count: (pool[:count],) for count in counts}
        found.extend(distributed.search_combinations(ctx, main, main_gpus, combos))
    return StrategyResult(found=tuple(found))


STRATEGY = Strategy(
    action=distributed.ACTION,
    kind=distributed.STRATEGY.kind,
    skip_rules=distributed.STRATEGY.skip_rules,
    search=search,
)
