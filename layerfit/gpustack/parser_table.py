"""gguf-parser's memory table, computed in-process from a layerfit memory profile.

GPUStack's own GGUF selector asks ``calculate_gguf_model_resource_claim`` (a gguf-parser process)
for a table: per ``-ngl`` value from 0 to every layer, the main worker's RAM and each device's
VRAM, for unified (``uma``) and discrete (``nonuma``) memory, over a given ``--tensor-split`` and
``--rpc`` list (RPC devices first). ``ParserTable`` answers the same call from a profile with
layerfit's memory model, offloading the output layer last as gguf-parser does. Put in place of
GPUStack's function it lets GPUStack's selector and layerfit see identical memory numbers
(``benchmarks/vs_gpustack.py``); it needs ``gpustack`` only when called.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from layerfit.domain.config import OffloadOrder
from layerfit.domain.profile import MemoryProfile
from layerfit.memory import claims, layout_from_flags

ORDER = OffloadOrder.OUTPUT_LAST
"""gguf-parser's offload order: the output layer goes to a GPU only with every block."""


@dataclass
class Row:
    """One row of the table: ``ram`` and ``vrams`` as (uma, nonuma, layers handled)."""

    layers: int
    ram: tuple[int, int]
    vrams: list[tuple[int, int, int]]


def table_rows(profile: MemoryProfile, rows: Sequence[int], shares: Sequence[float], rpc_count: int) -> list[Row]:
    """The table's rows for these ``-ngl`` values over ``len(shares)`` devices (RPC ones first)."""
    devices = [(f"rpc{i}", 0) for i in range(rpc_count)] + [("main", i) for i in range(len(shares) - rpc_count)]
    everyone = {name for name, _ in devices} | {"main"}
    split = shares if len(shares) > 1 else None
    result = []
    for layers in rows:
        layout = layout_from_flags("main", devices, profile.n_blocks, layers, split, ORDER)
        discrete, unified = claims(profile, layout), claims(profile, layout, everyone)
        handled = {(d.worker, d.gpu_index): d.blocks for d in layout.devices}
        if layout.output_offloaded:
            last = layout.devices[-1]
            handled[(last.worker, last.gpu_index)] += 1
        vrams = [
            (
                0 if layers == 0 else unified.vram_bytes(*device),
                0 if layers == 0 else discrete.vram_bytes(*device),
                handled.get(device, 0),
            )
            for device in devices
        ]
        ram = tuple(0 if (c := table.worker("main")) is None else c.ram_bytes for table in (unified, discrete))
        result.append(Row(layers=layers, ram=(ram[0], ram[1]), vrams=vrams))
    return result


@dataclass
class ParserTable:
    """``calculate_gguf_model_resource_claim``'s signature, answered from ``profile``.

    ``calls`` and ``seconds`` count what GPUStack asked: in production each call is a gguf-parser
    process. The no-offload row has no VRAM, as GPUStack clears it.
    """

    profile: MemoryProfile
    calls: int = 0
    seconds: float = 0.0

    async def __call__(self, model: Any, offload: Any = None, workers: Any = None, **kwargs: Any) -> Any:
        from gpustack.scheduler.calculator import Estimate, LayerMemoryEstimate, MemoryEstimate, ModelResourceClaim

        self.calls += 1
        started = time.perf_counter()
        shares = [float(x) for x in kwargs.get("tensor_split") or [1.0]]
        total = self.profile.n_blocks + 1
        kind = getattr(offload, "value", offload)
        rows = [total] if kind == "full" else [0] if kind == "disable" else list(range(total + 1))
        items = [
            MemoryEstimate(
                fullOffloaded=row.layers == total,
                ram=LayerMemoryEstimate(uma=row.ram[0], nonuma=row.ram[1]),
                vrams=[LayerMemoryEstimate(uma=u, nonuma=n, handleLayers=h) for u, n, h in row.vrams],
                offloadLayers=row.layers,
            )
            for row in table_rows(self.profile, rows, shares, len(kwargs.get("rpc") or []))
        ]
        estimate = Estimate(items=items, architecture="llama", distributable=True)
        self.seconds += time.perf_counter() - started
        return ModelResourceClaim(model=model, resource_claim_estimate=estimate)
