"""Prompt processing time per token: compute-bound, micro-batch by micro-batch.

A micro-batch of ``n_ubatch`` tokens (``-ub``) runs every device in turn as decode does; its
matrix products cost ``2 x`` multiply-adds per token, over the device's effective FLOPS. Blocks
and experts kept on the host run on the CPU, except where llama.cpp's op offload moves their
matrix products to a GPU: ``ggml-backend.cpp`` (``ggml_backend_sched_backend_id_from_cur``) gives
an operation whose weights sit in host memory to the first backend whose ``offload_op`` accepts
it, and CUDA's (``ggml-cuda.cu``) accepts a batch of at least ``GGML_OP_OFFLOAD_MIN_BATCH`` = 32
rows (Metal, Vulkan, SYCL and CANN likewise; an rpc-server never). The scheduler then copies the
weights to that GPU for every micro-batch, for the experts only those the micro-batch routes to
(``work.expert_share_used``). Attention stays with its block. An rpc-server costs a round trip
per micro-batch and the hidden states of its tokens over the link.
"""

from __future__ import annotations

from layerfit.domain.cluster import Cluster
from layerfit.domain.layout import Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import SpeedShape, SpeedTerm
from layerfit.speed import calibration
from layerfit.speed.decode import F32_BYTES, hop_bytes, transfer_ms
from layerfit.speed.devices import OP_OFFLOAD_TYPES, gpu_facts, host_facts, link_facts
from layerfit.speed.rates import GB, Rate, gpu_rate, host_rate
from layerfit.speed.work import BlockWork, prompt_work

OP_OFFLOAD_MIN_BATCH = 32
"""``GGML_OP_OFFLOAD_MIN_BATCH``'s default (``ggml-cuda.cu``)."""


def _flops(block: BlockWork) -> float:
    return block.dense_flops + block.cache_flops + block.expert_flops


def prompt_terms(
    profile: MemoryProfile,
    shape: SpeedShape,
    cluster: Cluster,
    layout: Layout,
    *,
    prompt_tokens: int,
    threads: int | None = None,
    batch_threads: int | None = None,
) -> tuple[SpeedTerm, ...]:
    """A layout's prompt time per token (mean over a ``prompt_tokens`` prompt) as named terms."""
    main = cluster.worker(layout.main_worker)
    host = host_facts(main, threads, batch_threads)
    host_r = host_rate(host)
    work = prompt_work(shape, prompt_tokens)
    ubatch = min(shape.n_ubatch, prompt_tokens)
    terms: list[SpeedTerm] = []
    first_local: Rate | None = None
    for position, device in enumerate(layout.devices):
        worker = cluster.worker(device.worker)
        gpu = worker.gpu(device.gpu_index)
        facts = gpu_facts(cluster.gpu_id(device.worker, device.gpu_index), gpu)
        rate = gpu_rate(facts, host if device.worker == layout.main_worker else host_facts(worker))
        if (
            first_local is None
            and device.worker == layout.main_worker
            and gpu.type in OP_OFFLOAD_TYPES
            and not facts.on_cpu
        ):
            first_local = rate
        blocks = layout.block_range(position)
        holds_output = layout.output_offloaded and position == len(layout.devices) - 1
        flops = sum(_flops(work[b]) - (work[b].expert_flops if b in layout.host_expert_blocks else 0) for b in blocks)
        flops += shape.output_flops if holds_output else 0
        layers = len(blocks) + int(holds_output)
        where = facts.where
        ms = rate.prompt_ms(flops) + layers * rate.layer_ms / ubatch
        terms.append(
            SpeedTerm(
                where=where,
                ms=ms,
                why=f"{flops / 1e9:.2f} GFLOP per token at {rate.prompt_flops_per_ms / 1e9:.3g} TFLOPS",
            )
        )
        if device.worker != layout.main_worker:
            link = link_facts(main, worker)
            sent, returned = hop_bytes(shape, ubatch)
            per_batch = link.rtt_ms + calibration.RPC_SERVER_FIXED_MS
            traffic = transfer_ms(ubatch * (sent + returned - F32_BYTES), link.bandwidth_gbps)
            terms.append(
                SpeedTerm(
                    where=f"rpc {where}",
                    ms=(per_batch + traffic) / ubatch,
                    why=f"a round trip per micro-batch of {ubatch} and their hidden states",
                )
            )
    offload = first_local is not None and ubatch >= OP_OFFLOAD_MIN_BATCH
    link_gbps = (
        main.ram_bandwidth_gbps or calibration.HOST_TO_GPU_GBPS if main.unified_memory else calibration.HOST_TO_GPU_GBPS
    )
    host_blocks = range(layout.cpu_blocks)
    matrices = sum(work[b].dense_flops + work[b].expert_flops for b in host_blocks)
    matrices += sum(work[b].expert_flops for b in layout.host_expert_blocks)
    attention = sum(work[b].cache_flops for b in host_blocks)
    streamed = sum(work[b].dense_bytes + work[b].expert_bytes for b in host_blocks)
    streamed += sum(work[b].expert_bytes for b in layout.host_expert_blocks)
    if not layout.output_offloaded:
        matrices += shape.output_flops
        streamed += shape.output_bytes
    if matrices:
        if offload and first_local is not None:
            copy_ms = streamed / (link_gbps * GB) * 1e3 / ubatch
            ms = copy_ms + first_local.prompt_ms(matrices) + host_r.prompt_ms(attention)
            why = (
                f"host weights {streamed / 1024**2:.1f} MiB per micro-batch of {ubatch} streamed to the first "
                f"local GPU at {link_gbps:g} GB/s (op offload, ubatch >= {OP_OFFLOAD_MIN_BATCH}); attention on the CPU"
            )
        else:
            ms = host_r.prompt_ms(matrices + attention) + layout.cpu_blocks * host_r.layer_ms / ubatch
            tflops = host_r.prompt_flops_per_ms / 1e9
            why = f"{(matrices + attention) / 1e9:.2f} GFLOP per token on the CPU at {tflops:.3g} TFLOPS"
        terms.append(SpeedTerm(where=f"host {layout.main_worker}", ms=ms, why=why))
    terms.append(
        SpeedTerm(
            where="main process", ms=calibration.MAIN_TOKEN_MS / ubatch, why=f"main process per micro-batch of {ubatch}"
        )
    )
    return tuple(terms)
