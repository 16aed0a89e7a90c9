"""Speed of the GPUStack-order heuristic: median time per plan on 4, 16, 64 and 256 GPUs.

The model is a 405B-class Q4 model (126 blocks of about 1.7 GiB) that fits on no single worker,
so every strategy runs: single GPU and multi-GPU fail, distributed inference is on (its RPC search
runs on 16 GPUs and is skipped above GPUStack's 16-candidate cap), partial offload decides. Workers
have four 24 GiB GPUs with slightly different free VRAM, as in a live cluster. "cold" clears the
memoised llama.cpp split shapes before every plan (a fresh process); "warm" keeps them (a
scheduler planning the same model again). The baseline, measured in the same run, is one
``memory.claims()`` call on a four-GPU layout of this model; plan times are also given in those
units. Target: cold median under 10 ms at 64 GPUs.

Run: ``.venv/bin/python benchmarks/heuristic_speed.py [--repeats N]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    DeviceAssignment,
    GiB,
    Gpu,
    MemoryProfile,
    MiB,
    Worker,
)
from layerfit.heuristics import plan
from layerfit.heuristics.placement import layer_shape
from layerfit.memory import claims, make_layout

TARGET_GPUS = 64
TARGET_S = 0.010
GPUS_PER_WORKER = 4

PROFILE = MemoryProfile.uniform(
    126,
    1740 * MiB,
    32 * MiB,
    output_weight_bytes=1180 * MiB,
    token_embedding_bytes=1180 * MiB,
    gpu_fixed_bytes=650 * MiB,
    compute=ComputeBuffer(full_offload_bytes=500 * MiB, partial_offload_bytes=1024 * MiB),
    host_fixed_bytes=500 * MiB,
    host_compute=ComputeBuffer(full_offload_bytes=100 * MiB, partial_offload_bytes=600 * MiB),
    rpc_host_fixed_bytes=100 * MiB,
)
DEPLOYMENT = Deployment(name="big", profile=PROFILE, distributed_inference_across_workers=True)


def cluster(n_gpus: int) -> Cluster:
    """Workers of four 24 GiB GPUs; free VRAM 21-24 GiB in steps of 0.25 GiB, varying by worker."""
    workers = []
    for w in range(n_gpus // GPUS_PER_WORKER):
        gpus = tuple(
            Gpu(index=i, total_vram_bytes=24 * GiB, allocatable_vram_bytes=24 * GiB - ((w * 3 + i * 5) % 13) * GiB // 4)
            for i in range(GPUS_PER_WORKER)
        )
        workers.append(
            Worker(id=w, name=f"w{w}", total_ram_bytes=512 * GiB, allocatable_ram_bytes=256 * GiB, gpus=gpus)
        )
    return Cluster(workers=tuple(workers))


def median_seconds(run: Callable[[], object], repeats: int, before: Callable[[], None] = lambda: None) -> float:
    times = []
    for _ in range(repeats):
        before()
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def baseline_seconds(repeats: int) -> float:
    """One claims() call on a four-GPU full-offload layout of the benchmark model."""
    devices = [DeviceAssignment(worker="w0", gpu_index=i, blocks=b) for i, b in enumerate((32, 32, 31, 31))]
    layout = make_layout("w0", PROFILE.n_blocks, devices)
    return median_seconds(lambda: claims(PROFILE, layout), repeats * 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    baseline = baseline_seconds(args.repeats)
    print(f"baseline: one claims() call = {baseline * 1e6:.1f} us")
    print(f"{'GPUs':>5} {'cold ms':>9} {'warm ms':>9} {'cold/claims':>12} {'strategy':<40} {'layers':>6}")
    verdict = True
    for n_gpus in (4, 16, 64, 256):
        target = cluster(n_gpus)
        result = plan(target, DEPLOYMENT)
        cold = median_seconds(lambda t=target: plan(t, DEPLOYMENT), args.repeats, layer_shape.cache_clear)
        warm = median_seconds(lambda t=target: plan(t, DEPLOYMENT), args.repeats)
        layers = result.layout.gpu_layers if result.layout is not None else 0
        strategy = str(result.stats[0].details.get("strategy", ""))
        print(f"{n_gpus:>5} {cold * 1e3:>9.2f} {warm * 1e3:>9.2f} {cold / baseline:>12.0f} {strategy:<40} {layers:>6}")
        if n_gpus == TARGET_GPUS:
            verdict = cold < TARGET_S
    outcome, relation = ("PASS", "<") if verdict else ("FAIL", ">=")
    print(f"{outcome}: cold median at {TARGET_GPUS} GPUs {relation} {TARGET_S * 1e3:.0f} ms")
    return 0 if verdict else 1


if __name__ == "__main__":
    raise SystemExit(main())
