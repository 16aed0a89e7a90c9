"""Compute (graph) buffers: what llama.cpp's scheduler reserves per device for one micro-batch.

llama.cpp sizes these buffers by allocating the worst-case graph, so they follow the peak of the
tensors alive at once. The rules below were fitted to llama.cpp's own buffer sizes (CUDA on an
H200, the CPU backend behind rpc-servers; see ``benchmarks/README_estimator.md``) in terms of a
few activation sizes for one micro-batch of ``ub`` tokens:

* ``E = n_embd * ub * 4`` (one hidden state), ``F3 = 3 * n_ff * ub * 4`` (gate, up and their
  product), ``M`` the routed experts' activations, ``L = n_vocab * ub * 4`` (the logits);
* ``m`` the attention masks (one per attention kind, ``n_kv * ub``, F16 with flash attention,
  F32 without), ``A`` the attention scores without flash attention (``n_kv * ub * n_head * 4``)
  and ``QO`` the queries and attention output.

Per device, with ``layer = m + M + max(6E + F3, 4E + A + QO)``:

* the device holding the output layer: ``L + 4E + m + M`` (one device), ``L + 5E + 4m + M``
  (pipeline parallelism over several devices, which keeps 4 copies of the inputs), ``L + 4E``
  with layers left on the host (``L + E`` on the CPU backend; the estimate adds ``m`` to both);
  ``M`` only on CUDA and beside recurrent layers (the CPU backend frees the experts' activations
  before the logits, except at some of jamba's splits);
* other devices: ``layer`` plus ``E + 3m`` when several devices share a full offload, and
  ``9E`` more on the first of them (it receives the token embeddings);
* the host: ``4E + m`` (one device), ``10E + 4m`` (several); with layers on the host a GPU build
  still offloads their large operations (``4E + m``), a CPU build computes them itself
  (``m + M + max(7E + F3, 4E + A)``), and a CPU-only run computes the logits too;
* recurrent (Mamba-2) layers: their scan ``R`` is added on every device of a multi-device split
  and bounds a CPU host's buffer from below;
* gemma3n's per-layer inputs ``P`` (all blocks' slices for the micro-batch): ``P`` on the host
  and on a device running later blocks of a partial offload, ``3P`` where block 0 runs (the
  device of a full offload, a CPU host computing blocks), ``8P`` on each device of a multi-device
  split; its logits term is charged per offload state (``output_by_state``).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from layerfit.domain.profile import ComputeBuffer
from layerfit.estimators.kv import CacheGeometry
from layerfit.estimators.model_shape import ModelShape

Backend = Literal["cuda", "cpu"]
"""``cuda``: GPU devices (a GPU build offloads the host's large operations to them); ``cpu``: the
CPU backend everywhere (a CPU build, rpc-servers running on CPUs)."""

PIPELINE_COPIES = 4
"""``GGML_SCHED_MAX_COPIES``: input copies kept when a full offload spans several devices."""
F32 = 4

# Hidden states (multiples of E) alive at each buffer's peak, fitted to llama.cpp's buffers.
LAYER_STATES = 6
"""A GPU running blocks."""
CPU_PARTIAL_LAYER_STATES = 3
"""A CPU-backend device (rpc-server) running blocks while others stay on the host."""
CPU_HOST_LAYER_STATES = 7
"""The CPU running blocks itself (CPU build)."""
OUTPUT_STATES = 4
"""The device holding the output layer, beside the logits."""
CPU_PARTIAL_OUTPUT_STATES = 1
"""The same on a CPU-backend device while layers stay on the host."""
PIPELINE_EXTRA_STATES = 1
"""Each device when a full offload spans several devices."""
FIRST_DEVICE_STATES = 9
"""The first device of such a pipeline (it receives the token embeddings)."""
HOST_STATES = 4
HOST_EXPERT_STATES = 2
"""Hidden states beside the experts' activations on a CPU host that keeps only experts: qwen3moe and
deepseek2 18.02 MiB at 2048 cells (``M`` 12.03 + 2E 4 + m 2), 20.02 at 4096, 36.04 at ``-ub 1024``;
gpt-oss 30.78 (``M`` 24.03, both masks 2.75); 24.02 at 16384 cells, under the rule (32.03)."""
HOST_EXPERT_STATES_NO_FLASH = 5
"""The same without flash attention (F32 masks): qwen3moe holds 21.02 MiB beside the mask at 2048
and 3072 cells but 9.02 at 4096-16384, gpt-oss 30.02, deepseek2 16.02: 5E bounds them all."""
HOST_PIPELINE_STATES = 10
CPU_ONLY_OUTPUT_STATES = 5
"""A CPU-only run computing the logits."""
PER_LAYER_PROJECTION_COPIES = 3
"""gemma3n's per-layer inputs ``P`` alive where block 0 runs (the looked-up per-layer inputs, the
projection of the embeddings onto every block's slice and their sum): a CPU host computing blocks
and the device of a one-device full offload (24 and 30 blocks, widths 512 and 768, ub 256 and 512:
``arch_fixtures_variants``; the variant's CPU host was 9 MiB under with 2P, its device 27 MiB
under without the term)."""
PIPELINE_PER_LAYER_COPIES = 8
"""The same on each device of a multi-device split (fitted to the 24-block model; the 30-block
variant's devices are within 10 % of it, the second one under by 22 MiB)."""


class Activations(NamedTuple):
    """Sizes of the tensors that dominate a micro-batch's graph, in bytes."""

    embd: int
    """``E``: one hidden state."""
    ffn: int
    """``F3``: the widest dense feed-forward's gate, up and product."""
    moe: int
    """``M``: routed experts' activations and router logits."""
    mask: int
    """``m``: the attention masks of one stream."""
    attention: int
    """``A + QO``: scores without flash attention, plus queries and attention output."""
    logits: int
    """``L``: the logits (0 for embedding runs)."""
    recurrent: int = 0
    """``R``: one Mamba-2 layer's scan (input projection, convolution, scan output, gating) and
    the state it writes, 0 without recurrent layers."""
    encoder: Encoder | None = None
    """A BERT-style encoder: its own rules (``encoder_buffers``)."""
    per_layer: int = 0
    """``P``: gemma3n's per-layer inputs of every block for the micro-batch, 0 for other models."""
    flash_attn: bool = True


class Encoder(NamedTuple):
    """What shapes an encoder's graph: ``F`` (the feed-forward), rope and learned positions."""

    ffn: int
    """``F``: gate, up and product (gated), or the up projection alone (GELU feed-forward)."""
    rope: bool
    positions: bool
    experts: bool = False
    """Routed experts (``F`` is theirs): the first device of a split holds ``2E`` more."""


class ComputeEstimate(NamedTuple):
    """Compute buffers per device position, as the memory model charges them."""

    device: ComputeBuffer
    output: int
    first_device: int
    host: ComputeBuffer
    host_output: int
    op_offload: int
    """``-ngl 0`` in a GPU build: the first GPU's buffer besides the output weights it copies."""
    op_offload_host: int
    host_experts: int = 0
    """The host's buffer when it keeps only experts of GPU-resident blocks (no block, the output layer
    offloaded); 0: not modelled (the partial-offload figure applies)."""
    scan: int = 0
    """``R``, part of ``device.multi_device_bytes`` (the memory model keeps it only where a device
    boundary falls between two recurrent blocks, ``MemoryProfile.scan_crossings``)."""
    output_by_state: ComputeBuffer | None = None
    """``output`` per offload state where they differ enough to matter (gemma3n, whose per-layer
    projection makes the full offload's buffer peak at its blocks, not at the logits); ``None``:
    ``output`` in every state."""


def activations(
    shape: ModelShape, cache: CacheGeometry, *, n_ubatch: int, flash_attn: bool, logits: bool
) -> Activations:
    ub = n_ubatch
    mask_kinds = _mask_cells(shape, cache, ub)
    mask_bytes = 2 if flash_attn else F32
    heads = shape.max_head_count
    scores = 0 if flash_attn else max((cells * ub * heads * F32 for cells in mask_kinds), default=0)
    head_width = shape.kv_lora_rank + shape.rope_dimension_count if shape.mla else shape.key_length
    queries_and_output = heads * (head_width + shape.value_length) * ub * F32 if mask_kinds else 0
    moe = 0
    if shape.is_moe:
        moe = (3 * shape.expert_feed_forward_length * shape.expert_used_count + shape.expert_count) * ub * F32
    return Activations(
        embd=shape.embedding_length * ub * F32,
        ffn=3 * max(shape.ffn_width, default=0) * ub * F32,
        moe=moe,
        mask=sum(cells * ub * mask_bytes for cells in mask_kinds),
        attention=scores + queries_and_output,
        logits=shape.vocab_size * ub * F32 if logits else 0,
        recurrent=_recurrent_scan(shape, ub, cache.n_seq),
        encoder=_encoder(shape, ub) if not shape.causal else None,
        per_layer=shape.per_layer_input_width * ub * F32,
        flash_attn=flash_attn,
    )


def _encoder(shape: ModelShape, ub: int) -> Encoder:
    """``F`` of the widest feed-forward; routed experts (ungated, as nomic-bert-moe's) hold their
    up projections' output and the down projections' output at once: ``used * (n_ff_exp + n_embd)``."""
    width = max(shape.ffn_width, default=0)
    dense = (3 if shape.gated_ffn else 1) * width
    expert_width = shape.expert_feed_forward_length + shape.embedding_length
    experts = shape.expert_used_count * expert_width if shape.is_moe else 0
    return Encoder(
        ffn=max(dense, experts) * ub * F32,
        experts=experts > dense,
        rope=not shape.position_embeddings,
        positions=shape.position_embeddings,
    )


def _recurrent_scan(shape: ModelShape, ub: int, n_seq: int) -> int:
    """``R`` = ``(5 n_embd + 5 d_inner + 6 n_group d_state) * ub`` floats plus the scan state.

    Fitted to the CPU backend's buffers for Mamba-2 layers, varying n_embd, d_inner, d_state and
    the micro-batch (``benchmarks/truth_recording.py`` models, within 0.1 MiB; +1 MiB at -ub 1024).
    """
    if not any(shape.recurrent_layers) or shape.ssm_inner_size == 0:
        return 0
    inner, state = shape.ssm_inner_size, shape.ssm_state_size
    per_token = 5 * shape.embedding_length + 5 * inner + 6 * shape.ssm_group_count * state
    return per_token * ub * F32 + state * inner * F32 * max(n_seq, 1)


def _mask_cells(shape: ModelShape, cache: CacheGeometry, ub: int) -> tuple[int, ...]:
    """KV cells one attention mask spans, per kind of attention layer present."""
    attends = [heads > 0 for heads in shape.head_count_kv]
    if not shape.causal:  # a symmetric sliding window adds a second ub x ub mask
        return (ub,) * (any(attends) + any(shape.swa_layers)) if any(attends) else ()
    kinds: list[int] = []
    if any(a and not swa for a, swa in zip(attends, shape.swa_layers, strict=True)):
        kinds.append(cache.cells_per_stream)
    if any(a and swa for a, swa in zip(attends, shape.swa_layers, strict=True)):
        kinds.append(cache.swa_cells_per_stream(shape.sliding_window))
    return tuple(kinds)


def flash_attn_off_splits(shape: ModelShape) -> tuple[int, ...]:
    """Blocks kept on the host for which llama.cpp turns flash attention ``auto`` off.

    Measured on granitehybrid (``-ngl 4`` of 6 blocks): when the host's last block attends and the
    first offloaded block is recurrent, the scheduler assigns the host block's flash-attention op
    to the device, whose recurrent-state nodes follow it in graph order; llama.cpp sees the op off
    its layer's device and disables flash attention for the context.
    """
    heads_kv, recurrent = shape.head_count_kv, shape.recurrent_layers
    return tuple(
        kept
        for kept in range(1, shape.block_count)
        if heads_kv[kept - 1] and not recurrent[kept - 1] and recurrent[kept] and not heads_kv[kept]
    )


def compute_buffers(act: Activations, backend: Backend) -> ComputeEstimate:
    """Compute buffers of every device position and of the host, for the memory model."""
    if act.encoder is not None and backend == "cpu":
        return encoder_buffers(act, act.encoder)
    e, m, moe, p = act.embd, act.mask, act.moe, act.per_layer
    gpu = backend == "cuda"
    projection = PER_LAYER_PROJECTION_COPIES * p
    extra_masks = (PIPELINE_COPIES - 1) * m + PIPELINE_PER_LAYER_COPIES * p

    def layer(states: int) -> int:
        return m + moe + max(states * e + act.ffn, 4 * e + act.attention)

    # split graphs keep a recurrent layer's scan alive beside everything else on the device
    layer_multi = layer(LAYER_STATES) + PIPELINE_EXTRA_STATES * e + extra_masks + act.recurrent
    # gemma3n: block 0's device projects the per-layer inputs (3P), a later block's device keeps P
    layer_full = layer(LAYER_STATES) + projection
    layer_partial = layer(LAYER_STATES if gpu else CPU_PARTIAL_LAYER_STATES) + p
    # CUDA keeps the routed experts' activations alive up to the logits; the CPU backend frees them
    # first, except beside recurrent layers (jamba at -ngl 4: +12 MiB, the experts' M, measured by
    # doubling their width), where they are charged as an upper bound
    output_moe = moe if gpu or act.recurrent else 0
    output_full = act.logits + OUTPUT_STATES * e + m + output_moe
    output_multi = output_full + PIPELINE_EXTRA_STATES * e + extra_masks + act.recurrent
    output_partial = act.logits + (OUTPUT_STATES if gpu else CPU_PARTIAL_OUTPUT_STATES) * e + m + output_moe
    # a GPU build offloads the host's large operations; a CPU build runs its blocks itself
    host_partial = HOST_STATES * e + m + p if gpu else max(layer(CPU_HOST_LAYER_STATES), m + act.recurrent) + projection
    cpu_only = max(layer(CPU_HOST_LAYER_STATES) + projection, m + act.logits + CPU_ONLY_OUTPUT_STATES * e)
    outputs = ComputeBuffer(
        full_offload_bytes=max(output_full - layer_full, 0),
        partial_offload_bytes=max(output_partial - layer_partial, 0),
        multi_device_bytes=max(output_multi - layer_multi, 0),
    )
    return ComputeEstimate(
        device=ComputeBuffer(
            full_offload_bytes=layer_full, partial_offload_bytes=layer_partial, multi_device_bytes=layer_multi
        ),
        output=max(outputs.full_offload_bytes, outputs.partial_offload_bytes, outputs.multi_device_bytes or 0),
        output_by_state=outputs if p else None,
        first_device=FIRST_DEVICE_STATES * e,
        host=ComputeBuffer(
            full_offload_bytes=HOST_STATES * e + m + p,
            partial_offload_bytes=host_partial,
            multi_device_bytes=HOST_PIPELINE_STATES * e + PIPELINE_COPIES * m + p,
        ),
        host_output=max(cpu_only - host_partial, 0),
        op_offload=act.logits + OUTPUT_STATES * e if gpu else 0,
        op_offload_host=HOST_STATES * e + m if gpu else 0,
        host_experts=_host_experts(act) if not gpu else 0,
        scan=act.recurrent,
    )


def _host_experts(act: Activations) -> int:
    """A CPU host that keeps only the experts of GPU-resident blocks computes only their products,
    the attention (and its scores) staying on the devices: ``M + 2E + m`` with flash attention,
    ``M + 5E + m`` (F32 masks) without, an upper bound over the allocator's peaks (``cpu-moe.csv``,
    ``cpu-flags.csv``). Recurrent MoE models (jamba, not measured so) keep the partial figure (0)."""
    if not act.moe or act.recurrent:
        return 0
    states = HOST_EXPERT_STATES if act.flash_attn else HOST_EXPERT_STATES_NO_FLASH
    return act.moe + states * act.embd + act.mask


def encoder_buffers(act: Activations, encoder: Encoder) -> ComputeEstimate:
    """An encoder on the CPU backend, in quarters ``q`` of a hidden state (whole input per micro-batch).

    Fitted to bert (GELU feed-forward, learned positions) and nomic-bert (gated, rope) at two
    contexts: one device ``m + F + 9q`` (``+ 8q`` with rope at full offload), each device of a
    split ``F + 7E + 4m`` (measured at ub 1024-4096 and widths 512-1024; the 4 pipeline copies of
    the ``ub x ub`` mask) and the first of them ``F`` more (``F + 2E`` with routed experts), the
    host ``m + 17q`` (``+ 4q`` with learned positions) at full offload, ``11E + 4m`` (``+ E``)
    beside a split and ``m + F + 21q`` when it computes blocks.
    """
    e, m, f, q = act.embd, act.mask, encoder.ffn, act.embd // 4
    positions = 4 * q if encoder.positions else 0
    return ComputeEstimate(
        device=ComputeBuffer(
            full_offload_bytes=m + f + 9 * q + (8 * q if encoder.rope else 0),
            partial_offload_bytes=m + f + 9 * q,
            multi_device_bytes=f + 7 * e + PIPELINE_COPIES * m,
        ),
        output=0,
        first_device=f + (2 * e if encoder.experts else 0),
        host=ComputeBuffer(
            full_offload_bytes=m + 17 * q + positions,
            partial_offload_bytes=m + f + 21 * q,
            multi_device_bytes=11 * e + positions + PIPELINE_COPIES * m,
        ),
        host_output=0,
        op_offload=0,
        op_offload_host=0,
    )
