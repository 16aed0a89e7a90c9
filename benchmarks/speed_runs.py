"""Timed llama.cpp runs on a shared machine: pinned processes, the CPU the others used, the host's
memory bandwidth, and llama.cpp's own prompt and decode timings.

Used by ``benchmarks/speed_record.py``. rpc-servers and delay proxies (``rpc_delay_proxy.py``)
are started pinned with ``taskset``, kept by PID and stopped by PID. Before each run the machine is
watched for a second: the busy cores then are other people's work (ours is idle), and a run waits
while they exceed a threshold. During a run, the CPU time of every busy core minus our own
processes' gives the other work that ran beside it (``other_cores``); VM steal time is kept too.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from truth_recording import _BUFFER, _binary, _environment, _free_port, _wait_listening

TICKS = os.sysconf("SC_CLK_TCK")
PROXY = Path(__file__).with_name("rpc_delay_proxy.py")
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_EVAL = re.compile(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs")
_REUSED = re.compile(r"graphs reused =\s*(\d+)")


# ---------------------------------------------------------------------------------------------
# CPU accounting
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU seconds of the whole machine (busy and steal) at one moment."""

    at: float
    busy_s: float
    steal_s: float

    @staticmethod
    def now() -> CpuSample:
        with open("/proc/stat") as handle:
            fields = [int(value) for value in handle.readline().split()[1:]]
        user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
        return CpuSample(time.monotonic(), (user + nice + system + irq + softirq) / TICKS, steal / TICKS)


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a live process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load_average() -> float:
    with open("/proc/loadavg") as handle:
        return float(handle.read().split()[0])


def others_busy(window_s: float = 1.0) -> float:
    """Busy cores over ``window_s`` while none of our processes computes: other people's work."""
    start = CpuSample.now()
    time.sleep(window_s)
    end = CpuSample.now()
    return (end.busy_s - start.busy_s) / (end.at - start.at)


def wait_quiet(threshold_cores: float, max_wait_s: float) -> tuple[float, float]:
    """Wait until the others use at most ``threshold_cores``; (their last busy cores, seconds waited)."""
    started = time.monotonic()
    while True:
        busy = others_busy()
        waited = time.monotonic() - started
        if busy <= threshold_cores or waited >= max_wait_s:
            return busy, waited
        time.sleep(4.0)


# ---------------------------------------------------------------------------------------------
# Host memory bandwidth
# ---------------------------------------------------------------------------------------------

COPY_BYTES = 1 << 30
"""Per core: far beyond the last-level cache (the machine reports 300 MiB of L3)."""


