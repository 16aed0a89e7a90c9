"""Pictures of placements: one bar per GPU and one RAM bar per worker, as PNG, SVG or HTML.

Each GPU bar is as long as the GPU's allocatable VRAM; its segments are, per deployment, the
weights (blocks and output layer), the KV cache, the compute buffer and the fixed per-process
cost; what is left is drawn as free. A bar that runs past its capacity is drawn in red. The fleet
view puts the current placement and the new one side by side. HTML pages are self-contained (the
SVG is inlined). Needs matplotlib: ``pip install 'layerfit[plot]'``.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from layerfit.domain.base import GiB
from layerfit.domain.cluster import Cluster
from layerfit.domain.layout import Claims
from layerfit.errors import InputError

Assignment = tuple[str, Claims]
"""A deployment (or replica) name and the claims of its layout."""

_PARTS = ("weights", "KV cache", "compute", "fixed")
_SHADES = (1.0, 0.7, 0.5, 0.3)
_FORMATS = (".png", ".svg", ".html")


def _bars(cluster: Cluster, assignments: Sequence[Assignment]) -> list[dict[str, Any]]:
    """One row per GPU and per worker RAM: label, capacity and (deployment, part, bytes) segments."""
    rows: list[dict[str, Any]] = []
    for worker in cluster.workers:
        for gpu in worker.gpus:
            segments = []
            for name, claims in assignments:
                for device in claims.devices:
                    if (device.worker, device.gpu_index) == (worker.name, gpu.index):
                        parts = (
                            device.weight_bytes + device.output_bytes + device.extra_bytes,
                            device.kv_bytes,
                            device.compute_bytes,
                            device.fixed_bytes,
                        )
                        segments += [(name, part, size) for part, size in zip(_PARTS, parts, strict=True) if size]
            rows.append(
                {
                    "label": f"{worker.name}:{gpu.type}:{gpu.index}",
                    "capacity": gpu.allocatable_vram_bytes,
                    "segments": segments,
                }
            )
        ram_segments = []
        for name, claims in assignments:
            claim = claims.worker(worker.name)
            if claim is not None and claim.ram_bytes:
                parts = (
                    claim.weight_bytes + claim.embedding_bytes + claim.output_bytes,
                    claim.kv_bytes,
                    claim.compute_bytes,
                    claim.fixed_bytes,
                )
                ram_segments += [(name, part, size) for part, size in zip(_PARTS, parts, strict=True) if size]
        rows.append({"label": f"{worker.name} RAM", "capacity": worker.allocatable_ram_bytes, "segments": ram_segments})
    return rows


def _draw(ax: Any, rows: list[dict[str, Any]], colours: dict[str, Any], title: str) -> None:
    for y, row in enumerate(rows):
        left = 0.0
        for name, part, size in row["segments"]:
            shade = _SHADES[_PARTS.index(part)]
            base = colours[name]
            colour = tuple(1 - (1 - c) * shade for c in base[:3])
            ax.barh(y, size / GiB, left=left, color=colour, edgecolor="white", linewidth=0.5)
            left += size / GiB
        capacity = row["capacity"] / GiB
        if left < capacity:
            ax.barh(y, capacity - left, left=left, color="#eeeeee", edgecolor="#cccccc", linewidth=0.5)
        over = left > capacity
        ax.plot([capacity, capacity], [y - 0.45, y + 0.45], color="red" if over else "black", linewidth=1.5)
        ax.text(
            max(left, capacity) + 0.2,
            y,
            f"{left:.1f} / {capacity:.1f} GiB" + ("  OVER" if over else ""),
            va="center",
            fontsize=8,
            color="red" if over else "black",
        )
    ax.set_yticks(range(len(rows)), [row["label"] for row in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first row on top
    ax.set_xlabel("GiB")
    ax.set_title(title, fontsize=10)


def render(
    cluster: Cluster,
    panels: Sequence[tuple[str, Sequence[Assignment]]],
    path: str | Path,
) -> Path:
    """Draw one panel per (title, assignments) side by side into ``path`` (.png, .svg or .html)."""
    target = Path(path)
    if target.suffix.lower() not in _FORMATS:
        raise InputError("--plot", f"unsupported picture format {target.suffix!r}; use .png, .svg or .html")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        raise InputError("--plot", "pictures need matplotlib: pip install 'layerfit[plot]'") from None
    names = list(dict.fromkeys(name for _, assignments in panels for name, _ in assignments))
    palette = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    colours = {name: palette(i % palette.N) for i, name in enumerate(names)}
    all_rows = [_bars(cluster, assignments) for _, assignments in panels]
    height = max(2.5, 0.35 * max(len(rows) for rows in all_rows) + 1.5)
    figure, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), height), squeeze=False, sharey=True)
    for ax, (title, _), rows in zip(axes[0], panels, all_rows, strict=True):
        _draw(ax, rows, colours, title)
    handles = [Patch(color=colours[name], label=name) for name in names]
    greys = {part: str(round(1 - 0.6 * shade, 2)) for part, shade in zip(_PARTS, _SHADES, strict=True)}
    handles += [Patch(facecolor=grey, label=part) for part, grey in greys.items()]
    handles.append(Patch(facecolor="#eeeeee", edgecolor="#cccccc", label="free"))
    figure.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=8, frameon=False)
    figure.tight_layout(rect=(0, 0.08 + 0.02 * (len(handles) // 6), 1, 1))
    if target.suffix.lower() == ".html":
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg")
        title = html.escape(" / ".join(t for t, _ in panels))
        target.write_text(
            f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body style='font-family:sans-serif'><h1>{title}</h1>{buffer.getvalue()}</body></html>",
            encoding="utf-8",
        )
    else:
        figure.savefig(target, dpi=120)
    plt.close(figure)
    return target
