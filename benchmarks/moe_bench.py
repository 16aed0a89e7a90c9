"""MoE placement: layers and expert blocks on GPUs, host bytes read per token, per engine.

Profiles of Qwen3-30B-A3B, Qwen3-235B-A22B, gpt-oss-120b and DeepSeek-V3 (headers from
``layerfit.testing.synthetic``, ``-c 8192``) on one worker with GPUs of 8-48 GiB (one, or
several: ``24+8``) and plenty of RAM. Engines: the planner (heuristic with the MoE stage, then
CP-SAT placing experts block by block; its status shown), the heuristic alone with the MoE stage
(the first k expert blocks), and GPUStack's order (``expert_offload=False``: layer-level partial
offload).
Host bytes per token: the dense weights of host-resident tensors in full plus their expert
tensors times ``expert_used_count / expert_count`` (only the routed experts are read).

    python benchmarks/moe_bench.py [--models qwen3-30b-a3b ...] [--vram-gib 8 16 24 48 24+8]
    python benchmarks/moe_bench.py --fit-params ~/.cache/llamacpp-cpu-11434 [--device-mib 4096 ...]

``--fit-params BUILD_DIR`` compares with llama.cpp's own fit instead (``moe_fit_params.py``).

Timings are wall-clock on whatever machine runs it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from layerfit.domain import Cluster, Deployment, Gpu, LlamaParams, MemoryProfile, PlannerConfig, Worker
from layerfit.domain.layout import Layout
from layerfit.estimators import estimate_profile
from layerfit.estimators.model_shape import ModelShape
from layerfit.estimators.shape import read_gguf
from layerfit.heuristics.moe import plan_with_experts
from layerfit.memory.experts import with_host_experts
from layerfit.planning.planner import plan
from layerfit.testing.synthetic import REAL_MODELS, write_gguf

GiB = 1024**3
MODELS = ("qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b", "deepseek-v3")
CONFIG = PlannerConfig(time_limit_s=10)


def cluster(vram_gib: list[int]) -> Cluster:
    gpus = tuple(Gpu(index=i, total_vram_bytes=v * GiB, allocatable_vram_bytes=v * GiB) for i, v in enumerate(vram_gib))
    worker = Worker(id=1, name="w", total_ram_bytes=2048 * GiB, allocatable_ram_bytes=2048 * GiB, gpus=gpus)
    return Cluster(workers=(worker,))


def host_bytes_per_token(shape: ModelShape, profile: MemoryProfile, layout: Layout) -> float:
    share = shape.expert_used_count / shape.expert_count if shape.expert_count else 1.0
    total = 0.0
    for block in layout.experts_on_host:
        experts = profile.expert_bytes(block)
        dense = profile.block_weight_bytes[block] - experts if block < layout.cpu_blocks else 0
        total += dense + experts * share
    if not layout.output_offloaded:
        total += profile.output_weight_bytes
    return total


def row(engine: str, shape: ModelShape, profile: MemoryProfile, layout: Layout | None, seconds: float) -> str:
    if layout is None:
        return f"  {engine:22s} nothing fits ({seconds * 1000:.0f} ms)"
    moe_blocks = [b for b in range(profile.n_blocks) if profile.expert_bytes(b)]
    on_gpus = sum(1 for b in moe_blocks if b >= layout.cpu_blocks and b not in layout.host_expert_blocks)
    host = host_bytes_per_token(shape, profile, layout) / GiB
    return (
        f"  {engine:22s} layers {layout.gpu_layers:3d}/{profile.n_layers}  expert blocks on GPUs "
        f"{on_gpus:3d}/{len(moe_blocks)}  host GiB/token {host:7.3f}  {seconds * 1000:8.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument(
        "--vram-gib", nargs="*", default=["8", "16", "24", "48", "24+8"], help="GPU sizes of the worker, e.g. 24+8"
    )
    parser.add_argument("--fit-params", type=Path, metavar="BUILD_DIR", help="CPU build with llama-fit-params")
    parser.add_argument("--device-mib", nargs="*", type=int, default=[4096, 8192, 12288, 16384])
    parser.add_argument("--ctx", type=int, default=8192)
    args = parser.parse_args()
    if args.fit_params is not None:
        from moe_fit_params import compare

        with tempfile.TemporaryDirectory() as scratch:
            for name in args.models if args.models != list(MODELS) else ["qwen3-30b-a3b"]:
                compare(args.fit_params.expanduser(), Path(scratch), name, args.ctx, args.device_mib)
        return
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models:
            path = Path(scratch) / f"{name}.gguf"
            write_gguf(path, REAL_MODELS[name])
            shape = read_gguf(str(path))
            profile = estimate_profile(shape, LlamaParams(ctx_size=8192))
            deployment = Deployment(name=name, profile=profile)
            print(f"{name}: {profile.n_blocks} blocks, {sum(profile.block_weight_bytes) / GiB:.1f} GiB of blocks")
            for vram in args.vram_gib:
                sizes = [int(size) for size in vram.split("+")]
                print(f" GPUs of {' + '.join(map(str, sizes))} GiB on one worker")
                where = cluster(sizes)
                started = time.perf_counter()
                planned = plan(where, deployment, CONFIG, profile, explain=False)
                solver = next((s.status.value for s in planned.stats if s.engine == "cp-sat"), "-")
                print(row(f"planner ({solver})", shape, profile, planned.layout, time.perf_counter() - started))
                started = time.perf_counter()
                quick, blocks = plan_with_experts(where, deployment, CONFIG, profile)
                layout = None if quick.layout is None else with_host_experts(quick.layout, blocks)
                print(row("heuristic (MoE stage)", shape, profile, layout, time.perf_counter() - started))
                started = time.perf_counter()
                parity = plan(
                    where, deployment, CONFIG.model_copy(update={"expert_offload": False}), profile, explain=False
                )
                print(row("GPUStack order", shape, profile, parity.layout, time.perf_counter() - started))


if __name__ == "__main__":
    main()
