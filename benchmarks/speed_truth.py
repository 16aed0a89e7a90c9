"""The speed model against measured speed, row by row: llama.cpp's CPU build on this kind of
machine (``cpu-speed.csv``: CPU only at 1 and 2 threads, ``-ngl`` over ``ggml-rpc-server``
devices, rpc hops through a delaying proxy, ``--n-cpu-moe``), the published llama.cpp
scoreboards (``published.csv``: Llama-2-7B Q4_0, ``tg128`` and ``pp512``, CUDA, ROCm, Metal) and
published rows of several model sizes on one GPU and build (``published-sizes.csv``, rebuilt by
``speed_sizes.py``: Llama-3 8B and 70B, Llama-2 7B, 13B and 70B, on one to four GPUs).

Each CPU row is rebuilt as layerfit sees it: the model's GGUF header from the row's shape (checked
against the row's ``weight_bytes``), a main worker with the row's threads and its measured copy
bandwidth as RAM bandwidth, one worker per rpc-server holding a device named ``CPU`` (ggml's CPU
backend: the worker's figures; the servers ran ``-t 1``), loopback links with the proxy's delay
twice per round trip (its ``proxy_held_ms`` is a mean over every chunk, the model's upload
included: 69.9 ms on one row with a 2 ms delay), the layout ``-ngl``/``-ts``/``--n-cpu-moe`` make, and the cache filled
by the prompt and half the generated tokens. Each scoreboard row is the GPU of its name in the GPU
table, a Llama-2-7B Q4_0 header, full offload, 64 tokens cached. Printed: every row's measured and
predicted decode time and prompt speed, the worst errors, and the median and largest decode error
per source on the ``fit`` rows and the held-out ones, and per model size (targets: within 15 % on
held-out CPU rows, 25 % on the published GPU rows not fitted on). The GPU table is checked against
``gpu_specs.csv``.

    python benchmarks/speed_truth.py [--truth tests/gguf_fixtures/ground_truth/speed] [--fit]

``--fit`` fits the constants of ``layerfit.speed.calibration`` on the fit rows only
(``speed_fit.py``), prints them, and reports the errors with them. Then (``speed_checks.py``) a
baseline in the same run, a pure bandwidth roofline, raw and with one fitted efficiency per kind,
and what one RPC hop costs: round trips per token per server, measured on the delay proxy's rows
and predicted; and each GPU's own bandwidth share and per-layer cost from its rows of several sizes.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerfit.domain import Cluster, Layout, LlamaParams, MemoryProfile
from layerfit.domain.speed import SpeedPrediction
from layerfit.estimators import estimate_profile
from layerfit.estimators.gguf_constants import GGMLQuantizationType as Q
from layerfit.estimators.shape import read_gguf
from layerfit.memory import layout_from_flags
from layerfit.memory.experts import engine_blocks, with_host_experts
from layerfit.speed import SpeedSettings, calibration, predict
from layerfit.speed.gpu_table import match
from layerfit.testing.arch_fixtures import TOKENIZER
from layerfit.testing.synthetic import ModelSpec, write_gguf

TRUTH = Path(__file__).resolve().parent.parent / "tests" / "gguf_fixtures" / "ground_truth" / "speed"
LOOPBACK_RTT_MS = 0.05
"""A loopback round trip without the proxy (the proxy's own echo check: 0.06-0.09 ms added at no delay)."""
LOOPBACK_GBPS = 40.0
"""Loopback bandwidth, Gbit/s: the hidden states of these models are a few KB, it hardly matters."""
TYPES = {"F16": Q.F16, "Q8_0": Q.Q8_0, "Q4_0": Q.Q4_0}
BACKEND_TYPES = {"CUDA": "cuda", "ROCm": "rocm", "Metal": "mps"}
SCOREBOARD_FILL = 64
"""``tg128`` generates 128 tokens into an empty cache: 64 cached on average."""


@dataclass(frozen=True)
class Case:
    """One measured row as layerfit sees it."""

    id: str
    split: str
    kind: str
    """``cpu`` or ``gpu``."""
    family: str
    profile: MemoryProfile
    layout: Layout
    cluster: Cluster
    settings: SpeedSettings
    decode_ms: float
    prompt_tok_s: float
    model: str = ""
    """The model (and thread count): layouts of one deployment are compared with each other."""
    source: str = "scoreboard"
    """``cpu`` (``cpu-speed.csv``), ``scoreboard`` (``published.csv``) or ``sizes`` (``published-sizes.csv``)."""
    era: str = ""
    """The build a published row ran, when older than the scoreboards' (``2024-05 CUDA``): it adds
    ``ERA_LAYER_US[era]`` to every layer's fixed cost; empty for the current builds."""
    gpu: str = ""
    """The GPUs a sizes row ran on (``2x NVIDIA GeForce RTX 4090``)."""

    def predict(self) -> SpeedPrediction:
        extra = ERA_LAYER_US.get(self.era, 0.0) if self.era else 0.0
        if not extra:
            return predict(self.profile, self.layout, self.cluster, self.settings)
        older = {name: row._replace(layer_us=row.layer_us + extra) for name, row in calibration.FAMILIES.items()}
        with patched(FAMILIES=older):
            return predict(self.profile, self.layout, self.cluster, self.settings)


@contextmanager
def patched(**values: Any) -> Iterator[None]:
    """``calibration``'s constants set to ``values`` for the block, then restored."""
    saved = {name: getattr(calibration, name) for name in values}
    for name, value in values.items():
        setattr(calibration, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(calibration, name, value)


ERA_LAYER_US: dict[str, float] = {"2024-05 CUDA": 38.2, "2024-05 Metal": 100.4}
"""Extra fixed time per layer and token of a build older than the scoreboards' (by ``Case.era``), in
microseconds, fitted with the families' shares (``--fit`` refits them): the May 2024 builds of
``published-sizes.csv``. layerfit itself uses the current builds' costs (``calibration``); an era
not named here (the January 2024 rows) is predicted with those."""


def _spec(row: dict[str, str]) -> ModelSpec:
    fields: dict[str, object] = {
        "name": row["model"],
        "architecture": row["architecture"],
        "block_count": int(row["n_layer"]),
        "embedding_length": int(row["n_embd"]),
        "feed_forward_length": int(row["n_ff"]),
        "head_count": int(row["n_head"]),
        "head_count_kv": int(row["n_head_kv"]),
        "head_dim": int(row["head_dim"]),
        "vocab_size": int(row["n_vocab"]),
        "context_length": 4096,
        "weight_type": TYPES[row["weight_type"]],
    }
    if int(row["expert_count"]):
        fields |= {
            "embedding_type": Q.F16,
            "expert_count": int(row["expert_count"]),
            "expert_used_count": int(row["expert_used_count"]),
            "expert_feed_forward_length": int(row["expert_ff"]),
            "qk_norm": True,
        }
    return ModelSpec.model_validate(fields)


def _model(directory: Path, spec: ModelSpec) -> Path:
    path = directory / f"{spec.name}.gguf"
    if not path.exists():
        write_gguf(path, spec, tokenizer=True, tokenizer_model=TOKENIZER)
    return path


def _worker(
    name: str, bandwidth: float, threads: int, rtt_ms: float, gpus: list[dict[str, object]]
) -> dict[str, object]:
    return {
        "id": name,
        "name": name,
        "total_ram_bytes": "64 GiB",
        "allocatable_ram_bytes": "64 GiB",
        "ram_bandwidth_gbps": bandwidth,
        "cpu_threads": threads,
        "network": {"bandwidth_gbps": LOOPBACK_GBPS, "rtt_ms": rtt_ms},
        "gpus": gpus,
    }


def cpu_case(row: dict[str, str], models: Path) -> Case:
    spec = _spec(row)
    path = _model(models, spec)
    tensor_bytes = read_gguf(str(path)).tensor_bytes
    if tensor_bytes != int(row["weight_bytes"]):
        sys.exit(f"{row['id']}: the rebuilt model has {tensor_bytes} bytes of tensors, the row {row['weight_bytes']}")
    threads = int(row["threads"])
    args = ["-c", row["ctx"], "-t", row["threads"]]
    if int(row["n_cpu_moe"] or 0):
        args += ["-ncmoe", row["n_cpu_moe"]]
    profile = estimate_profile(path, LlamaParams.from_args(args))
    delay = float(row["proxy_delay_ms"]) if row["proxy_delay_ms"] else 0.0
    rtt = LOOPBACK_RTT_MS + 2 * delay
    one_core = float(row["host_copy_gbps_1core"])
    bandwidth = one_core if threads == 1 else float(row["host_copy_gbps_2core"])
    servers = int(row["rpc_devices"] or 0)
    device = {"index": 0, "type": "", "name": "CPU", "total_vram_bytes": "64 GiB", "allocatable_vram_bytes": "64 GiB"}
    workers = [_worker("host", bandwidth, threads, rtt, [])]
    workers += [_worker(f"rpc{i}", one_core, 1, rtt, [device]) for i in range(servers)]
    cluster = Cluster.model_validate({"workers": workers})
    n = profile.n_blocks
    if row["ngl"]:
        split = [float(share) for share in row["tensor_split"].split(",")] if row["tensor_split"] else None
        layout = layout_from_flags("host", [(f"rpc{i}", 0) for i in range(servers)], n, int(row["ngl"]), split)
        layout = with_host_experts(layout, engine_blocks(profile))
    else:
        layout = Layout(main_worker="host", n_blocks=n)
    prompt = int(row["prompt_tokens"])
    settings = SpeedSettings(
        context_fill=prompt + int(row["eval_runs"]) // 2, prompt_tokens=prompt, threads=threads, batch_threads=threads
    )
    return Case(row["id"], row["split"], "cpu", "cpu", profile, layout, cluster, settings,
                float(row["ms_per_token"]), float(row["pp_tok_s"]), f"{row['model']} t{threads}", "cpu")  # fmt: skip


LLAMA2_7B = ModelSpec(
    name="llama-2-7b-q4_0",
    architecture="llama",
    block_count=32,
    embedding_length=4096,
    feed_forward_length=11008,
    head_count=32,
    head_count_kv=32,
    head_dim=128,
    vocab_size=32000,
    context_length=4096,
    weight_type=Q.Q4_0,
)
"""The scoreboards' model (its output layer is Q6_K in the real file, Q4_0 here: 31 MB less read)."""


def gpu_cases(rows: list[dict[str, str]], models: Path) -> Iterator[Case]:
    """The scoreboard rows whose GPU the table names; within a family, sorted by name, every other
    one (the first included) is a fit row, the rest check it (a family's only GPU: fit only)."""
    path = _model(models, LLAMA2_7B)
    known = [row for row in rows if row["gpu_name"] and match(row["gpu_name"]) is not None]
    by_family: dict[str, list[dict[str, str]]] = {}
    for row in sorted(known, key=lambda row: (row["gpu_name"], row["flash_attn"])):
        spec = match(row["gpu_name"])
        assert spec is not None
        by_family.setdefault(spec.family, []).append(row)
    for family, members in sorted(by_family.items()):
        names = sorted({row["gpu_name"] for row in members})
        for row in members:
            fa = "on" if row["flash_attn"] == "1" else "off"
            profile = estimate_profile(path, LlamaParams.from_args(["-c", "512", "-fa", fa]))
            gpu = {"index": 0, "type": BACKEND_TYPES[row["backend"]], "name": row["gpu_name"],
                   "total_vram_bytes": "1 TiB", "allocatable_vram_bytes": "1 TiB"}  # fmt: skip
            worker = _worker("gpu", 100.0, 8, LOOPBACK_RTT_MS, [gpu])
            cluster = Cluster.model_validate({"workers": [worker | {"unified_memory": row["backend"] == "Metal"}]})
            layout = layout_from_flags("gpu", [("gpu", 0)], profile.n_blocks, profile.n_layers)
            position = names.index(row["gpu_name"])
            split = "fit" if position % 2 == 0 or len(names) == 1 else "held_out"
            yield Case(
                f"{row['gpu_name']} fa{row['flash_attn'] or '-'}",
                split,
                "gpu",
                family,
                profile,
                layout,
                cluster,
                SpeedSettings(context_fill=SCOREBOARD_FILL, prompt_tokens=512),
                1000 / float(row["tg128_tok_s"]),
                float(row["pp512_tok_s"]),
                model="7B Q4_0",
                gpu=row["gpu_name"],
            )


def load_cases(truth: Path, models: Path) -> list[Case]:
    with (truth / "cpu-speed.csv").open() as file:
        cases = [cpu_case(row, models) for row in csv.DictReader(file)]
    with (truth / "published.csv").open() as file:
        cases += gpu_cases(list(csv.DictReader(file)), models)
    from speed_sizes import load_size_cases

    return cases + load_size_cases(truth, models)


def error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def report(cases: list[Case], title: str) -> dict[tuple[str, str], float]:
    """Every row, the worst five, and per (kind, split) the median and largest decode error."""
    print(f"\n== {title}")
    columns = ("decode ms", "predicted", "err", "pp tok/s", "predicted", "err")
    print(f"{'row':<62}{'split':>9}" + "".join(f"{name:>{8 if name == 'err' else 11}}" for name in columns))
    errors: list[tuple[float, Case]] = []
    prompts: list[tuple[float, Case]] = []
    for case in cases:
        speed = case.predict()
        decode, prompt = (
            error(speed.decode_ms_per_token, case.decode_ms),
            error(speed.prompt_tokens_per_s, case.prompt_tok_s),
        )
        errors.append((decode, case))
        prompts.append((prompt, case))
        print(f"{case.id[:61]:<62}{case.split:>9}{case.decode_ms:>11.2f}{speed.decode_ms_per_token:>11.2f}{decode:>8.1%}"
              f"{case.prompt_tok_s:>10.1f}{speed.prompt_tokens_per_s:>11.1f}{prompt:>8.1%}")  # fmt: skip
    print("worst decode errors:")
    for value, case in sorted(errors, key=lambda item: -abs(item[0]))[:5]:
        print(f"  {value:+.1%}  {case.id} ({case.split})")
    _ranking(cases)
    summary: dict[tuple[str, str], float] = {}
    for source in ("cpu", "scoreboard", "sizes"):
        for split in SPLITS:
            members = [(value, prompt) for (value, case), (prompt, _) in zip(errors, prompts, strict=True)
                       if case.source == source and case.split == split]  # fmt: skip
            if members:
                summary[(source, split)] = max(abs(value) for value, _ in members)
                print(f"  {source} {split}: {_summary_line(members, 0.15 if source == 'cpu' else 0.25)}")
    sizes = sorted({(case.model, case.split) for _, case in errors if case.source == "sizes"})
    for model, split in sizes:
        members = [(value, prompt) for (value, case), (prompt, _) in zip(errors, prompts, strict=True)
                   if case.source == "sizes" and case.model == model and case.split == split]  # fmt: skip
        print(f"    {model:<12} {split}: {_summary_line(members, 0.25)}")
    return summary


SPLITS = ("fit", "held_out", "older_build")
"""``older_build``: published rows of a build older than any fitted one, fitted on nothing."""


def _summary_line(members: list[tuple[float, float]], limit: float) -> str:
    """Rows, median and largest |decode error|, how many within ``limit``, and the prompt's errors."""
    values = [abs(value) for value, _ in members]
    prompts = [abs(prompt) for _, prompt in members if prompt == prompt]  # NaN: no prompt figure
    within = sum(value <= limit for value in values)
    line = (f"{len(values)} rows, median |error| {statistics.median(values):.1%}, largest {max(values):.1%}, "
            f"{within} within {limit:.0%}")  # fmt: skip
    if prompts:
        line += f"; prompt: median {statistics.median(prompts):.1%}, largest {max(prompts):.1%}"
    return line


def _ranking(cases: list[Case]) -> None:
    """Pairs of layouts of one model whose measured decode times differ by more than 15 %: how often
    the prediction orders them the same way."""
    predicted = {case.id: case.predict().decode_ms_per_token for case in cases if case.kind == "cpu"}
    pairs = right = 0
    for first, second in itertools.combinations([case for case in cases if case.kind == "cpu"], 2):
        slow, fast = sorted((first, second), key=lambda case: -case.decode_ms)
        if first.model == second.model and slow.decode_ms > 1.15 * fast.decode_ms:
            pairs += 1
            right += predicted[slow.id] > predicted[fast.id]
    print(f"ranking: {right} of {pairs} pairs of one model's layouts more than 15 % apart ordered right")


def check_table(truth: Path) -> None:
    """The GPU table's figures beside ``gpu_specs.csv``'s."""
    with (truth / "gpu_specs.csv").open() as file:
        rows = list(csv.DictReader(file))
    differ = []
    for row in rows:
        spec = match(row["gpu_name"])
        fp16 = row["fp16_tflops"] or (row["fp32_tflops"] if row["family"] == "apple" else "")
        if (
            spec is None
            or spec.memory_bandwidth_gbps != float(row["memory_bandwidth_gbps"])
            or ((spec.fp16_tflops or 0.0) != (float(fp16) if fp16 else 0.0))
        ):
            differ.append(row["gpu_name"])
    print(f"GPU table vs gpu_specs.csv: {len(rows)} rows, {len(differ)} differ {differ}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--truth", type=Path, default=TRUTH, help="folder of cpu-speed.csv, published.csv, gpu_specs.csv"
    )
    parser.add_argument("--fit", action="store_true", help="fit the constants on the fit rows and report with them")
    args = parser.parse_args()
    if not (args.truth / "cpu-speed.csv").exists():
        sys.exit(f"no ground truth in {args.truth}: record it first (benchmarks/speed_record.py)")
    check_table(args.truth)
    with tempfile.TemporaryDirectory() as scratch:
        cases = load_cases(args.truth, Path(scratch))
        report(cases, "the constants in layerfit/speed/calibration.py")
        if args.fit:
            from speed_fit import fit_all

            fit_all(cases)
            report(cases, "the fitted constants (fit rows only)")
        from speed_checks import print_baseline, print_hops, print_server_counts, print_size_scaling, print_variants

        with (args.truth / "cpu-speed.csv").open() as file:
            rows = list(csv.DictReader(file))
        with (args.truth / "published.csv").open() as file:
            print_variants(list(csv.DictReader(file)), Path(scratch))
        print_size_scaling(cases)
        print_baseline(cases)
        print_hops(cases, rows)
        print_server_counts(rows)


if __name__ == "__main__":
    main()
