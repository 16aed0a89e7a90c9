"""Pictures: needed against allocatable per GPU and worker, the gap marked, unified pools as one bar."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from layerfit.cli import EXIT_NO_FIT, EXIT_PLACED, main
from layerfit.domain import Cluster, Deployment, Layout
from layerfit.io.documents import load_file
from layerfit.io.plot import axis_ticks, bars
from layerfit.memory import claims
from layerfit.planning.profiles import resolve_profile

EXAMPLES = Path(__file__).parent.parent / "layerfit" / "examples"
CLUSTER = str(EXAMPLES / "cluster.yaml")
GiB = 1024**3


def test_every_gpu_and_worker_is_a_bar_and_a_unified_worker_is_one_pool() -> None:
    cluster = Cluster.model_validate(
        {
            "workers": [
                {"id": 1, "name": "pc", "total_ram_bytes": "32 GiB", "allocatable_ram_bytes": "30 GiB",
                 "gpus": [{"index": 0, "total_vram_bytes": "24 GiB", "allocatable_vram_bytes": "22 GiB"}]},
                {"id": 2, "name": "mac", "unified_memory": True, "total_ram_bytes": "64 GiB",
                 "allocatable_ram_bytes": "40 GiB",
                 "gpus": [{"index": 0, "type": "metal", "total_vram_bytes": "48 GiB",
                           "allocatable_vram_bytes": "48 GiB"}]},
            ]
        }
    )  # fmt: skip
    deployment = load_file(Deployment, EXAMPLES / "deployment.yaml")
    profile = resolve_profile(deployment)
    layout = Layout.model_validate(
        {"main_worker": "mac", "n_blocks": 80, "output_offloaded": True,
         "devices": [{"worker": "pc", "gpu_index": 0, "blocks": 30}, {"worker": "mac", "gpu_index": 0, "blocks": 50}]}
    )  # fmt: skip
    needed = claims(profile, layout, {"mac"})
    rows = {bar.label: bar for bar in bars(cluster, [("llama", needed)])}
    assert list(rows) == ["pc:cuda:0", "pc RAM", "mac unified pool"]
    assert rows["pc:cuda:0"].needed == needed.vram_bytes("pc", 0)
    mac = needed.worker("mac")
    assert mac is not None and rows["mac unified pool"].needed == mac.pool_bytes
    assert rows["mac unified pool"].free == 40 * GiB - mac.pool_bytes
    pc = needed.worker("pc")
    assert pc is not None and rows["pc RAM"].needed == pc.ram_bytes


def test_explain_draws_the_closest_layout_with_its_shortfall(tmp_path: Path) -> None:
    explain = ["explain", "--cluster", CLUSTER, "--deployment", str(EXAMPLES / "too-big.yaml"), "--plot"]
    page = tmp_path / "too-big.html"
    code = main([*explain, str(page)])
    assert code == EXIT_NO_FIT
    text = page.read_text(encoding="utf-8")
    assert "closest: full offload on gpu-a:cuda:0, gpu-a:cuda:1" in text
    # the table and the hover text name the gap on each GPU
    assert "<td>gpu-a:cuda:0</td><td>24.67 GiB</td><td>22.00 GiB</td><td>short 2.67 GiB</td>" in text
    assert "<title>gpu-a:cuda:1: needs 24.12 GiB, 22.00 GiB allocatable: 2.12 GiB short</title>" in text
    tips = re.findall(r"<title>gpu-a:cuda:0: llama-70b-32k (\w+) ", text)
    assert tips == ["weights", "KV", "compute", "runtime"]
    assert "<h2>Legend</h2>" in text and "short: needed beyond what is allocatable" in text
    assert "src=" not in text and "<script" not in text  # self-contained
    png = tmp_path / "too-big.png"
    assert main([*explain, str(png)]) == EXIT_NO_FIT
    assert png.read_bytes().startswith(b"\x89PNG")


def test_a_placed_plan_shows_what_stays_free(tmp_path: Path) -> None:
    svg = tmp_path / "plan.svg"
    code = main(["plan", "--cluster", CLUSTER, "--deployment", str(EXAMPLES / "deployment.yaml"), "--plot", str(svg)])
    assert code == EXIT_PLACED
    text = svg.read_text(encoding="utf-8")
    assert "<title>gpu-a:cuda:0: needs 21.78 GiB of 22.00 GiB: 225.0 MiB free after</title>" in text
    assert "<title>gpu-b:cuda:0: unused: 15.00 GiB free</title>" in text


def test_the_axis_ends_at_the_largest_bar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GiB axis (line and ticks) stops at the first round tick past the largest bar (48 GiB of
    gpu-a's RAM: 50), not near twice it, where only the labels need room."""
    import matplotlib.pyplot as plt

    drawn: list[Any] = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda figure: (drawn.append(figure), close(figure)))
    deployment = str(EXAMPLES / "deployment.yaml")
    assert main(["plan", "--cluster", CLUSTER, "--deployment", deployment, "--plot", str(tmp_path / "p.png")]) == 0
    (ax,) = drawn[0].axes
    ticks = list(ax.get_xticks())
    assert ticks == [0, 10, 20, 30, 40, 50]
    assert ax.spines["bottom"].get_bounds() == (0, 50) and ax.get_xlim()[1] > 50  # the labels' room


