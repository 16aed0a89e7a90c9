"""Every constant of the speed model that is fitted on measurements, and every stated default.

The fitted constants are the only free numbers of the model: everything else is bytes and FLOPs
read from the GGUF header, device specs from the GPU table or the cluster file, and the link
figures. ``benchmarks/speed_truth.py`` fits them (``--fit``) on the ground truth's ``fit`` rows
only and reports the errors on the others; a refit changes this module and nothing else.

Fitted on:

* the CPU constants (``CPU_*``, ``MAIN_TOKEN_MS``, ``RPC_*``, ``EXPERT_SPLIT_TRANSFERS``) on the
  ``fit`` rows of ``tests/gguf_fixtures/ground_truth/speed/cpu-speed.csv``: llama.cpp b11434's CPU
  build at 1 and 2 threads, ``-ngl`` sweeps over ``ggml-rpc-server`` devices on the same host,
  ``--n-cpu-moe`` sweeps and a delay proxy in front of the rpc-servers;
* the GPU families' efficiencies (``FAMILIES``) on the published llama.cpp scoreboards
  (``published.csv`` there: Llama-2-7B Q4_0, ``pp512`` and ``tg128``, CUDA, ROCm and Metal), one
  figure per family from its ``fit`` rows.

The stated defaults (``DEFAULT_*``, ``HOST_TO_GPU_GBPS``, ``GPU_SYNC_US``) are not fitted: they
stand in for a figure the cluster file does not give, and a plan names each one it used.
"""

from __future__ import annotations

from typing import NamedTuple


class Family(NamedTuple):
    """How close one GPU family comes to its spec sheet under llama.cpp."""

    bandwidth: float
    """Share of the spec memory bandwidth a single sequence's decode reaches."""
    compute: float
    """Share of the dense FP16 tensor rate prompt processing reaches (quantized matrices included)."""
    layer_us: float
    """Fixed time per layer and token on the device (kernel launches, synchronisation), microseconds."""


FAMILIES: dict[str, Family] = {
    "blackwell": Family(bandwidth=0.78, compute=0.40, layer_us=11.0),
    "hopper": Family(bandwidth=0.55, compute=0.12, layer_us=11.0),
    "ada": Family(bandwidth=0.78, compute=0.40, layer_us=11.0),
    "ampere": Family(bandwidth=0.78, compute=0.30, layer_us=11.0),
    "turing": Family(bandwidth=0.70, compute=0.20, layer_us=11.0),
    "volta": Family(bandwidth=0.65, compute=0.25, layer_us=11.0),
    "cdna": Family(bandwidth=0.40, compute=0.09, layer_us=15.0),
    "rdna": Family(bandwidth=0.70, compute=0.30, layer_us=15.0),
    "apple": Family(bandwidth=0.75, compute=0.50, layer_us=15.0),
    "unknown": Family(bandwidth=0.50, compute=0.10, layer_us=20.0),
}
"""Per GPU family (``gpu_table.GpuSpec.family``). ``unknown`` is the stated fallback of a GPU the
table does not name (with the table's slowest figures of its runtime)."""

CPU_BANDWIDTH_PER_THREAD_GBPS = 7.3
"""GB/s of weights one CPU thread streams through llama.cpp's dot products while decoding."""
CPU_BANDWIDTH_EFFICIENCY = 0.7
"""Share of the host's RAM bandwidth all threads together reach while decoding."""
CPU_DECODE_GFLOPS_PER_THREAD = 60.0
"""GFLOPS one CPU thread reaches in matrix-vector products (decode): the compute roof of a block
whose weights are dequantized at a cost (``max`` of the two roofs, per block)."""
CPU_PROMPT_GFLOPS_PER_THREAD = 50.0
"""GFLOPS one CPU thread reaches in matrix-matrix products (prompt processing)."""
CPU_LAYER_US = 25.0
"""Fixed time per layer and token on the CPU backend (one graph node per operation, a barrier each)."""
MAIN_TOKEN_MS = 0.4
"""The main process's fixed time per token: batch set-up, graph reuse, logits and sampling."""
RPC_SERVER_FIXED_MS = 0.15
"""Fixed time per token and rpc-server besides the link: serialising the commands, the server's
graph recompute and its reply."""
EXPERT_SPLIT_TRANSFERS = 3
"""Tensors copied to the host and back for each block whose experts stay on the host while the rest
of it sits on a device: the hidden state, the router's expert ids and weights (``ggml-backend.cpp``
copies each input of a split on its own). Each is a round trip on an RPC server."""

GPU_SYNC_US = 20.0
"""Stated, not fitted: a copy between the host and a local GPU or between two local GPUs (a few KB
over PCIe plus a synchronisation)."""
HOST_TO_GPU_GBPS = 25.0
"""Stated, not fitted: host to local GPU copies (PCIe 4.0 x16 is 32 GB/s raw), used for the weights
llama.cpp's op offload streams to the GPU during prompt processing."""

DEFAULT_RAM_BANDWIDTH_GBPS = 50.0
"""Stated default of a worker's RAM bandwidth: dual-channel DDR4-3200 (51.2 GB/s)."""
DEFAULT_CPU_THREADS = 4
"""Stated default of the threads llama.cpp computes with on a worker that does not say."""
DEFAULT_NETWORK_GBPS = 1.0
"""Stated default of a worker's link: 1 Gbit/s Ethernet."""
DEFAULT_RTT_MS = 0.5
"""Stated default of a round trip between two workers on one LAN."""
