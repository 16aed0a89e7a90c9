"""``-nkvo`` (``--no-kv-offload``): the KV cache and the attention over it stay on the host.

Measured on the CPU build with rpc-server devices (``ground_truth/cpu-devices.csv``): every
block's cache sits in host RAM whatever the layout; a device no longer holds the attention's masks
or scores (llama-q4_0's one device 70.51 MiB at 4096 and 16384 cells, with and without flash
attention; gemma3, qwen3moe the same: the rule without ``m`` and ``A`` gives 70.50); the host keeps
its own buffer (12.02 MiB at 4096 cells, 24.02 at 16384) and, without flash attention, computes
the scores too (79.02 where the rule gives 16.00 without them); llama.cpp turns pipeline
parallelism off (it needs the KV offloaded). Recurrent state and encoders were not measured so:
refused.
"""

from __future__ import annotations

from layerfit.errors import InputError
from layerfit.estimators.compute import Activations, ComputeEstimate
from layerfit.estimators.model_shape import ModelShape

FLAG = "-nkvo"
GPU_BUILD_WARNING = (
    "-nkvo on a GPU build: the KV cache and attention were measured on the CPU backend only; a GPU "
    "build may copy the cache to the GPU for large batches (op offload), which is not modelled"
)


def check_modelled(shape: ModelShape, embedding: bool) -> None:
    """``InputError`` naming ``-nkvo`` for models whose run with it was not measured."""
    if any(shape.recurrent_layers):
        raise InputError(
            FLAG,
            f"{shape.architecture} keeps recurrent state: with -nkvo its scan moves to the host, which is not "
            "modelled (measured on mamba2: host compute 14.53 MiB where the attention rule gives 8.00); drop -nkvo",
        )
    if embedding:
        raise InputError(FLAG, "embedding runs with the KV cache on the host are not modelled; drop -nkvo")


def device_activations(act: Activations) -> Activations:
    """What a device computes when the attention runs on the host: no masks, no scores."""
    return act._replace(mask=0, attention=0)


def combine(device: ComputeEstimate, host: ComputeEstimate, act: Activations) -> ComputeEstimate:
    """Device figures from the attention-free graph, host figures from the whole one; without flash
    attention the host holds the scores of a full offload too."""
    scores = 0 if act.flash_attn else act.attention
    host_buffer = host.host.model_copy(update={"full_offload_bytes": host.host.full_offload_bytes + scores})
    return device._replace(
        host=host_buffer,
        host_output=host.host_output,
        op_offload_host=host.op_offload_host,
        host_experts=0,  # the host runs the attention too: its partial figure applies
    )