def test_axis_ticks_are_round_and_reach_the_widest() -> None:
    for widest in (0.3, 1.0, 7.0, 15.0, 24.67, 48.0, 100.0, 333.0):
        ticks = axis_ticks(widest)
        step = ticks[1] - ticks[0]
        assert ticks[0] == 0 and ticks[-2] < widest <= ticks[-1] + 1e-9 and len(ticks) <= 7
        assert all(abs(later - earlier - step) < 1e-9 for earlier, later in pairwise(ticks))


def test_the_legend_shows_the_colours_drawn_and_the_experts(tmp_path: Path) -> None:
    """Every legend swatch is the colour of segments drawn (the grey part swatches matched no bar),
    and experts kept in host RAM are their own part with their own entry."""
    from layerfit.io.plot import legend_entries
    from layerfit.testing.synthetic import REAL_MODELS, write_gguf

    model = tmp_path / "qwen3-30b-a3b.gguf"
    write_gguf(model, REAL_MODELS["qwen3-30b-a3b"])
    page = tmp_path / "moe.html"
    moe = ["plan", "--cluster", str(EXAMPLES / "moe-cluster.yaml"), "--model", str(model), "-c", "8192"]
    assert main([*moe, "--plot", str(page)]) == EXIT_PLACED
    text = page.read_text(encoding="utf-8")
    legend = re.findall(r"<li><span style='[^']*background:rgb\(([\d,]+)\)'></span> ([^<]+)</li>", text)
    labels = [label for _, label in legend]
    assert "experts" in labels and labels[0] == "weights" and "free" in labels
    assert re.search(r"<title>desk RAM: qwen3-30b-a3b experts \d", text)
    cluster = load_file(Cluster, EXAMPLES / "moe-cluster.yaml")
    deployment = load_file(Deployment, EXAMPLES / "deployment.yaml")
    needed = claims(resolve_profile(deployment), Layout(main_worker="desk", n_blocks=80))
    two = bars(cluster, [("a", needed), ("b", needed)])
    colours = {"a": (0.1, 0.4, 0.7, 1.0), "b": (0.8, 0.2, 0.1, 1.0)}
    entries = legend_entries(colours, two)
    drawn = {(segment.owner, segment.part) for bar in two for segment in bar.segments}
    parts = ("weights", "experts", "output", "KV", "compute", "runtime")
    assert [label for label, _ in entries] == [f"{o}: {part}" for o in "ab" for part in parts if (o, part) in drawn]
    assert {"a: weights", "b: compute"} <= {label for label, _ in entries}
    assert len({colour for _, colour in entries}) == len(entries)  # each part of each deployment its own shade
