"""``layerfit estimate --gpu NAME``: the predicted speed of the estimate's reference layouts on one
GPU of that name (``layerfit.speed``), with the host's stated defaults.

The speed model and the cluster types are imported only when a GPU is named: a plain estimate
does not build them (``tests/test_estimator_gguf_constants.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerfit.domain.base import MAX_BYTES, Frozen
from layerfit.domain.speed import SpeedPrediction
from layerfit.errors import InputError

if TYPE_CHECKING:
    from layerfit.domain import Cluster, LlamaParams, MemoryProfile

WORKER = "gpu"
MAX_NAME = 200
MAX_SIZE = MAX_BYTES
"""The reference worker's memory: the speed of a layout does not depend on what is free."""


class EstimateSpeed(Frozen):
    """The predicted speed of the reference layouts on one GPU named ``gpu_name``."""

    gpu_name: str
    full_offload: SpeedPrediction
    """Every layer on the GPU."""
    cpu_only: SpeedPrediction
    """Nothing offloaded (``-ngl 0 --device none``)."""
    requested: SpeedPrediction | None = None
    """The given ``-ngl N`` (N > 0), split as llama.cpp splits it; ``None`` without one."""


def reference_cluster(gpu_name: str) -> Cluster:
    """One worker with one GPU of that name (an Apple one on a unified-memory worker), memory
    without limit; its CPU and RAM figures are the speed model's stated defaults."""
    if not gpu_name.strip() or len(gpu_name) > MAX_NAME or not gpu_name.isprintable():
        raise InputError(
            "--gpu", f"expected a GPU name of printable text (at most {MAX_NAME} characters), got {gpu_name[:40]!r}"
        )
    from layerfit.domain.cluster import Cluster
    from layerfit.speed.gpu_table import match

    spec = match(gpu_name)
    apple = spec is not None and spec.family == "apple"
    gpu = {"index": 0, "type": "mps" if apple else "cuda", "name": gpu_name}
    return Cluster.model_validate(
        {
            "workers": [
                {
                    "id": WORKER,
                    "name": WORKER,
                    "unified_memory": apple,
                    "total_ram_bytes": MAX_SIZE,
                    "allocatable_ram_bytes": MAX_SIZE,
                    "gpus": [gpu | {"total_vram_bytes": MAX_SIZE, "allocatable_vram_bytes": MAX_SIZE}],
                }
            ]
        }
    )


def estimate_speed(profile: MemoryProfile, params: LlamaParams, gpu_name: str) -> EstimateSpeed:
    """The speed of full offload, CPU only and the requested ``-ngl`` on one GPU of that name."""
    from layerfit.domain.layout import DeviceAssignment, Layout
    from layerfit.memory import layout_from_flags, make_layout
    from layerfit.memory.experts import engine_blocks, with_host_experts
    from layerfit.speed import predict, settings_for

    cluster = reference_cluster(gpu_name)
    settings = settings_for(params, ctx=profile.speed.ctx if profile.speed is not None else None)
    n = profile.n_blocks
    full = make_layout(WORKER, n, [DeviceAssignment(worker=WORKER, gpu_index=0, blocks=n)])
    ngl = params.n_gpu_layers
    requested = layout_from_flags(WORKER, [(WORKER, 0)], n, ngl) if ngl else None
    experts = engine_blocks(profile)  # the experts -ot/--n-cpu-moe keep on the host

    def speed(layout: Layout) -> SpeedPrediction:
        return predict(profile, with_host_experts(layout, experts), cluster, settings)

    return EstimateSpeed(
        gpu_name=gpu_name,
        full_offload=speed(full),
        cpu_only=speed(Layout(main_worker=WORKER, n_blocks=n)),
        requested=speed(requested) if requested is not None else None,
    )


def _line(title: str, speed: SpeedPrediction) -> str:
    largest = speed.largest_text(2)
    return (
        f"  {title:<22} {speed.decode_tokens_per_s:>9.1f} tokens/s decode, {speed.prompt_tokens_per_s:>9.1f} tokens/s "
        f"prompt ({largest})"
    )


def speed_table(speed: EstimateSpeed, n_gpu_layers: int | None) -> list[str]:
    """The predicted speeds as text, with every assumption once."""
    rows = [("full offload, one GPU", speed.full_offload), ("CPU only", speed.cpu_only)]
    if speed.requested is not None:
        rows.append((f"-ngl {n_gpu_layers}", speed.requested))
    assumed = dict.fromkeys(text for _, prediction in rows for text in prediction.assumptions)
    return [
        f"predicted speed on one {speed.gpu_name} (one sequence, {speed.full_offload.context_fill} tokens cached):",
        *(_line(title, prediction) for title, prediction in rows),
        *(f"  assumed: {text}" for text in assumed),
    ]
