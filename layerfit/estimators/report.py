"""Text rendering of an estimate for ``layerfit estimate MODEL.gguf``: per-layer costs and totals.

Totals come from ``layerfit.memory.claims`` on two reference layouts (everything on one GPU,
everything on the CPU), so they are exactly what the planner would charge.
"""

from __future__ import annotations

from collections.abc import Iterator

from layerfit.domain import DeviceAssignment, Layout, MemoryProfile, format_bytes
from layerfit.estimators.shape import ModelShape
from layerfit.memory import claims, make_layout

_GPU = "gpu"
_HOST = "host"


def _runs(profile: MemoryProfile) -> Iterator[tuple[int, int, int, int]]:
    """Runs of consecutive blocks with equal weights and KV: (first, last, weights, kv)."""
    start = 0
    pairs = list(zip(profile.block_weight_bytes, profile.block_kv_bytes, strict=True))
    for i in range(1, len(pairs) + 1):
        if i == len(pairs) or pairs[i] != pairs[start]:
            yield start, i - 1, pairs[start][0], pairs[start][1]
            start = i


def _row(label: str, *cells: str) -> str:
    return f"  {label:<14}" + "".join(f"{cell:>14}" for cell in cells)


def estimate_table(shape: ModelShape, profile: MemoryProfile) -> str:
    """Per-layer table and totals (full-offload VRAM, CPU-only RAM, per-layer cost)."""
    n = profile.n_blocks
    full = claims(profile, make_layout(_GPU, n, [DeviceAssignment(worker=_GPU, gpu_index=0, blocks=n)]))
    cpu = claims(profile, Layout(main_worker=_HOST, n_blocks=n))
    gpu = full.devices[0]
    lines = [
        f"{shape.name or shape.path} ({shape.architecture}): {n} blocks, {format_bytes(shape.tensor_bytes)} of weights"
        f" in {len(shape.files)} file{'s' if len(shape.files) > 1 else ''}",
        "",
        _row("layers", "weights", "KV/state", "per layer"),
    ]
    for first, last, weights, kv in _runs(profile):
        label = f"{first}" if first == last else f"{first}-{last}"
        lines.append(_row(label, format_bytes(weights), format_bytes(kv), format_bytes(weights + kv)))
    lines.append(
        _row("output", format_bytes(profile.output_weight_bytes), "-", format_bytes(profile.output_weight_bytes))
    )
    lines.append(_row("embedding", format_bytes(profile.token_embedding_bytes), "-", "host RAM"))
    per_layer = [w + kv for w, kv in zip(profile.block_weight_bytes, profile.block_kv_bytes, strict=True)]
    lines += [
        "",
        "full offload, one GPU:",
        f"  VRAM {format_bytes(gpu.total_bytes)} = weights {format_bytes(gpu.weight_bytes + gpu.output_bytes)}"
        f" + KV {format_bytes(gpu.kv_bytes)} + compute {format_bytes(gpu.compute_bytes)}"
        f" + runtime {format_bytes(gpu.fixed_bytes)}"
        + (f" + extras {format_bytes(gpu.extra_bytes)}" if gpu.extra_bytes else ""),
        f"  host RAM {format_bytes(full.workers[0].ram_bytes)}",
        f"CPU only: RAM {format_bytes(cpu.workers[0].ram_bytes)}",
        f"per layer on a GPU: {format_bytes(min(per_layer))} to {format_bytes(max(per_layer))}"
        f" (mean {format_bytes(sum(per_layer) // n)})",
    ]
    if profile.warnings:
        lines += ["", "warnings:", *(f"  - {warning}" for warning in profile.warnings)]
    return "\n".join(lines)
