"""Reading a large cluster file: ``layerfit.io.documents.load_file`` against PyYAML's ``yaml.load`` (libyaml's
safe loader) plus the same validation, in the same run.

The cluster is written in the examples' style (block mappings per worker, one flow mapping per GPU,
sizes as ``"80 GiB"``), 8 GPUs per worker, workers added until the file has ``--megabytes`` MB.
Prints the time of each and of each MB, and the peak memory of the process; PASS when
``load_file`` takes at most half of the baseline and the per-MB time of the whole file is within
1.5 times that of a fifth of it (linear).

Run: ``.venv/bin/python benchmarks/yaml_load.py [--megabytes 5]``
"""

from __future__ import annotations

import argparse
import io
import resource
import sys
import tempfile
import time
from pathlib import Path

import yaml

from layerfit.domain import Cluster
from layerfit.io.documents import load_file, load_model, yaml_loader


def cluster_text(megabytes: float) -> str:
    out = io.StringIO()
    out.write("workers:\n")
    worker = 0
    while out.tell() < megabytes * 1e6:
        out.write(
            f"  - id: {worker}\n    name: worker-{worker:05d}\n    address: 10.{worker // 65536 % 256}."
            f"{worker // 256 % 256}.{worker % 256}\n    total_ram_bytes: 512 GiB\n    allocatable_ram_bytes: 480 GiB\n"
            "    gpus:\n"
        )
        for gpu in range(8):
            out.write(
                f"      - {{index: {gpu}, type: cuda, total_vram_bytes: 80 GiB, allocatable_vram_bytes: 78 GiB}}\n"
            )
        worker += 1
    return out.getvalue()


def timed_load(path: Path) -> tuple[float, Cluster]:
    started = time.perf_counter()
    cluster = load_file(Cluster, path)
    return time.perf_counter() - started, cluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        small, large = Path(folder) / "small.yaml", Path(folder) / "large.yaml"
        small.write_text(cluster_text(args.megabytes / 5), encoding="utf-8")
        large.write_text(cluster_text(args.megabytes), encoding="utf-8")
        small_s, _ = timed_load(small)
        large_s, cluster = timed_load(large)
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        started = time.perf_counter()
        baseline = load_model(Cluster, yaml.load(large.read_text(encoding="utf-8"), Loader=yaml_loader()), "baseline")
        baseline_s = time.perf_counter() - started
        small_mb, large_mb = small.stat().st_size / 1e6, large.stat().st_size / 1e6
    gpus = sum(len(worker.gpus) for worker in cluster.workers)
    print(f"cluster: {large_mb:.1f} MB, {len(cluster.workers)} workers, {gpus} GPUs")
    per_mb = f"{large_s / large_mb:.2f} s/MB; on {small_mb:.1f} MB: {small_s / small_mb:.2f} s/MB"
    print(f"load_file: {large_s:.2f} s ({per_mb})")
    print(f"baseline yaml.load ({yaml_loader().__name__}) + validation: {baseline_s:.2f} s")
    print(f"peak memory of the process: {peak_mib:.0f} MiB")
    same = baseline == cluster
    fast = large_s <= baseline_s / 2
    linear = large_s / large_mb <= 1.5 * small_s / small_mb
    print(f"same cluster: {same}; at most half the baseline: {fast}; linear: {linear}")
    ok = same and fast and linear
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
