"""Pictures of placements: what is needed against what is free, per GPU and per worker.

One bar per GPU and one RAM bar per worker; a unified-memory worker is one bar, its single pool
(RAM and its GPUs' VRAM claims against its allocatable memory). A bar's segments are, per
deployment, the terms of its claims (weights, experts kept in host RAM, output layer, KV cache,
compute, runtime), each a shade of the deployment's colour; the legend shows every shade drawn. A black
tick marks what is allocatable; what stays free is drawn light grey, and a need beyond the tick
is hatched red and labelled with the shortfall. PNG, SVG or HTML; the HTML page is self-contained
(inline SVG), with a legend, a table of the figures, and hover details on every segment.
Needs matplotlib: ``pip install 'layerfit[plot]'``.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from layerfit.domain.base import GiB, format_bytes
from layerfit.domain.cluster import Cluster, Worker
from layerfit.domain.layout import Claims, DeviceClaim, WorkerClaim
from layerfit.errors import InputError

Assignment = tuple[str, Claims]
"""A deployment (or replica) name and the claims of its layout."""
Panel = tuple[str, Sequence[Assignment]]
"""A title and the assignments drawn under it."""

PARTS = ("weights", "experts", "output", "KV", "compute", "runtime")
_SHADES = (1.0, 0.78, 0.62, 0.48, 0.36, 0.25)
_FORMATS = (".png", ".svg", ".html")
_GAP_COLOUR = "#d62728"


@dataclass(frozen=True)
class Segment:
    owner: str
    part: str
    size: int


@dataclass(frozen=True)
class Bar:
    """One GPU, one worker's RAM, or one unified pool: its segments against its allocatable memory."""

    label: str
    kind: Literal["gpu", "ram", "pool"]
    capacity: int
    segments: tuple[Segment, ...]

    @property
    def needed(self) -> int:
        return sum(segment.size for segment in self.segments)

    @property
    def free(self) -> int:
        """Allocatable minus needed: negative when short."""
        return self.capacity - self.needed


def _device_parts(device: DeviceClaim) -> tuple[int, ...]:
    return (
        device.weight_bytes,
        0,
        device.output_bytes,
        device.kv_bytes,
        device.compute_bytes,
        device.fixed_bytes + device.extra_bytes,
    )


def _worker_parts(claim: WorkerClaim) -> tuple[int, ...]:
    return (
        claim.weight_bytes + claim.embedding_bytes,
        claim.expert_bytes,
        claim.output_bytes,
        claim.kv_bytes,
        claim.compute_bytes,
        claim.fixed_bytes,
    )


def _segments(owner: str, parts: tuple[int, ...]) -> list[Segment]:
    return [Segment(owner, part, size) for part, size in zip(PARTS, parts, strict=True) if size]


def _worker_bars(worker: Worker, assignments: Sequence[Assignment], cluster: Cluster) -> list[Bar]:
    gpu_segments: dict[int, list[Segment]] = {gpu.index: [] for gpu in worker.gpus}
    ram_segments: list[Segment] = []
    for owner, claims in assignments:
        for device in claims.devices:
            if device.worker == worker.name and device.gpu_index in gpu_segments:
                gpu_segments[device.gpu_index] += _segments(owner, _device_parts(device))
        claim = claims.worker(worker.name)
        if claim is not None:
            ram_segments += _segments(owner, _worker_parts(claim))
    if worker.unified_memory:
        pooled = ram_segments + [segment for segments in gpu_segments.values() for segment in segments]
        label = f"{worker.name} unified pool"
        return [Bar(label, "pool", worker.allocatable_ram_bytes, tuple(pooled))]
    bars = [
        Bar(cluster.gpu_id(worker.name, gpu.index), "gpu", gpu.allocatable_vram_bytes, tuple(gpu_segments[gpu.index]))
        for gpu in worker.gpus
    ]
    return [*bars, Bar(f"{worker.name} RAM", "ram", worker.allocatable_ram_bytes, tuple(ram_segments))]


def bars(cluster: Cluster, assignments: Sequence[Assignment]) -> list[Bar]:
    """Every GPU and worker of the cluster as bars, in cluster order."""
    return [bar for worker in cluster.workers for bar in _worker_bars(worker, assignments, cluster)]


def _colour(base: tuple[float, ...], part: str) -> tuple[float, float, float]:
    shade = _SHADES[PARTS.index(part)]
    return (1 - (1 - base[0]) * shade, 1 - (1 - base[1]) * shade, 1 - (1 - base[2]) * shade)


