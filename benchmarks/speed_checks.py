"""Two checks ``speed_truth.py`` prints beside the speed model's errors: a baseline in the same run,
and what one RPC hop costs, read off the delay proxy's sweep.

- Baseline: a pure bandwidth roofline, the bytes a token reads (weights, the routed experts'
  share, the output layer; no KV cache, no fixed costs) over one bandwidth: the host's measured
  copy bandwidth for a CPU row (rpc-servers on the same host read at the same), the spec sheet's
  for a GPU row. Once as it is, once scaled by the one efficiency per kind (CPU, GPU) that fits
  the ``fit`` rows best (the median of measured over roofline time), as a roofline calibrated
  like llmfit's would be. The speed model should beat both on the held-out rows.
- Variants: the scoreboard rows whose GPU name does not say which variant ran (H100 SXM or
  PCIe, A100 SXM4 or PCIe, V100 SXM2 or PCIe) are left out of the model's errors; here each is
  predicted as every variant the GPU table has, so the error is known whichever it was.
- RPC hop: each group of ``proxy`` rows that differ only in the delay gives a least-squares line
  of decode ms per token against the round trip the proxy adds (twice its one-way delay, the
  nominal one: the proxy's own ``proxy_held_ms`` is a median over chunks, which the model upload
  dominates on short runs), measured and predicted. Its slope per proxied server is the round
  trips one token costs each server; the model's slope is the same count as the model has it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from speed_truth import (
    BACKEND_TYPES,
    ERA_LAYER_US,
    LLAMA2_7B,
    LOOPBACK_RTT_MS,
    SCOREBOARD_FILL,
    Case,
    _model,
    _worker,
    patched,
)

from layerfit.domain import Cluster, LlamaParams
from layerfit.estimators import estimate_profile
from layerfit.memory import layout_from_flags
from layerfit.speed import SpeedSettings, calibration, predict
from layerfit.speed.gpu_table import match

GB = 1e9


def roofline_ms(case: Case) -> float:
    """Bytes one token reads over the case's one bandwidth (module docstring), in ms."""
    shape = case.profile.speed
    assert shape is not None, f"{case.id}: the profile has no speed facts"
    read = sum(shape.block_dense_bytes) + shape.routed_share * sum(shape.block_expert_bytes) + shape.output_bytes
    if case.kind == "cpu":
        bandwidth = case.cluster.worker(case.layout.main_worker).ram_bandwidth_gbps
    else:
        gpu = case.cluster.workers[0].gpus[0]
        spec = match(gpu.name)
        bandwidth = gpu.memory_bandwidth_gbps or (spec.memory_bandwidth_gbps if spec else None)
    assert bandwidth, f"{case.id}: no bandwidth"
    return read / (bandwidth * GB) * 1e3


def _summary(errors: Iterable[tuple[float, Case]], source: str, split: str) -> str:
    values = [abs(value) for value, case in errors if case.source == source and case.split == split]
    limit = 0.15 if source == "cpu" else 0.25
    within = sum(value <= limit for value in values)
    return (
        f"median |error| {statistics.median(values):.1%}, largest {max(values):.1%}, "
        f"{within} of {len(values)} within {limit:.0%}"
    )


def print_baseline(cases: Sequence[Case]) -> None:
    """The roofline's decode errors per source and split, raw and with one efficiency per source
    fitted on its fit rows (the sizes rows ran older builds than the scoreboards)."""
    roof = {case.id: roofline_ms(case) for case in cases}
    sources = sorted({case.source for case in cases})
    scale = {
        source: statistics.median(
            case.decode_ms / roof[case.id] for case in cases if case.source == source and case.split == "fit"
        )
        for source in sources
    }
    raw = [((roof[case.id] - case.decode_ms) / case.decode_ms, case) for case in cases]
    scaled = [((roof[case.id] * scale[case.source] - case.decode_ms) / case.decode_ms, case) for case in cases]
    print("baseline, a pure bandwidth roofline (bytes read per token / one bandwidth), decode:")
    for source in sources:
        for split in sorted({case.split for case in cases if case.source == source}):
            print(f"  {source} {split}: as it is: {_summary(raw, source, split)}; "
                  f"x {scale[source]:.2f} (fitted): {_summary(scaled, source, split)}")  # fmt: skip


VARIANTS = {
    "H100 80 GB": ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"),
    "A100 80 GB": ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
    "Tesla V100": ("Tesla V100-SXM2-16GB", "Tesla V100-PCIE-16GB"),
}
"""Scoreboard names without their variant, and the table's rows they may be."""


