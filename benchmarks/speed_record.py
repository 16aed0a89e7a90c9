"""Record llama.cpp's decode and prompt speed on this machine's CPU: the ground truth the speed model
is fitted and checked on (``tests/gguf_fixtures/ground_truth/speed/``).

The models are ``speed_models.MODELS`` (synthetic, sparse, written once into ``--models``). The
sweeps (``SWEEPS``):

- ``cpu1``, ``cpu2``: every model on the CPU alone, ``-t 1`` pinned to core 0, ``-t 2`` on cores 0-1
  (last, as it needs the whole machine quiet);
- ``ngl``: ``-ngl`` from 0 to all with one ggml-rpc-server device;
- ``rpc2``: two and three rpc-server devices (``-ts 1,1``, ``-ts 1,1,1``), full and half offload;
- ``ncmoe``: ``--n-cpu-moe`` from 0 to every block on the MoE models, all layers on one device;
- ``proxy``: the delay proxy (``rpc_delay_proxy.py``) in front of every rpc-server at 0, 1, 2 and
  5 ms, beside the same runs without a proxy;
- ``knobs``: ``--no-repack``, ``--load-mode none`` and the rpc-server on the other core.

Every run of an RPC configuration uses ``-t 1`` and pins llama-completion, the rpc-servers and the
proxies to core 0: a single sequence runs its devices one after another, so they do not compete,
and the other core is left to the machine's other users (``knobs`` measures the other choice).
Each configuration runs at least ``--repeats`` times; a run during which other work used more than
``quiet_cores`` (``other_cores``; the limit is the row's ``disturbed_above_cores``) counts as
disturbed and up to ``--extra`` more are run. The summary keeps the median and the range of the
undisturbed runs (all runs if fewer than ``--repeats`` were undisturbed). The host's copy
bandwidth (one core, both cores) is measured at the start and after every sweep; each row carries
the latest figures::

    python benchmarks/speed_record.py --llama-cpp ~/.cache/llamacpp-cpu-11434 --models /tmp/speed-models \\
        --output tests/gguf_fixtures/ground_truth/speed/cpu-speed.csv

writes ``cpu-speed.csv`` (one row per configuration) and ``cpu-speed-runs.csv`` (one row per run).
"""

from __future__ import annotations

import argparse
import csv
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from speed_models import MODELS, SpeedModel, write_model
from speed_runs import PROXY, Services, Timing, copy_bandwidth_gbps, services, spread_pct, timed_run
from truth_recording import _binary

CTX = 1024
PROMPT = " ".join(f"w{i}" for i in range(150))
"""128 tokens under llama.cpp's test tokenizer (the log's count is recorded)."""
MAIN_CORE = (0,)
BOTH_CORES = (0, 1)
DELAYS_MS = (0.0, 1.0, 2.0, 5.0)


@dataclass(frozen=True)
class RunConfig:
    """One measured configuration."""

    sweep: str
    model: str
    threads: int = 1
    main_cores: tuple[int, ...] = MAIN_CORE
    ngl: int | None = None
    """``None``: CPU only, no ``--rpc``."""
    rpc_devices: int = 0
    server_cores: tuple[int, ...] = MAIN_CORE
    tensor_split: str = ""
    n_cpu_moe: int = 0
    delay_ms: float | None = None
    """``None``: no proxy; otherwise the one-way delay of a proxy before every rpc-server."""
    extra: tuple[str, ...] = ()

    @property
    def run_id(self) -> str:
        parts = [self.sweep, self.model, f"t{self.threads}"]
        if self.ngl is not None:
            parts += [f"ngl{self.ngl}", f"rpc{self.rpc_devices}"]
        if self.tensor_split:
            parts.append("ts" + self.tensor_split.replace(",", "-"))
        if self.n_cpu_moe:
            parts.append(f"ncmoe{self.n_cpu_moe}")
        if self.delay_ms is not None:
            parts.append(f"delay{self.delay_ms:g}ms")
        if self.server_cores != MAIN_CORE:
            parts.append("srvcore" + "-".join(map(str, self.server_cores)))
        parts += [flag.lstrip("-") for flag in self.extra]
        return "_".join(parts)

    def command(self, build: Path, model_path: Path, endpoints: Sequence[str], gen_tokens: int) -> list[str]:
        command = ["taskset", "-c", ",".join(map(str, self.main_cores)), str(_binary(build, "llama-completion"))]
        command += ["-m", str(model_path), "-c", str(CTX), "-t", str(self.threads), "-fit", "off"]
        if self.ngl is not None:
            command += ["-ngl", str(self.ngl), "--rpc", ",".join(endpoints)]
        if self.tensor_split:
            command += ["-ts", self.tensor_split]
        if self.n_cpu_moe:
            command += ["--n-cpu-moe", str(self.n_cpu_moe)]
        command += [*self.extra, "-no-cnv", "-n", str(gen_tokens), "--ignore-eos", "-p", PROMPT, "-s", "1", "-lv", "4"]
        return command


