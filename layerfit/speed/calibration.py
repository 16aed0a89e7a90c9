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
    "blackwell": Family(bandwidth=1.000, compute=0.554, layer_us=48.8),
    "hopper": Family(bandwidth=0.367, compute=0.185, layer_us=48.8),
    "ada": Family(bandwidth=1.000, compute=0.500, layer_us=48.8),
    "ampere": Family(bandwidth=0.916, compute=0.571, layer_us=48.8),
    "turing": Family(bandwidth=0.604, compute=0.251, layer_us=48.8),
    "volta": Family(bandwidth=0.367, compute=0.185, layer_us=48.8),
    "cdna": Family(bandwidth=0.367, compute=0.185, layer_us=48.8),
    "rdna": Family(bandwidth=0.804, compute=0.373, layer_us=48.8),
    "apple": Family(bandwidth=0.708, compute=0.664, layer_us=48.8),
    "unknown": Family(bandwidth=0.367, compute=0.185, layer_us=48.8),
}
"""Per GPU family (``gpu_table.GpuSpec.family``), fitted by ``benchmarks/speed_truth.py --fit`` on
22 scoreboard rows (Llama-2-7B Q4_0 at full offload): one share of the spec bandwidth and of the
FP16 rate per family, one cost per layer for all (48.8 us). With one model size the share and the
per-layer cost trade off against each other; the fit holds ada's and blackwell's shares at their
bound, 1.0 (no GPU reads faster than its spec), and puts the rest in the per-layer cost: for much
larger models than 7B the prediction leans fast. ``hopper`` and ``volta`` have no scoreboard row
the table names (the H100 and V100 rows do not say which variant): they take ``unknown``'s
figures, the lowest share and highest cost fitted (cdna's), which a GPU the table lacks gets too."""

CPU_BANDWIDTH_PER_THREAD_GBPS = 14.2
"""GB/s of weights one CPU thread streams through llama.cpp's dot products while decoding."""
CPU_BANDWIDTH_EFFICIENCY = 0.7
"""Share of the host's RAM bandwidth all threads together reach while decoding."""
CPU_DECODE_GFLOPS_PER_THREAD = 42.9
"""GFLOPS one CPU thread reaches in matrix-vector products (decode): the compute roof of a block
whose weights are dequantized at a cost (``max`` of the two roofs, per block)."""
CPU_PROMPT_GFLOPS_PER_THREAD = 61.2
"""GFLOPS one CPU thread reaches in matrix-matrix products (prompt processing)."""
CPU_LAYER_US = 0.0
"""Fixed time per layer and token on the CPU backend (one graph node per operation, a barrier each);
the fit finds none beyond the reading and the arithmetic."""
MAIN_TOKEN_MS = 0.0
"""The main process's fixed time per token: batch set-up, graph reuse, logits and sampling; the fit
finds none beyond its blocks (held at 0)."""
RPC_SERVER_FIXED_MS = 2.0
"""Fixed time per token and rpc-server besides the link: serialising the commands, the server's
graph recompute and its reply. Fitted on loopback rpc-servers sharing one core with the main
process (each hop switches processes on that core): a dedicated machine may well pay less."""
EXPERT_SPLIT_TRANSFERS = 2.3
"""Round trips for each block whose experts stay on the host while the rest of it sits on a device:
the scheduler fetches each input of the host's split on its own (``ggml-backend.cpp``: the hidden
state, the router's expert ids and weights). Fitted on the delay proxy's ``--n-cpu-moe`` rows
(2.3: not every input needs its own round trip); on a local GPU each costs ``GPU_SYNC_US``."""

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