def legend_entries(colours: dict[str, Any], rows: Sequence[Bar]) -> list[tuple[str, tuple[float, float, float]]]:
    """The legend: one entry per deployment and part drawn in ``rows``, with the very colour of its
    segments (``llama-70b: weights``; the part alone when only one deployment is drawn), in
    deployment and part order."""
    drawn = {(segment.owner, segment.part) for bar in rows for segment in bar.segments}
    single = len(colours) == 1
    return [
        (part if single else f"{owner}: {part}", _colour(base, part))
        for owner, base in colours.items()
        for part in PARTS
        if (owner, part) in drawn
    ]


def _gap_text(bar: Bar) -> str:
    if not bar.segments:
        return f"unused: {format_bytes(bar.capacity)} free"
    if bar.free < 0:
        short = format_bytes(-bar.free)
        return f"needs {format_bytes(bar.needed)}, {format_bytes(bar.capacity)} allocatable: {short} short"
    return f"needs {format_bytes(bar.needed)} of {format_bytes(bar.capacity)}: {format_bytes(bar.free)} free after"


def _draw(ax: Any, rows: list[Bar], colours: dict[str, Any], title: str, tips: dict[str, str]) -> None:
    """One panel; every drawn patch gets an SVG id, and ``tips`` maps the id to its hover text."""
    for y, bar in enumerate(rows):
        left = 0
        for segment in bar.segments:
            (patch,) = ax.barh(
                y,
                segment.size / GiB,
                left=left / GiB,
                color=_colour(colours[segment.owner], segment.part),
                edgecolor="white",
                linewidth=0.5,
            )
            tip_id = f"lf-tip-{len(tips)}"
            patch.set_gid(tip_id)
            tips[tip_id] = f"{bar.label}: {segment.owner} {segment.part} {format_bytes(segment.size)}"
            left += segment.size
        capacity = bar.capacity / GiB
        if bar.free >= 0:
            (patch,) = ax.barh(y, bar.free / GiB, left=left / GiB, color="#eeeeee", edgecolor="#cccccc", linewidth=0.5)
        else:
            (patch,) = ax.barh(
                y,
                -bar.free / GiB,
                left=capacity,
                color="none",
                edgecolor=_GAP_COLOUR,
                hatch="////",
                linewidth=1.0,
            )
        tip_id = f"lf-tip-{len(tips)}"
        patch.set_gid(tip_id)
        tips[tip_id] = f"{bar.label}: {_gap_text(bar)}"
        short = bar.free < 0
        ax.plot([capacity, capacity], [y - 0.45, y + 0.45], color="black", linewidth=1.5)
        ax.text(
            max(bar.needed / GiB, capacity) + 0.3,
            y,
            _gap_text(bar),
            va="center",
            fontsize=7.5,
            color=_GAP_COLOUR if short else "black",
            fontweight="bold" if short else "normal",
        )
    ax.set_yticks(range(len(rows)), [bar.label for bar in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first row on top
    widest = max((max(bar.needed, bar.capacity) for bar in rows), default=GiB) / GiB
    ticks = axis_ticks(widest)
    right = widest * 1.85  # room for the labels, right of the axis
    ax.set_xlim(0, right)
    ax.set_xticks(ticks)
    ax.spines["bottom"].set_bounds(0, ticks[-1])  # the axis ends at the first tick past the widest bar
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.set_xlabel("GiB (black tick: allocatable)", x=ticks[-1] / 2 / right)  # centred under the axis
    ax.set_title(title, fontsize=10, loc="left")


def axis_ticks(widest: float) -> list[float]:
    """Round ticks from 0 to the first one at or past ``widest`` (GiB): 1, 2, 2.5 or 5 times a power
    of ten apart, at most 6 steps."""
    widest = max(widest, 1e-9)
    power = 10.0 ** math.floor(math.log10(widest))
    step = next(power * f for f in (0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0) if widest / (power * f) <= 6)
    count = math.ceil(widest / step - 1e-9)
    return [round(step * i, 10) for i in range(count + 1)]


def _with_tooltips(svg: str, tips: dict[str, str]) -> str:
    """Put an SVG ``<title>`` (the browser's hover text) in every group matplotlib wrote for a patch."""

    def add_title(match: re.Match[str]) -> str:
        return f"{match[0]}<title>{html.escape(tips[match[1]])}</title>"

    return re.sub(r'<g id="(lf-tip-\d+)">', add_title, svg)


def _table_row(bar: Bar) -> str:
    style = f" style='color:{_GAP_COLOUR}'" if bar.free < 0 else ""
    free = format_bytes(bar.free) if bar.free >= 0 else "short " + format_bytes(-bar.free)
    return (
        f"<tr{style}><td>{html.escape(bar.label)}</td><td>{format_bytes(bar.needed)}</td>"
        f"<td>{format_bytes(bar.capacity)}</td><td>{free}</td></tr>"
    )


def _html_page(
    title: str, svg: str, panels: Sequence[Panel], all_rows: list[list[Bar]], colours: dict[str, Any]
) -> str:
    def swatch(colour: tuple[float, float, float]) -> str:
        rgb = ",".join(str(round(255 * c)) for c in colour[:3])
        return f"<span style='display:inline-block;width:1em;height:1em;background:rgb({rgb})'></span>"

    drawn = [bar for rows in all_rows for bar in rows]
    legend = [f"<li>{swatch(colour)} {html.escape(label)}</li>" for label, colour in legend_entries(colours, drawn)]
    legend.append(f"<li>{swatch((0.93, 0.93, 0.93))} free</li>")
    legend.append(f"<li><span style='color:{_GAP_COLOUR}'>////</span> short: needed beyond what is allocatable</li>")
    tables = []
    for (panel_title, _), rows in zip(panels, all_rows, strict=True):
        body = "".join(_table_row(bar) for bar in rows)
        tables.append(
            f"<h2>{html.escape(panel_title)}</h2><table border='1' cellpadding='3' style='border-collapse:collapse'>"
            f"<tr><th>GPU / worker</th><th>needed</th><th>allocatable</th><th>free after</th></tr>{body}</table>"
        )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body style='font-family:sans-serif'><h1>{html.escape(title)}</h1>"
        f"<p>Hover a segment for its figures.</p>{svg}"
        f"<h2>Legend</h2><ul style='list-style:none'>{''.join(legend)}</ul>{''.join(tables)}</body></html>"
    )


def check_target(path: str | Path) -> Path:
    """The picture's path, when a picture can be drawn there: a known format and matplotlib
    installed (``InputError`` naming ``--plot`` otherwise); the commands check it before planning."""
    target = Path(path)
    if target.suffix.lower() not in _FORMATS:
        raise InputError("--plot", f"unsupported picture format {target.suffix!r}; use .png, .svg or .html")
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        raise InputError("--plot", "pictures need matplotlib: pip install 'layerfit[plot]'") from None
    return target


def render(cluster: Cluster, panels: Sequence[Panel], path: str | Path) -> Path:
    """Draw one panel per (title, assignments) side by side into ``path`` (.png, .svg or .html)."""
    target = check_target(path)
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    names = list(dict.fromkeys(name for _, assignments in panels for name, _ in assignments))
    palette = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    colours = {name: palette(i % palette.N) for i, name in enumerate(names)}
    all_rows = [bars(cluster, assignments) for _, assignments in panels]
    height = max(2.8, 0.4 * max(len(rows) for rows in all_rows) + 1.8)
    figure, axes = plt.subplots(1, len(panels), figsize=(8 * len(panels), height), squeeze=False, sharey=True)
    tips: dict[str, str] = {}
    for ax, (title, _), rows in zip(axes[0], panels, all_rows, strict=True):
        _draw(ax, rows, colours, title, tips)
    drawn = [bar for rows in all_rows for bar in rows]
    handles = [Patch(facecolor=colour, label=label) for label, colour in legend_entries(colours, drawn)]
    handles.append(Patch(facecolor="#eeeeee", edgecolor="#cccccc", label="free"))
    handles.append(Patch(facecolor="none", edgecolor=_GAP_COLOUR, hatch="////", label="short"))
    columns = min(len(handles), 9)
    figure.legend(handles=handles, loc="lower center", ncol=columns, fontsize=8, frameon=False)
    figure.tight_layout(rect=(0, 0.1 + 0.03 * (len(handles) // columns), 1, 1))
    if target.suffix.lower() == ".png":
        figure.savefig(target, dpi=120)
    else:
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg")
        svg = _with_tooltips(buffer.getvalue(), tips)
        if target.suffix.lower() == ".svg":
            target.write_text(svg, encoding="utf-8")
        else:
            title = " / ".join(t for t, _ in panels)
            svg_body = svg[svg.index("<svg") :]
            target.write_text(_html_page(title, svg_body, panels, all_rows, colours), encoding="utf-8")
    plt.close(figure)
    return target
