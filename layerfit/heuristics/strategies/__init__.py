"""GPUStack's five strategies, in the order they are tried: the first with a candidate wins."""

from layerfit.heuristics.strategies import cpu_only, distributed, fast_distributed, multi_gpu, partial, single_gpu
from layerfit.heuristics.strategies.base import Strategy

STRATEGIES: tuple[Strategy, ...] = (
    single_gpu.STRATEGY,
    multi_gpu.STRATEGY,
    distributed.STRATEGY,
    partial.STRATEGY,
    cpu_only.STRATEGY,
)
"""Single GPU, multi-GPU, distributed (RPC), partial offload, CPU only: GPUStack's order."""

SPEED_STRATEGIES: tuple[Strategy, ...] = (*STRATEGIES, fast_distributed.STRATEGY)
"""Under ``objective: speed``: GPUStack's five and distributed layouts over the fastest GPUs, every
one run and their layouts ranked together (``speed_rank``)."""

__all__ = ["SPEED_STRATEGIES", "STRATEGIES", "Strategy"]
