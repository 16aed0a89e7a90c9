"""Round-number models, clusters and calibration constants for the speed model's hand-worked tests."""

from __future__ import annotations

from typing import Any

import pytest

from layerfit.domain.cluster import Cluster
from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import SpeedShape
from layerfit.speed import calibration

GB = 10**9


def round_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    """Constants the hand-worked numbers use, whatever the fitted ones are:
    a GPU reaches 0.5 of its bandwidth and FLOPS and costs 10 us per layer; a CPU thread reads
    10 GB/s, all together 0.8 of the RAM bandwidth, and computes 50 GFLOPS decoding, 25 GFLOPS on
    prompts, 20 us per layer; the main process 0.5 ms per token; an rpc-server 0.2 ms; a local
    copy 20 us; 3 transfers per block with host experts; host to GPU 20 GB/s."""
    family = calibration.Family(bandwidth=0.5, compute=0.5, layer_us=10.0)
    monkeypatch.setattr(calibration, "FAMILIES", {**calibration.FAMILIES, "ada": family, "unknown": family})
    for name, value in {
        "CPU_BANDWIDTH_PER_THREAD_GBPS": 10.0,
        "CPU_BANDWIDTH_EFFICIENCY": 0.8,
        "CPU_DECODE_GFLOPS_PER_THREAD": 50.0,
        "CPU_PROMPT_GFLOPS_PER_THREAD": 25.0,
        "CPU_LAYER_US": 20.0,
        "MAIN_TOKEN_MS": 0.5,
        "RPC_SERVER_FIXED_MS": 0.2,
        "GPU_SYNC_US": 20.0,
        "EXPERT_SPLIT_TRANSFERS": 3,
        "HOST_TO_GPU_GBPS": 20.0,
    }.items():
        monkeypatch.setattr(calibration, name, value)


def round_shape(n_blocks: int = 4, **overrides: Any) -> SpeedShape:
    """Blocks of 1 GB read per token (2 GFLOP), 1,000 bytes of KV and 100 FLOPs of attention per
    cached position; an output layer of 0.5 GB (1 GFLOP); n_embd 4096, vocab 32,000, ctx 4096."""
    fields: dict[str, Any] = {
        "block_dense_bytes": (GB,) * n_blocks,
        "block_expert_bytes": (0,) * n_blocks,
        "block_kv_position_bytes": (1000,) * n_blocks,
        "block_window": (0,) * n_blocks,
        "block_state_bytes": (0,) * n_blocks,
        "block_dense_flops": (2 * GB,) * n_blocks,
        "block_expert_flops": (0,) * n_blocks,
        "block_attention_flops": (100,) * n_blocks,
        "output_bytes": GB // 2,
        "output_flops": GB,
        "embedding_length": 4096,
        "vocab_size": 32_000,
        "ctx": 4096,
    }
    return SpeedShape.model_validate(fields | overrides)


def round_profile(shape: SpeedShape | None = None, **overrides: Any) -> MemoryProfile:
    shape = shape or round_shape()
    n = shape.n_blocks
    experts = shape.block_expert_bytes if any(shape.block_expert_bytes) else None
    fields: dict[str, Any] = {
        "block_weight_bytes": tuple(
            d + e for d, e in zip(shape.block_dense_bytes, shape.block_expert_bytes, strict=True)
        ),
        "block_kv_bytes": (shape.ctx * 1000,) * n,
        "block_expert_bytes": experts,
        "output_weight_bytes": shape.output_bytes,
        "speed": shape,
    }
    return MemoryProfile.model_validate(fields | overrides)


def _gpu(index: int, name: str, **figures: Any) -> dict[str, Any]:
    return {"index": index, "name": name, "total_vram_bytes": "80 GiB", "allocatable_vram_bytes": "80 GiB", **figures}


def round_cluster(**main_fields: Any) -> Cluster:
    """Workers ``a`` (main: two GPUs of 1,000 GB/s and 100 TFLOPS, RAM 100 GB/s, 4 threads), ``b``
    and ``c`` (one such GPU each); links of 10 Gbit/s with a 1 ms round trip."""
    figures = {"memory_bandwidth_gbps": 1000, "fp16_tflops": 100}
    network = {"bandwidth_gbps": 10, "rtt_ms": 1}

    def worker(name: str, gpus: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        return {
            "id": name,
            "name": name,
            "total_ram_bytes": "512 GiB",
            "allocatable_ram_bytes": "512 GiB",
            "ram_bandwidth_gbps": 100,
            "cpu_threads": 4,
            "network": network,
            "gpus": gpus,
            **fields,
        }

    gpu = "NVIDIA GeForce RTX 4090"
    return Cluster.model_validate(
        {
            "workers": [
                worker("a", [_gpu(0, gpu, **figures), _gpu(1, gpu, **figures)], **main_fields),
                worker("b", [_gpu(0, gpu, **figures)]),
                worker("c", [_gpu(0, gpu, **figures)]),
            ]
        }
    )


def layout(
    *devices: tuple[str, int, int], n_blocks: int = 4, output: bool = True, experts: tuple[int, ...] = ()
) -> Layout:
    """Devices as (worker, GPU index, blocks), main worker ``a``."""
    return Layout(
        main_worker="a",
        n_blocks=n_blocks,
        devices=tuple(DeviceAssignment(worker=w, gpu_index=i, blocks=b) for w, i, b in devices),
        output_offloaded=output and bool(devices),
        host_expert_blocks=experts,
    )
