"""What the runtime itself costs, beyond what the model file determines: the per-process cost on
a GPU (CUDA context, cuBLAS), the host process's RAM, an rpc-server's RAM; measured defaults that
callers may override (``RuntimeCosts``)."""

from __future__ import annotations

from layerfit.domain.base import Bytes, Frozen, MiB, PosInt
from layerfit.estimators.compute import Backend

GPU_RUNTIME_BYTES = 715 * MiB
"""Per-process cost on a GPU that llama.cpp's buffers do not show (CUDA context, cuBLAS
workspace, pool): the largest ``unaccounted`` figure measured on an H200 (701–715 MiB with F16
weights, an F32 MoE router or ``-fa off``, which run through cuBLAS)."""
GPU_RUNTIME_QUANTIZED_BYTES = 620 * MiB
"""The same when every matrix weight is quantized and flash attention is on: llama.cpp's own
kernels (MMQ, flash attention) do every product and cuBLAS is never loaded. Measured 608–617 MiB
on an H200 (Q4_0 Llama 8B/70B, the gemma-3-270m Q4_K_M mix); 620 keeps an upper bound."""
HOST_RUNTIME_BYTES = {"cuda": 384 * MiB, "cpu": 64 * MiB}
"""RAM of a llama.cpp process besides its buffers (libraries, CUDA host allocations)."""

class RuntimeCosts(Frozen):
    """What the runtime itself costs, beyond what the model file determines."""

    backend: Backend = "cuda"
    """``cuda`` for GPU devices; ``cpu`` for a CPU build whose devices are rpc-servers on CPUs."""
    gpu_fixed_bytes: Bytes | None = None
    """Per process and device; default: 715 MiB with ``cuda``, 0 with ``cpu``."""
    host_runtime_bytes: Bytes | None = None
    """Main process RAM besides buffers; default: 384 MiB with ``cuda``, 64 MiB with ``cpu``."""
    rpc_host_fixed_bytes: Bytes | None = None
    """RAM of one rpc-server process; default: as ``host_runtime_bytes``."""
    default_slots: PosInt = 4
    """Sequences when ``--parallel`` is not given: llama-server's 4 auto slots sharing a unified KV
    cache (use 1 for llama-completion/llama-cli)."""

    @property
    def gpu_fixed(self) -> int:
        """Per process and GPU when cuBLAS may be loaded (the upper bound)."""
        return self.gpu_fixed_for(cublas=True)

    def gpu_fixed_for(self, *, cublas: bool) -> int:
        """Per process and GPU; ``cublas=False``: every product runs in llama.cpp's own kernels."""
        if self.gpu_fixed_bytes is not None:
            return self.gpu_fixed_bytes
        if self.backend != "cuda":
            return 0
        return GPU_RUNTIME_BYTES if cublas else GPU_RUNTIME_QUANTIZED_BYTES

    @property
    def host_runtime(self) -> int:
        return self.host_runtime_bytes if self.host_runtime_bytes is not None else HOST_RUNTIME_BYTES[self.backend]

    @property
    def rpc_host_fixed(self) -> int:
        return self.rpc_host_fixed_bytes if self.rpc_host_fixed_bytes is not None else self.host_runtime


DEFAULT_RUNTIME = RuntimeCosts()