def _blocks(model: str) -> int:
    return MODELS[model].spec.block_count


def _ngl_steps(model: str) -> list[int]:
    """0, the output layer alone, a quarter, half and three quarters of the blocks, everything."""
    blocks = _blocks(model)
    return [0, 1, *(blocks * k // 4 + 1 for k in (1, 2, 3)), 99]


def _cpu1() -> Iterator[RunConfig]:
    for name in MODELS:
        yield RunConfig("cpu", name, threads=1)


def _cpu2() -> Iterator[RunConfig]:
    for name in MODELS:
        yield RunConfig("cpu", name, threads=2, main_cores=BOTH_CORES)


NGL_MODELS = ("llama-0.1b-f16", "llama-0.5b-q8_0", "llama-1.5b-q4_0", "qwen3moe-0.7b-a0.1b-q8_0", "llama-1.1b-q8_0")
RPC2_MODELS = ("llama-0.5b-q8_0", "llama-1.5b-q4_0", "llama-1.1b-q8_0")


def _ngl() -> Iterator[RunConfig]:
    for name in NGL_MODELS:
        for ngl in _ngl_steps(name):
            yield RunConfig("ngl", name, ngl=ngl, rpc_devices=1)


def _rpc2() -> Iterator[RunConfig]:
    for name in RPC2_MODELS:
        half = _blocks(name) // 2 + 1
        yield RunConfig("rpc2", name, ngl=99, rpc_devices=2, tensor_split="1,1")
        yield RunConfig("rpc2", name, ngl=half, rpc_devices=2, tensor_split="1,1")
    yield RunConfig("rpc2", "llama-0.5b-q8_0", ngl=99, rpc_devices=3, tensor_split="1,1,1")


def _ncmoe() -> Iterator[RunConfig]:
    for name in ("qwen3moe-0.7b-a0.1b-q8_0", "qwen3moe-1.3b-a0.2b-q4_0"):
        blocks = _blocks(name)
        for count in (0, blocks // 4, blocks // 2, 3 * blocks // 4, blocks):
            yield RunConfig("ncmoe", name, ngl=99, rpc_devices=1, n_cpu_moe=count)


def _proxy() -> Iterator[RunConfig]:
    delays: tuple[float | None, ...] = (None, *DELAYS_MS)
    name = "llama-0.5b-q4_0"
    for delay in delays:
        yield RunConfig("proxy", name, ngl=99, rpc_devices=1, delay_ms=delay)
    for delay in delays:
        yield RunConfig("proxy", name, ngl=99, rpc_devices=2, tensor_split="1,1", delay_ms=delay)
    for delay in (None, 0.0, 2.0, 5.0):
        yield RunConfig("proxy", name, ngl=13, rpc_devices=1, delay_ms=delay)
    moe = "qwen3moe-0.7b-a0.1b-q8_0"
    for count in (0, 3, 6, 12):
        for delay in (None, 2.0):
            yield RunConfig("proxy", moe, ngl=99, rpc_devices=1, n_cpu_moe=count, delay_ms=delay)
    held_out = "llama-1.1b-q4_0"
    for delay in (None, 2.0):
        yield RunConfig("proxy", held_out, ngl=99, rpc_devices=1, delay_ms=delay)
        yield RunConfig("proxy", held_out, ngl=99, rpc_devices=2, tensor_split="1,1", delay_ms=delay)


def _knobs() -> Iterator[RunConfig]:
    for name in ("llama-0.5b-q4_0", "llama-1.5b-q4_0"):
        yield RunConfig("knobs", name, extra=("--no-repack",))
    yield RunConfig("knobs", "llama-1.5b-f16", extra=("--load-mode", "none"))
    for cores in (MAIN_CORE, (1,)):
        yield RunConfig("knobs", "llama-0.5b-q8_0", ngl=13, rpc_devices=1, server_cores=cores)


SWEEPS = {"cpu1": _cpu1, "proxy": _proxy, "ngl": _ngl, "ncmoe": _ncmoe, "rpc2": _rpc2, "knobs": _knobs, "cpu2": _cpu2}

SUMMARY_COLUMNS = [
    "split", "id", "sweep", "model", "architecture", "weight_type", "n_layer", "n_embd", "n_ff", "n_head",
    "n_head_kv", "head_dim", "n_vocab", "expert_count", "expert_used_count", "expert_ff", "weight_bytes",
    "decode_read_bytes", "threads", "main_cores", "ngl", "rpc_devices", "server_cores", "tensor_split",
    "n_cpu_moe", "proxy_delay_ms", "proxy_held_ms", "extra", "ctx", "prompt_tokens", "eval_runs", "repeats",
    "disturbed_runs", "disturbed_above_cores", "pp_tok_s", "pp_tok_s_min", "pp_tok_s_max", "tg_tok_s",
    "tg_tok_s_min", "tg_tok_s_max", "ms_per_token", "ms_per_token_spread_pct", "load_avg", "other_cores_max",
    "steal_cores_max", "host_copy_gbps_1core", "host_copy_gbps_2core", "recorded_at", "buffers", "command",
]  # fmt: skip
RUN_COLUMNS = [
    "id", "repeat", "disturbed", "pp_tok_s", "tg_tok_s", "ms_per_token", "prompt_tokens", "eval_runs",
    "graphs_reused", "wall_s", "load_avg", "others_before", "waited_s", "other_cores", "steal_cores",
]  # fmt: skip


ONE_CORE_QUIET = 1.0
BOTH_CORES_QUIET = 0.3


def quiet_cores(config: RunConfig) -> float:
    """Other work (in cores) a run waits below before it starts (up to ``MAX_WAIT_S``), and above
    which it counts as disturbed. A run that uses both cores competes with any other work. A run
    pinned to core 0 leaves core 1 to the machine's other users, who keep about one core busy most
    of the time; that still slows it through the memory and cache they share (0.5b F16: 85 ms per
    token beside 0.37 other cores, 98-107 ms beside 0.5-0.8), which ``other_cores`` records."""
    cores = set(config.main_cores) | (set(config.server_cores) if config.rpc_devices else set())
    return BOTH_CORES_QUIET if len(cores) > 1 else ONE_CORE_QUIET


MAX_WAIT_S = 30.0


def measure(
    build: Path, config: RunConfig, path: Path, model: SpeedModel, repeats: int, extra: int, scratch: Path
) -> tuple[list[Timing], list[bool], str, float | None]:
    """Run one configuration until ``repeats`` undisturbed runs (at most ``repeats + extra`` runs)."""
    quiet = quiet_cores(config)
    timings: list[Timing] = []
    disturbed: list[bool] = []
    with services(build, config.rpc_devices, config.server_cores, config.delay_ms, scratch) as ours:
        command = config.command(build, path, ours.endpoints, model.gen_tokens)
        while len(timings) < repeats + extra and disturbed.count(False) < repeats:
            timing = timed_run(command, build, ours, quiet, max_wait_s=MAX_WAIT_S)
            timings.append(timing)
            disturbed.append(timing.other_cores > quiet)
        shown = _shown_command(build, path.parent, command, ours)
    held = ours.held_ms() if config.delay_ms is not None else None
    return timings, disturbed, shown, held


def _shown_command(build: Path, models: Path, command: Sequence[str], ours: Services) -> str:
    """The shell line that reproduces the run: servers and proxies in the background, then the
    run; ``$LLAMA`` is the build, ``$MODELS`` the model directory, ``$PROMPT`` ``PROMPT``."""
    main = " ".join('"$PROMPT"' if word == PROMPT else word for word in command)
    line = " & ".join([*ours.commands, main])
    for path, name in ((str(build), "$LLAMA"), (str(models), "$MODELS"), (sys.executable, "python")):
        line = line.replace(path, name)
    return re.sub(r"--stats \S+", "--stats proxy.json", line).replace(str(PROXY), "benchmarks/rpc_delay_proxy.py")


def summary_row(
    config: RunConfig,
    model: SpeedModel,
    timings: Sequence[Timing],
    disturbed: Sequence[bool],
    command: str,
    held_ms: float | None,
    bandwidth: tuple[float, float],
) -> dict[str, str]:
    kept = [t for t, bad in zip(timings, disturbed, strict=True) if not bad]
    if len(kept) < 3:
        kept = list(timings)
    spec = model.spec
    pp = [t.pp_tok_s for t in kept]
    tg = [t.tg_tok_s for t in kept]
    ms = [t.ms_per_token for t in kept]
    return {
        "split": model.split,
        "id": config.run_id,
        "sweep": config.sweep,
        "model": model.name,
        "architecture": spec.architecture,
        "weight_type": spec.weight_type.name,
        "n_layer": str(spec.block_count),
        "n_embd": str(spec.embedding_length),
        "n_ff": str(spec.feed_forward_length),
        "n_head": str(spec.head_count),
        "n_head_kv": str(spec.head_count_kv),
        "head_dim": str(spec.head_dim),
        "n_vocab": str(spec.vocab_size),
        "expert_count": str(spec.expert_count),
        "expert_used_count": str(spec.expert_used_count),
        "expert_ff": str(spec.expert_feed_forward_length),
        "weight_bytes": str(model.weight_bytes()),
        "decode_read_bytes": str(model.decode_read_bytes()),
        "threads": str(config.threads),
        "main_cores": "-".join(map(str, config.main_cores)),
        "ngl": "" if config.ngl is None else str(config.ngl),
        "rpc_devices": str(config.rpc_devices),
        "server_cores": "-".join(map(str, config.server_cores)) if config.rpc_devices else "",
        "tensor_split": config.tensor_split,
        "n_cpu_moe": str(config.n_cpu_moe),
        "proxy_delay_ms": "" if config.delay_ms is None else f"{config.delay_ms:g}",
        "proxy_held_ms": "" if held_ms is None else f"{held_ms:.3f}",
        "extra": " ".join(config.extra),
        "ctx": str(CTX),
        "prompt_tokens": str(kept[0].prompt_tokens),
        "eval_runs": str(kept[0].eval_runs),
        "repeats": str(len(kept)),
        "disturbed_runs": str(sum(disturbed)),
        "disturbed_above_cores": f"{quiet_cores(config):g}",
        "pp_tok_s": f"{statistics.median(pp):.2f}",
        "pp_tok_s_min": f"{min(pp):.2f}",
        "pp_tok_s_max": f"{max(pp):.2f}",
        "tg_tok_s": f"{statistics.median(tg):.3f}",
        "tg_tok_s_min": f"{min(tg):.3f}",
        "tg_tok_s_max": f"{max(tg):.3f}",
        "ms_per_token": f"{statistics.median(ms):.3f}",
        "ms_per_token_spread_pct": f"{spread_pct(ms):.1f}",
        "load_avg": f"{statistics.median(t.load_avg for t in kept):.2f}",
        "other_cores_max": f"{max(t.other_cores for t in kept):.2f}",
        "steal_cores_max": f"{max(t.steal_cores for t in kept):.3f}",
        "host_copy_gbps_1core": f"{bandwidth[0]:.2f}",
        "host_copy_gbps_2core": f"{bandwidth[1]:.2f}",
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "buffers": kept[0].buffers,
        "command": command,
    }


def run_rows(config: RunConfig, timings: Sequence[Timing], disturbed: Sequence[bool]) -> list[dict[str, str]]:
    return [
        {
            "id": config.run_id,
            "repeat": str(index),
            "disturbed": str(int(bad)),
            "pp_tok_s": f"{t.pp_tok_s:.2f}",
            "tg_tok_s": f"{t.tg_tok_s:.3f}",
            "ms_per_token": f"{t.ms_per_token:.3f}",
            "prompt_tokens": str(t.prompt_tokens),
            "eval_runs": str(t.eval_runs),
            "graphs_reused": str(t.graphs_reused),
            "wall_s": f"{t.wall_s:.2f}",
            "load_avg": f"{t.load_avg:.2f}",
            "others_before": f"{t.others_before:.2f}",
            "waited_s": f"{t.waited_s:.0f}",
            "other_cores": f"{t.other_cores:.2f}",
            "steal_cores": f"{t.steal_cores:.3f}",
        }
        for index, (t, bad) in enumerate(zip(timings, disturbed, strict=True))
    ]


class _Appender:
    """Rows appended to a CSV as they are measured (a header when the file is new)."""

    def __init__(self, path: Path, columns: list[str], append: bool) -> None:
        fresh = not (append and path.exists())
        self.handle = open(path, "w" if fresh else "a", newline="")  # noqa: SIM115 - closed in close()
        self.writer = csv.DictWriter(self.handle, fieldnames=columns)
        if fresh:
            self.writer.writeheader()

    def write(self, rows: Sequence[dict[str, str]]) -> None:
        self.writer.writerows(rows)
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


def _recorded_ids(path: Path) -> set[str]:
    """The configurations already in the summary CSV (``--append`` skips them)."""
    if not path.exists():
        return set()
    with open(path, newline="") as handle:
        return {row["id"] for row in csv.DictReader(handle)}


def bandwidth_now() -> tuple[float, float]:
    figures = copy_bandwidth_gbps(MAIN_CORE), copy_bandwidth_gbps(BOTH_CORES)
    print(f"host copy bandwidth: {figures[0]:.2f} GB/s one core, {figures[1]:.2f} GB/s both", flush=True)
    return figures


def record(args: argparse.Namespace) -> None:
    args.models.mkdir(parents=True, exist_ok=True)
    summary = _Appender(args.output, SUMMARY_COLUMNS, args.append)
    runs = _Appender(args.output.with_name(args.output.stem + "-runs.csv"), RUN_COLUMNS, args.append)
    done = _recorded_ids(args.output) if args.append else set()
    bandwidth = bandwidth_now()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for sweep in args.sweeps:
                for config in SWEEPS[sweep]():
                    if config.run_id in done or (args.only and not any(part in config.run_id for part in args.only)):
                        continue
                    model = MODELS[config.model]
                    path = write_model(args.models, model)
                    timings, disturbed, command, held = measure(
                        args.llama_cpp, config, path, model, args.repeats, args.extra, Path(scratch)
                    )
                    row = summary_row(config, model, timings, disturbed, command, held, bandwidth)
                    summary.write([row])
                    runs.write(run_rows(config, timings, disturbed))
                    print(
                        f"{config.run_id}: tg {row['tg_tok_s']} tok/s ({row['ms_per_token']} ms, "
                        f"±{row['ms_per_token_spread_pct']}%), pp {row['pp_tok_s']} tok/s, "
                        f"{row['repeats']} runs, {row['disturbed_runs']} disturbed, load {row['load_avg']}",
                        flush=True,
                    )
                bandwidth = bandwidth_now()
    finally:
        summary.close()
        runs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-cpp", type=Path, required=True, help="directory of the CPU build")
    parser.add_argument("--models", type=Path, required=True, help="directory for the sparse model files")
    parser.add_argument("--output", type=Path, required=True, help="summary CSV (runs go to NAME-runs.csv)")
    parser.add_argument("--sweeps", nargs="+", choices=list(SWEEPS), default=list(SWEEPS))
    parser.add_argument("--only", nargs="*", default=[], help="only configurations whose id contains one of these")
    parser.add_argument("--repeats", type=int, default=3, help="undisturbed runs per configuration")
    parser.add_argument("--extra", type=int, default=2, help="further runs allowed when some are disturbed")
    parser.add_argument("--append", action="store_true", help="append to existing CSVs, skipping recorded ids")
    parser.add_argument("--list", action="store_true", help="print the configurations and stop")
    args = parser.parse_args()
    if args.list:
        for sweep in args.sweeps:
            for config in SWEEPS[sweep]():
                print(config.run_id)
        return
    signal.signal(signal.SIGTERM, _interrupt)
    record(args)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM stops the recording as Ctrl-C does: servers and proxies are stopped by PID."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    main()
