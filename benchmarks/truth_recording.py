"""Record llama.cpp's real allocations for the architecture models (``layerfit.testing.arch_fixtures``).

For every model of ``ARCH_MODELS`` this writes the sparse file, runs ``llama-completion``
(``llama-embedding`` for encoders) under a set of configurations and keeps llama.cpp's own figures:
CPU only, one ``ggml-rpc-server`` device at full and half offload, two devices with ``-ts 1,1``,
two context sizes, and, where the model has sliding-window layers or recurrent state, a q8_0 KV
cache and ``-np 2``; attention/recurrent hybrids also at every split between the host and one
device, at both contexts. The rpc-servers run the CPU backend on 127.0.0.1; this module starts them,
keeps their PIDs and stops them. Rows are written in the CSV format of
``tests/gguf_fixtures/ground_truth`` (one row per device of llama.cpp's exit memory breakdown,
every ``... buffer size`` line in ``buffers``).

Used by ``benchmarks/llamacpp_truth.py --record CSV --llama-cpp DIR``.
"""

from __future__ import annotations

import csv
import os
import re
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from layerfit.estimators.llamacpp_log import parse_breakdown
from layerfit.testing.arch_fixtures import ARCH_MODELS, write_arch_model
from layerfit.testing.arch_fixtures_recurrent import hybrid_splits
from layerfit.testing.arch_fixtures_variants import VARIANT_CONTEXTS, VARIANT_UBATCH
from layerfit.testing.synthetic import ModelSpec