def _copy_worker(core: int, repeats: int, start: Barrier, out: multiprocessing.Queue[float]) -> None:
    os.sched_setaffinity(0, {core})
    source = np.ones(COPY_BYTES // 8)
    target = np.empty_like(source)
    np.copyto(target, source)
    start.wait()
    best = min(_timed_copy(source, target) for _ in range(repeats))
    out.put(2 * source.nbytes / best / 1e9)


def _timed_copy(source: NDArray[np.float64], target: NDArray[np.float64]) -> float:
    began = time.perf_counter()
    np.copyto(target, source)
    return time.perf_counter() - began


def copy_bandwidth_gbps(cores: Sequence[int], repeats: int = 5) -> float:
    """Bytes read plus written per second by a 1 GiB numpy copy on each core at once, best of
    ``repeats`` per core, summed over the cores (GB/s)."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(len(cores))
    out: multiprocessing.Queue[float] = context.Queue()
    workers = [context.Process(target=_copy_worker, args=(core, repeats, start, out)) for core in cores]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join()
    return sum(results)


# ---------------------------------------------------------------------------------------------
# Servers and proxies
# ---------------------------------------------------------------------------------------------


def _cores(cores: Sequence[int]) -> str:
    return ",".join(str(core) for core in cores)


@dataclass
class Services:
    """The rpc-servers and proxies of one configuration: endpoints to pass to ``--rpc``."""

    endpoints: list[str]
    processes: list[subprocess.Popen[bytes]]
    proxy_stats: list[Path]
    commands: list[str]

    def cpu_s(self) -> float:
        return sum(process_cpu_s(process.pid) for process in self.processes)

    def held_ms(self) -> float | None:
        """Median one-way hold the proxies achieved (the largest over directions and proxies; the
        median chunk is a decoding message, the load's bulk transfer is a minority), once stopped."""
        held = []
        for path in self.proxy_stats:
            stats = json.loads(path.read_text())
            held += [stats[direction]["held_ms_p50"] for direction in ("to_server", "to_client")]
        return max(held) if held else None


@contextmanager
def services(
    build: Path, count: int, server_cores: Sequence[int], delay_ms: float | None, scratch: Path
) -> Iterator[Services]:
    """``count`` CPU rpc-servers (``-t 1``) pinned to ``server_cores``; with ``delay_ms`` each behind
    its own delay proxy (pinned the same way). Stopped by PID on exit."""
    started = Services([], [], [], [])
    try:
        for index in range(count):
            port = _free_port()
            server = ["taskset", "-c", _cores(server_cores), str(_binary(build, "ggml-rpc-server"))]
            server += ["-H", "127.0.0.1", "-p", str(port), "-d", "CPU", "-t", "1"]
            started.processes.append(_start(server, build))
            started.commands.append(" ".join(server))
            _wait_listening(f"127.0.0.1:{port}")
            if delay_ms is None:
                started.endpoints.append(f"127.0.0.1:{port}")
                continue
            listen = _free_port()
            stats = scratch / f"proxy{index}.json"
            stats.unlink(missing_ok=True)
            proxy = ["taskset", "-c", _cores(server_cores), sys.executable, str(PROXY), "--listen", str(listen)]
            proxy += ["--target", f"127.0.0.1:{port}", "--delay-ms", f"{delay_ms:g}", "--stats", str(stats)]
            started.processes.append(_start(proxy, build))
            started.commands.append(" ".join(proxy))
            started.proxy_stats.append(stats)
            _wait_listening(f"127.0.0.1:{listen}")
            started.endpoints.append(f"127.0.0.1:{listen}")
        yield started
    finally:
        for process in started.processes:
            process.terminate()
        for process in started.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _start(command: list[str], build: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, env=_environment(build), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# ---------------------------------------------------------------------------------------------
# One timed run
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """One llama-completion run: llama.cpp's timings and what ran beside it."""

    prompt_tokens: int
    prompt_ms: float
    eval_runs: int
    eval_ms: float
    graphs_reused: int
    wall_s: float
    load_avg: float
    others_before: float
    waited_s: float
    other_cores: float
    steal_cores: float
    buffers: str

    @property
    def pp_tok_s(self) -> float:
        return self.prompt_tokens / self.prompt_ms * 1e3

    @property
    def tg_tok_s(self) -> float:
        return self.eval_runs / self.eval_ms * 1e3

    @property
    def ms_per_token(self) -> float:
        return self.eval_ms / self.eval_runs


def timed_run(command: Sequence[str], build: Path, ours: Services, quiet_cores: float, max_wait_s: float) -> Timing:
    """Wait for a quiet machine, run ``command`` once, and account for the CPU beside it."""
    others_before, waited = wait_quiet(quiet_cores, max_wait_s)
    load = load_average()
    before, ours_before, child_before = CpuSample.now(), ours.cpu_s(), children_cpu_s()
    done = subprocess.run(list(command), env=_environment(build), capture_output=True, text=True, timeout=900)
    after, ours_after, child_after = CpuSample.now(), ours.cpu_s(), children_cpu_s()
    log = done.stdout + "\n" + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{log[-3000:]}")
    wall = after.at - before.at
    ours_s = (ours_after - ours_before) + (child_after - child_before)
    prompt, evals, reused = _PROMPT_EVAL.search(log), _EVAL.search(log), _REUSED.search(log)
    if prompt is None or evals is None:
        raise RuntimeError(f"no timings in the log of {' '.join(command)}:\n{log[-3000:]}")
    return Timing(
        prompt_tokens=int(prompt[2]),
        prompt_ms=float(prompt[1]),
        eval_runs=int(evals[2]),
        eval_ms=float(evals[1]),
        graphs_reused=int(reused[1]) if reused else 0,
        wall_s=wall,
        load_avg=load,
        others_before=others_before,
        waited_s=waited,
        other_cores=max(0.0, (after.busy_s - before.busy_s - ours_s) / wall),
        steal_cores=(after.steal_s - before.steal_s) / wall,
        buffers="; ".join(f"{m['source']} {m['buffer']} {m['kind']}={m['mib']}" for m in _BUFFER.finditer(log)),
    )


def spread_pct(values: Sequence[float]) -> float:
    """(max - min) / median, in percent."""
    return (max(values) - min(values)) / statistics.median(values) * 100
