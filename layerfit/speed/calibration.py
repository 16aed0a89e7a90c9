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
  (``published.csv`` there: Llama-2-7B Q4_0, ``pp512`` and ``tg128``, CUDA, ROCm and Metal) and the
  published rows of several model sizes on one GPU (``published-sizes.csv``: Llama-3 8B and 70B,
  ``tg512``/``pp512``, CUDA and Metal), which tell a family's share of its spec bandwidth from its
  fixed cost per layer; one figure of each per family from its ``fit`` rows.

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
    """Fixed time per layer and token on the device (kernel launches, synchronisation), microseconds,
    as the current llama.cpp builds take it."""
    limits: str = ""
    """What this family's figures rest on where that limits them: a plan on such a GPU states it."""


ONE_SIZE = (
    "its cost per layer is ada's, no published rows of several model sizes telling it from the bandwidth "
    "share (fitted on 7B rows): the larger the model, the less certain its speed"
)
OLD_BUILD = (
    "its figures come from the {gpu}'s published Llama-3 8B and 70B rows of May 2024 llama.cpp builds "
    "alone, less the per-layer cost newer CUDA builds save on the other GPUs"
)
NO_ROW = "no published row: the lowest shares and the highest per-layer cost fitted (the 'unknown' family's)"

FAMILIES: dict[str, Family] = {
    "blackwell": Family(bandwidth=0.906, compute=0.550, layer_us=34.3, limits=ONE_SIZE),
    "hopper": Family(bandwidth=0.662, compute=0.182, layer_us=62.9, limits=OLD_BUILD.format(gpu="H100 PCIe")),
    "ada": Family(bandwidth=0.916, compute=0.495, layer_us=34.3),
    "ampere": Family(bandwidth=0.907, compute=0.571, layer_us=47.8),
    "ampere_hbm": Family(bandwidth=0.667, compute=0.342, layer_us=82.0, limits=OLD_BUILD.format(gpu="A100-SXM4-80GB")),
    "turing": Family(bandwidth=0.590, compute=0.251, layer_us=34.3, limits=ONE_SIZE),
    "volta": Family(bandwidth=0.342, compute=0.182, layer_us=85.0, limits=NO_ROW),
    "cdna": Family(bandwidth=0.342, compute=0.184, layer_us=34.3, limits=ONE_SIZE),
    "rdna": Family(bandwidth=0.737, compute=0.372, layer_us=34.3, limits=ONE_SIZE),
    "apple": Family(
        bandwidth=0.734,
        compute=0.665,
        layer_us=85.0,
        limits="one share for every Apple chip, whose own shares differ widely (0.47 on an M1 Max to 0.95 on "
        "an M3 Max on Llama-3 8B and 70B): its speed may be off by a third",
    ),
    "unknown": Family(bandwidth=0.342, compute=0.182, layer_us=85.0),
}
"""Per GPU family (``gpu_table.GpuSpec.family``), fitted by ``benchmarks/speed_truth.py --fit`` on the
``fit`` rows of the published llama.cpp figures: 22 scoreboard rows (``published.csv``, Llama-2-7B
Q4_0 at full offload, 2025-26 builds) and 13 rows of several model sizes on one GPU and build
(``published-sizes.csv``: Llama-3 8B and 70B Q4_K_M, llama-bench of May 2024, on the RTX 6000 Ada,
RTX A6000, RTX 4090, A100-SXM4-80GB, H100 PCIe, M2 Ultra and M1 Max).

With one model size a family's bandwidth share and its cost per layer trade off; 8B and 70B (32
and 80 layers, 4.6 and 42.5 GB) on one GPU tell them apart. So ``ada``, ``ampere``, ``ampere_hbm``
(the A100: HBM, where llama.cpp reaches two thirds of the spec, against nine tenths on the GDDR
parts), ``hopper`` and ``apple`` have a share and a per-layer cost of their own, fitted together
with one extra per-layer cost of the May 2024 builds (38.2 us for CUDA, 100.4 for Metal: CUDA
graphs and fused kernels came later), the share being taken as the same in both builds. The
families with rows of one size only (``blackwell``, ``turing``, ``rdna``, ``cdna``) take the least
per-layer cost fitted (ada's) and their share from their 7B rows: a large model then leans slow
rather than fast. ``hopper``'s figures come from the H100 PCIe's May 2024 rows alone (the
scoreboards' H100 rows do not name their variant), its current per-layer cost as that build's less
the CUDA difference, and its FP16 share, like ``ampere_hbm``'s, from that build's prompt speeds
(slower than today's). ``volta`` has no row the table names and takes ``unknown``'s figures, the
lowest share and FP16 share and the highest per-layer cost fitted, which a GPU the table lacks gets
too."""

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
