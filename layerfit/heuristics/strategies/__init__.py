"""GPUStack's five strategies, in the order they are tried: the first with a candidate wins."""

from layerfit.heuristics.strategies import cpu_only, distributed, multi_gpu, partial, single_gpu
from layerfit.heuristics.strategies.base import Strategy

STRATEGIES: tuple[Strategy, ...] = (
    single_gpu.STRATEGY,
    multi_gpu.STRATEGY,
    distributed.STRATEGY,
    partial.STRATEGY,
    cpu_only.STRATEGY,
)
"""Single GPU, multi-GPU, distributed (RPC), partial offload, CPU only: GPUStack's order."""

__all__ = ["STRATEGIES", "Strategy"]
