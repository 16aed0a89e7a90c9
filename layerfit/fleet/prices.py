"""Dual prices of the fleet's resources, and a layout's exact value under them.

Column generation's LP gives them (``lp``); pricing (``pricing``) and its relaxation
(``pricing_bound``) search for the layout of the best value under them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from layerfit.domain.base import MiB
from layerfit.domain.cluster import Cluster
from layerfit.domain.layout import Claims, Layout


@dataclass(frozen=True)
class Prices:
    """Dual prices per MiB of each resource, and the value of one layer on GPUs."""

    gpu: Mapping[tuple[str, int], float] = field(default_factory=dict)
    worker: Mapping[str, float] = field(default_factory=dict)
    """Per MiB of RAM, or of the whole pool on a unified-memory worker."""
    layer_value: float = 0.0
    gpu_open: Mapping[tuple[str, int], float] = field(default_factory=dict)
    """Per GPU the layout uses at all (the GPUs tier's price of opening it)."""
    worker_open: Mapping[str, float] = field(default_factory=dict)
    """Per worker the layout runs a process on (llama-server or an rpc-server)."""


def claim_value(cluster: Cluster, prices: Prices, layout: Layout, claims: Claims) -> float:
    """A layout's exact value under ``prices``: layers times their value, minus priced claims and
    the opening prices of the GPUs and workers it uses."""
    cost = sum(prices.gpu.get((d.worker, d.gpu_index), 0.0) * d.total_bytes / MiB for d in claims.devices)
    cost += sum(prices.gpu_open.get(gpu, 0.0) for gpu in {(d.worker, d.gpu_index) for d in claims.devices})
    cost += sum(prices.worker_open.get(name, 0.0) for name in {claim.worker for claim in claims.workers})
    for claim in claims.workers:
        price = prices.worker.get(claim.worker, 0.0)
        if price:
            unified = cluster.worker(claim.worker).unified_memory
            cost += price * (claim.pool_bytes if unified else claim.ram_bytes) / MiB
    return prices.layer_value * layout.gpu_layers - cost