def print_variants(rows: Sequence[dict[str, str]], models: Path) -> None:
    """Decode tokens/s of each scoreboard row without a variant, predicted as every variant."""
    path = _model(models, LLAMA2_7B)
    print("scoreboard rows that do not name their variant: tg128 published, predicted per variant (error)")
    for row in rows:
        if row["gpu_name"] or row["scoreboard_name"] not in VARIANTS:
            continue
        fa = "on" if row["flash_attn"] == "1" else "off"
        profile = estimate_profile(path, LlamaParams.from_args(["-c", "512", "-fa", fa]))
        layout = layout_from_flags("gpu", [("gpu", 0)], profile.n_blocks, profile.n_layers)
        published = float(row["tg128_tok_s"])
        shown = []
        for name in VARIANTS[row["scoreboard_name"]]:
            gpu = {"index": 0, "type": BACKEND_TYPES[row["backend"]], "name": name,
                   "total_vram_bytes": "1 TiB", "allocatable_vram_bytes": "1 TiB"}  # fmt: skip
            cluster = Cluster.model_validate({"workers": [_worker("gpu", 100.0, 8, LOOPBACK_RTT_MS, [gpu])]})
            speed = predict(profile, layout, cluster, SpeedSettings(context_fill=SCOREBOARD_FILL, prompt_tokens=512))
            shown.append(f"{name} {speed.decode_tokens_per_s:.0f} ({speed.decode_tokens_per_s / published - 1:+.0%})")
        print(f"  {row['scoreboard_name']} fa{row['flash_attn']}: {published:.0f}; " + ", ".join(shown))


def _line(delays: Sequence[float], ms: Sequence[float]) -> float:
    slope, _ = np.polyfit(np.asarray(delays), np.asarray(ms), 1)
    return float(slope)


def print_hops(cases: Sequence[Case], rows: Sequence[dict[str, str]]) -> None:
    """Round trips per token per rpc-server, measured and predicted, per group of proxy rows."""
    by_id = {case.id: case for case in cases}
    groups: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        if row["sweep"] == "proxy":
            groups[row["id"].rsplit("_delay", 1)[0]].append(row)
    print("RPC hop (delay proxy): group, split, servers, ms/token at the added round trip (ms), round trips per "
          "token per server measured / predicted; with experts on the host: round trips per such block")  # fmt: skip
    for group, members in groups.items():
        proxied = [row for row in members if row["proxy_delay_ms"]]
        if not any(float(row["proxy_delay_ms"]) == 0 for row in proxied):
            proxied += [row for row in members if not row["proxy_delay_ms"]]  # no proxy: no delay added
        if len({row["proxy_delay_ms"] or "0" for row in proxied}) < 2:
            continue
        trips = [2 * float(row["proxy_delay_ms"] or 0) for row in proxied]
        measured = [float(row["ms_per_token"]) for row in proxied]
        predicted = [by_id[row["id"]].predict().decode_ms_per_token for row in proxied]
        servers, host_experts = int(proxied[0]["rpc_devices"]), int(proxied[0]["n_cpu_moe"])
        slopes = _line(trips, measured) / servers, _line(trips, predicted) / servers
        shown = ", ".join(f"{t:g}:{m:.1f}" for t, m in sorted(zip(trips, measured, strict=True)))
        line = f"  {group:52s} {proxied[0]['split']:8s} {servers} [{shown}] {slopes[0]:5.2f} / {slopes[1]:5.2f}"
        if host_experts:
            line += f"; per block {(slopes[0] - 1) / host_experts:4.2f} / {(slopes[1] - 1) / host_experts:4.2f}"
        print(line)


def print_server_counts(rows: Sequence[dict[str, str]]) -> None:
    """What one more rpc-server costs without a proxy: full offload of one model on 1, 2, 3 servers."""
    full: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        plain = not row["proxy_delay_ms"] and row["n_cpu_moe"] == "0" and not row["extra"]
        if row["ngl"] == "99" and plain and row["server_cores"] == "0":
            full[row["model"]][int(row["rpc_devices"])].append(float(row["ms_per_token"]))
    print("one more rpc-server on loopback, no proxy (full offload; servers x ms per token, median of rows):")
    for model, counts in sorted(full.items()):
        if len(counts) > 1:
            shown = ", ".join(f"{n} x {statistics.median(v):.1f}" for n, v in sorted(counts.items()))
            print(f"  {model:26s} {shown}")


def print_size_scaling(cases: Sequence[Case]) -> None:
    """Each GPU's own bandwidth share and per-layer cost, from its rows of several sizes in one build
    alone (one GPU, quantized models): the two the scoreboards' single size cannot tell apart."""
    from speed_fit import _family, linear_fit

    groups: dict[tuple[str, str], list[Case]] = defaultdict(list)
    for case in cases:
        if case.source == "sizes" and len(case.layout.devices) == 1 and "F16" not in case.model:
            groups[(case.gpu, case.era)].append(case)
    print("one GPU's rows of several sizes in one build, fitted alone: share of the spec bandwidth, cost per layer")
    for (gpu, era), members in sorted(groups.items()):
        if len({case.model for case in members}) < 2:
            continue
        family = members[0].family
        saved = dict(ERA_LAYER_US)
        ERA_LAYER_US[era] = 0.0
        try:
            with patched(FAMILIES=calibration.FAMILIES):
                setters = {"share": _family(family, "bandwidth", True), "layer": _family(family, "layer_us", False)}
                linear_fit(members, setters, prompt=False, lower={"share": 1.0})
                row = calibration.FAMILIES[family]
                worst = max(abs(case.predict().decode_ms_per_token / case.decode_ms - 1) for case in members)
        finally:
            ERA_LAYER_US.clear()
            ERA_LAYER_US.update(saved)
        sizes = ", ".join(sorted({case.model for case in members}))
        print(f"  {gpu:<32} {era:<14} {sizes:<34} share {row.bandwidth:.3f}, {row.layer_us:5.1f} us per layer "
              f"(largest residual {worst:.1%})")  # fmt: skip