COLUMNS = [
    "id",
    "tool",
    "model",
    "ngl",
    "ctx",
    "extra",
    "row",
    "model_mib",
    "context_mib",
    "compute_mib",
    "unaccounted_mib",
    "nvml_peak_delta_mib",
    "maxrss_mib",
    "buffers",
    "note",
]
PROMPT = "a a a a a a a a"
FIXED_FLAGS = ("-lv", "4", "-s", "1", "-t", "1")
"""Flags of every run that do not change memory (the CSV's ``extra`` holds the others)."""
_BUFFER = re.compile(
    r"^\S+\s+I\s+(?P<source>\w+):\s+(?P<buffer>[\w\[\].:-]+)\s+(?P<kind>model|KV|RS|compute|output) buffer size\s*="
    r"\s*(?P<mib>[\d.]+) MiB",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Config:
    """One llama.cpp run of a model."""

    label: str
    ctx: int
    ngl: int
    rpc_devices: int
    extra: tuple[str, ...] = ()
    embedding: bool = False
    """Run under llama-embedding even though the model is causal (encoders always are)."""
    program: str = ""
    """Another tool of the build (``llama-parallel``: the only one that takes ``-kvu``)."""

    def run_id(self, model: str) -> str:
        return f"{self.label}_{model}_ngl{self.ngl}_c{self.ctx}"

    def tool(self, spec: ModelSpec) -> str:
        if self.program:
            return self.program
        return "llama-embedding" if spec.encoder or self.embedding else "llama-completion"


def _stateful(spec: ModelSpec) -> bool:
    """Sliding-window layers or recurrent state: q8_0 KV and -np 2 are recorded too."""
    return bool(spec.sliding_window or spec.ssm_inner_size)


_LONG_CONTEXT = {"llama4": 16384}
"""Larger second context: llama4 attends in 8192-token chunks, which only a longer context shows."""


KIND_SPLITS = {"deepseek2": "1,5", "llama4": "1,5", "jamba": "2,1,2", "nemotron_h": "3,1,3", "granitehybrid": "2,1,4"}
"""``-ts`` of a full offload whose devices hold different layer kinds: deepseek2's and llama4's first
device only a dense block (no experts), the hybrids' middle device only an attention block and
the others no attention (compute by the kinds a device holds, ``estimators.layer_kinds``)."""


def configs(spec: ModelSpec) -> list[Config]:
    small, large = (512, 2048) if spec.encoder else (2048, 8192)
    large = _LONG_CONTEXT.get(spec.architecture, large)
    small, large = VARIANT_CONTEXTS.get(spec.name, (small, large))
    full, half = 99, spec.block_count // 2 + 1  # -ngl counts the output layer: output + half the blocks
    chosen = [
        Config("cpu", small, 0, 0),
        Config("cpu", large, 0, 0),
        Config("rpc1", small, full, 1),
        Config("rpc1", large, full, 1),
        Config("rpc1half", large, half, 1),
        Config("rpc2", large, full, 2, ("-ts", "1,1")),
    ]
    if _stateful(spec):
        chosen.append(Config("rpc1kvq8", large, full, 1, ("-ctk", "q8_0", "-ctv", "q8_0")))
        chosen.append(Config("rpc1np2", large, full, 1, ("-np", "2")))
        chosen.append(Config("cpunp2", large, 0, 0, ("-np", "2")))
    chosen += [Config("rpc1split", ctx, ngl, 1) for ngl in hybrid_splits(spec) for ctx in (small, large)]
    if spec.name in VARIANT_CONTEXTS and spec.encoder:  # an encoder's micro-batch is its context
        chosen.append(Config("rpc2", small, full, 2, ("-ts", "1,1")))
    elif spec.name in VARIANT_CONTEXTS:  # out-of-sample variants: another micro-batch
        ub = ("-ub", str(VARIANT_UBATCH))
        chosen += [Config("cpuub", large, 0, 0, ub), Config("rpc1halfub", large, half, 1, ub)]
        chosen.append(Config("rpc2ub", large, full, 2, ("-ts", "1,1", *ub)))
    return chosen


SCAN_SPLITS = {"jamba": "1,5", "granitehybrid": "7,2,4"}
"""``-ts`` of a full offload with a device boundary between two recurrent blocks without attention
(jamba's blocks 0 | 1, granitehybrid's 3 | 4, its middle device holding block 4 alone): both
devices keep part of the scan (``MemoryProfile.scan_crossings``)."""


def kind_configs(spec: ModelSpec) -> list[Config]:
    """The ``KIND_SPLITS`` and ``SCAN_SPLITS`` runs of the model (``rpckinds``, ``rpcscan``;
    recorded on their own with ``labels``)."""
    large = _LONG_CONTEXT.get(spec.architecture, 2048 if spec.encoder else 8192)
    chosen = []
    for label, splits in (("rpckinds", KIND_SPLITS), ("rpcscan", SCAN_SPLITS)):
        split = splits.get(spec.architecture)
        if split is not None:
            chosen.append(Config(label, large, 99, split.count(",") + 1, ("-ts", split)))
    return chosen


def _binary(build: Path, name: str) -> Path:
    for candidate in (build / "bin" / name, build / name):
        if candidate.exists():
            return candidate
    raise SystemExit(f"{name} not found in {build} or {build / 'bin'}")


def _environment(build: Path) -> dict[str, str]:
    library = str(_binary(build, "llama-completion").parent)
    return {**os.environ, "LD_LIBRARY_PATH": library}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def rpc_servers(build: Path, count: int) -> Iterator[list[str]]:
    """``count`` rpc-servers on the CPU backend at 127.0.0.1; stopped by PID on exit."""
    processes: list[subprocess.Popen[bytes]] = []
    endpoints: list[str] = []
    try:
        for _ in range(count):
            port = _free_port()
            command = [str(_binary(build, "ggml-rpc-server")), "-H", "127.0.0.1", "-p", str(port), "-d", "CPU"]
            processes.append(
                subprocess.Popen(
                    [*command, "-t", "1"],
                    env=_environment(build),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            endpoints.append(f"127.0.0.1:{port}")
        for endpoint in endpoints:
            _wait_listening(endpoint)
        yield endpoints
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_listening(endpoint: str, seconds: float = 10.0) -> None:
    host, port = endpoint.split(":")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex((host, int(port))) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"rpc-server at {endpoint} did not start")


def run_config(build: Path, model: Path, spec: ModelSpec, config: Config) -> tuple[list[str], str]:
    """Run llama.cpp once; the memory-relevant flags (with the endpoints used) and its log."""
    tool = config.tool(spec)
    with rpc_servers(build, config.rpc_devices) as endpoints:
        flags = ["-c", str(config.ctx), *config.extra]
        placement = ["--rpc", ",".join(endpoints), "-ngl", str(config.ngl)] if endpoints else []
        generation = {
            "llama-embedding": ["-p", PROMPT],
            "llama-parallel": ["-ns", "1", "-n", "2"],  # one request: the buffers are reserved at start
        }.get(tool, ["-no-cnv", "-n", "2", "--ignore-eos", "-p", PROMPT])
        command = [str(_binary(build, tool)), "-m", str(model), *flags, *placement, *generation, *FIXED_FLAGS]
        done = subprocess.run(command, env=_environment(build), capture_output=True, text=True, timeout=600)
    log = done.stdout + "\n" + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{log[-3000:]}")
    extra = [*config.extra, *(["--rpc", ",".join(endpoints)] if endpoints else [])]
    return extra, log


def csv_rows(model_name: str, spec: ModelSpec, config: Config, extra: Sequence[str], log: str) -> list[dict[str, str]]:
    """The CSV rows of one run: one per device of the exit breakdown, with every buffer line."""
    buffers = "; ".join(f"{m['source']} {m['buffer']} {m['kind']}={m['mib']}" for m in _BUFFER.finditer(log))
    exit_table = log[log.rindex("memory breakdown") :]
    rows = []
    for device, memory in parse_breakdown(exit_table).items():
        rows.append(
            {
                "id": config.run_id(model_name),
                "tool": config.tool(spec),
                "model": f"{model_name}.gguf",
                "ngl": str(config.ngl),
                "ctx": str(config.ctx),
                "extra": " ".join(extra),
                "row": device,
                "model_mib": f"{memory.model_mib:g}",
                "context_mib": f"{memory.context_mib:g}",
                "compute_mib": f"{memory.compute_mib:g}",
                "unaccounted_mib": "" if memory.unaccounted_mib is None else f"{memory.unaccounted_mib:g}",
                "nvml_peak_delta_mib": "",
                "maxrss_mib": "",
                "buffers": buffers,
                "note": "",
            }
        )
    return rows


def write_rows(output: Path, rows: Sequence[dict[str, str]]) -> None:
    """Write ground-truth rows (``csv_rows``) to ``output`` with the CSV header."""
    with open(output, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def record(build: Path, output: Path, models: Sequence[str], parallel: int = 2, labels: Sequence[str] = ()) -> int:
    """Measure ``models`` (default: all) and write their rows to ``output``; the number of runs.
    ``labels``: only the configurations with these labels (``rpckinds`` among them), default the
    standard ones (``configs``)."""
    names = list(models) or list(ARCH_MODELS)

    def chosen(spec: ModelSpec) -> list[Config]:
        pool = [*configs(spec), *kind_configs(spec)] if labels else configs(spec)
        return [config for config in pool if not labels or config.label in labels]

    jobs = [(name, config) for name in names for config in chosen(ARCH_MODELS[name])]
    rows: dict[tuple[str, str], list[dict[str, str]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        paths = {name: write_arch_model(scratch, name, data="sparse") for name in names}

        def measure(job: tuple[str, Config]) -> None:
            name, config = job
            extra, log = run_config(build, paths[name], ARCH_MODELS[name], config)
            rows[(name, config.run_id(name))] = csv_rows(name, ARCH_MODELS[name], config, extra, log)
            print(f"recorded {config.run_id(name)}", flush=True)

        with ThreadPoolExecutor(max_workers=parallel) as pool:
            list(pool.map(measure, jobs))
    write_rows(output, [row for name, config in jobs for row in rows[(name, config.run_id(name))]])
    return len(jobs)
