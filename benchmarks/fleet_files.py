"""Very large fleet files for ``layerfit replan``: a cluster of ``workers`` x ``gpus`` GPUs (24, 48
or 80 GiB, 55-100 % free, as ``fleet_bench.make_cluster``), deployments of ``fleet_bench``'s model
catalogue in the examples' YAML style (profiles inline, ``[465 MiB x 80]``), ``replicas`` replicas
in all (at most 1,024 per deployment), and a share of them running now (single-GPU current
placements on distinct GPUs, some pinned).

Run: ``.venv/bin/python benchmarks/fleet_files.py OUT.yaml --workers 2950 --gpus 8 --replicas 200``
"""

from __future__ import annotations

import argparse
import io
import random
from pathlib import Path

from fleet_bench import CATALOG

MAX_PER_DEPLOYMENT = 1024
ROLE = "{fixed_bytes: 610 MiB, compute: {full_offload_bytes: 300 MiB, partial_offload_bytes: 600 MiB}}"


def profile_text(size_gib: float, n_blocks: int) -> str:
    """``fleet_bench.profile`` as YAML (block sizes in KiB, so the ``x`` shorthand stays exact)."""
    per_block_kib = int(size_gib * 1024 * 1024 / n_blocks)
    return (
        "    profile:\n"
        f"      block_weight_bytes: [{per_block_kib * 9 // 10} KiB x {n_blocks}]\n"
        f"      block_kv_bytes: [{per_block_kib // 10} KiB x {n_blocks}]\n"
        "      output_weight_bytes: 400 MiB\n      token_embedding_bytes: 400 MiB\n"
        f"      main: {ROLE}\n      local: {ROLE}\n      rpc: {ROLE}\n"
        "      host_fixed_bytes: 256 MiB\n"
        "      host_compute: {full_offload_bytes: 40 MiB, partial_offload_bytes: 60 MiB}\n"
        "      rpc_host_fixed_bytes: 128 MiB\n"
    )


def replica_counts(rng: random.Random, replicas: int, deployments: int) -> list[int]:
    """``replicas`` split over ``deployments`` (each at least 1, at most 1,024)."""
    deployments = max(deployments, -(-replicas // MAX_PER_DEPLOYMENT))
    counts = [1] * deployments
    for _ in range(replicas - deployments):
        open_ = [i for i, c in enumerate(counts) if c < MAX_PER_DEPLOYMENT]
        counts[rng.choice(open_[: max(1, len(open_) // 4)] if rng.random() < 0.5 else open_)] += 1
    return counts


DEFAULT_WEIGHTS = (4, 4, 3, 3, 2, 1, 1)
"""How often each model of ``fleet_bench.CATALOG`` (2.5 to 130 GiB) is drawn."""


def fleet_text(
    workers: int,
    gpus: int,
    replicas: int,
    deployments: int,
    running: float = 0.5,
    seed: int = 1,
    weights: tuple[float, ...] = DEFAULT_WEIGHTS,
) -> str:
    """The fleet file's text (see the module's docstring)."""
    rng = random.Random(seed)
    out = io.StringIO()
    out.write("cluster:\n  workers:\n")
    sizes: list[int] = []
    for w in range(workers):
        gpu_gib = rng.choice([24, 48, 80])
        sizes.append(gpu_gib)
        ram = rng.choice([128, 256, 512])
        out.write(
            f"    - id: {w}\n      name: w{w:05d}\n      address: 10.{w // 65536 % 256}.{w // 256 % 256}.{w % 256}\n"
            f"      total_ram_bytes: {ram} GiB\n      allocatable_ram_bytes: {ram * 3 // 4} GiB\n"
        )
        out.write(f"      unified_memory: {'true' if rng.random() < 0.05 else 'false'}\n" if gpus else "")
        out.write("      gpus:\n" if gpus else "      gpus: []\n")
        for i in range(gpus):
            free_mib = int(gpu_gib * 1024 * rng.uniform(0.55, 1.0))
            out.write(
                f"        - {{index: {i}, type: cuda, total_vram_bytes: {gpu_gib} GiB, "
                f"allocatable_vram_bytes: {free_mib} MiB}}\n"
            )
    out.write("\ndeployments:\n")
    counts = replica_counts(rng, replicas, deployments)
    models = []
    for d, count in enumerate(counts):
        size, blocks = rng.choices(CATALOG, weights=weights)[0]
        models.append((size, blocks))
        out.write(
            f"  - name: d{d:04d}\n    replicas: {count}\n    priority: {rng.choice([0, 0, 1, 2, 3])}\n"
            f"    cpu_offloading: {'true' if rng.random() < 0.3 else 'false'}\n"
            f"    distributed_inference_across_workers: {'true' if size >= 70 or rng.random() < 0.2 else 'false'}\n"
            '    backend_parameters: ["--ctx-size 8192"]\n'
        )
        out.write(profile_text(size, blocks))
    current = io.StringIO()
    free = [(w, i) for w in range(workers) for i in range(gpus)]
    rng.shuffle(free)
    for d, count in enumerate(counts):
        size, blocks = models[d]
        for r in range(count):
            if not free or rng.random() >= running:
                continue
            w, i = free.pop()
            if size * 1.1 > sizes[w]:
                continue  # only single-GPU placements that fit roughly
            pinned = "    pinned: true\n" if rng.random() < 0.05 else ""
            current.write(
                f"  - deployment: d{d:04d}\n    replica: {r}\n{pinned}    layout:\n      main_worker: w{w:05d}\n"
                f"      n_blocks: {blocks}\n      output_offloaded: true\n"
                f"      devices: [{{worker: w{w:05d}, gpu_index: {i}, blocks: {blocks}}}]\n"
            )
    out.write(f"\ncurrent:\n{current.getvalue()}" if current.tell() else "\ncurrent: []\n")
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--workers", type=int, default=2950)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per worker")
    parser.add_argument("--replicas", type=int, default=200)
    parser.add_argument("--deployments", type=int, default=0, help="default: replicas / 4, at least 1")
    parser.add_argument("--running", type=float, default=0.5, help="share of replicas running now")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--weights", default=",".join(map(str, DEFAULT_WEIGHTS)), help="how often each catalogue model is drawn"
    )
    args = parser.parse_args()
    deployments = args.deployments or max(1, args.replicas // 4)
    weights = tuple(float(w) for w in args.weights.split(","))
    text = fleet_text(args.workers, args.gpus, args.replicas, deployments, args.running, args.seed, weights)
    args.out.write_text(text, encoding="utf-8")
    print(f"{args.out}: {len(text) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
