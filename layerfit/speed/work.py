"""What one token costs each block in bytes read and FLOPs, at a context fill.

The facts come from the profile's ``SpeedShape`` (the GGUF header's, ``estimators.speed_facts``);
a profile given as numbers has none, and ``speed_shape`` derives one from its bytes, stating each
figure it had to assume.

The KV cache a token reads: llama.cpp attends the first ``n_kv`` cells of the cache, the cells in
use padded to 256 and at least 256 (``src/llama-kv-cache.cpp``, ``get_n_kv``: "pad the n_kv value
so that the graph remains constant across batches and can be reused"), a sliding-window layer at
most its window, never more than the cache holds.
"""

from __future__ import annotations

from math import isqrt
from typing import NamedTuple

from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import SpeedShape
from layerfit.speed.settings import SpeedSettings

KV_PAD = 256
"""``n_kv`` is padded to this many cells (``llama_kv_cache::get_n_kv``)."""
ASSUMED_BYTES_PER_WEIGHT = 0.5625
"""For a profile given as numbers: bytes per weight when counting its FLOPs (4.5 bits, Q4_0 and
Q4_K_M's average), stated."""
ASSUMED_BLOCK_WIDTHS = 12
"""For a profile given as numbers: a block holds about ``12 n_embd^2`` weights (a llama block:
four attention matrices and a feed-forward 2.7 times as wide), which sizes ``n_embd``, stated."""


class BlockWork(NamedTuple):
    """One token through one block."""

    dense_bytes: float
    """Weights every token reads (all but the routed experts)."""
    cache_bytes: float
    """The KV cache attended and the recurrent state (read and written back)."""
    expert_bytes: float
    """The routed experts' weights a token reads (``expert_used_count / expert_count`` of them)."""
    dense_flops: float
    cache_flops: float
    """Attention over the cache."""
    expert_flops: float


def kv_cells(fill: int, ctx: int, window: int) -> int:
    """Cells a token attends with ``fill`` tokens cached: ``n_kv``, padded, within the cache."""
    used = min(fill, window) if window else fill
    return min(max(KV_PAD, _padded(used)), _padded(ctx))


def _padded(cells: int) -> int:
    return -(-cells // KV_PAD) * KV_PAD


def decode_work(shape: SpeedShape, fill: int) -> tuple[BlockWork, ...]:
    """Per block, one decoded token's reads and FLOPs with ``fill`` tokens in the cache."""
    share = shape.routed_share
    return tuple(
        BlockWork(
            dense_bytes=dense,
            cache_bytes=position * kv_cells(fill, shape.ctx, window) + 2 * state,
            expert_bytes=share * experts,
            dense_flops=dense_flops,
            cache_flops=attention * kv_cells(fill, shape.ctx, window),
            expert_flops=share * expert_flops,
        )
        for dense, experts, position, window, state, dense_flops, expert_flops, attention in zip(
            shape.block_dense_bytes,
            shape.block_expert_bytes,
            shape.block_kv_position_bytes,
            shape.block_window,
            shape.block_state_bytes,
            shape.block_dense_flops,
            shape.block_expert_flops,
            shape.block_attention_flops,
            strict=True,
        )
    )


def prompt_work(shape: SpeedShape, prompt_tokens: int) -> tuple[BlockWork, ...]:
    """Per block, the mean prompt token's FLOPs over a prompt of ``prompt_tokens`` into an empty cache
    (a token attends the positions before it: half the prompt on average), and the weights a
    micro-batch reads (``expert_bytes``: every expert a micro-batch routes to, ``used_share``)."""
    used = expert_share_used(shape, min(shape.n_ubatch, prompt_tokens))
    attended = (prompt_tokens + 1) / 2
    return tuple(
        BlockWork(
            dense_bytes=dense,
            cache_bytes=0.0,
            expert_bytes=used * experts,
            dense_flops=dense_flops,
            cache_flops=attention * (min(attended, window) if window else attended),
            expert_flops=shape.routed_share * expert_flops,
        )
        for dense, experts, window, dense_flops, expert_flops, attention in zip(
            shape.block_dense_bytes,
            shape.block_expert_bytes,
            shape.block_window,
            shape.block_dense_flops,
            shape.block_expert_flops,
            shape.block_attention_flops,
            strict=True,
        )
    )


def expert_share_used(shape: SpeedShape, tokens: int) -> float:
    """The share of a block's experts a micro-batch of ``tokens`` routes to at least once, with each
    token picking ``expert_used_count`` of ``expert_count`` at random: ``1 - (1 - k/E)^tokens``.
    llama.cpp's scheduler copies only those experts' weights to the device (``ggml-backend.cpp``,
    ``ggml_backend_sched_compute_splits``: "copying only the experts that are used")."""
    if not shape.expert_count:
        return 0.0
    return 1.0 - (1.0 - shape.routed_share) ** tokens


def speed_shape(profile: MemoryProfile, settings: SpeedSettings) -> tuple[SpeedShape, tuple[str, ...]]:
    """The profile's ``SpeedShape``, or one derived from its bytes with the assumptions that took."""
    if profile.speed is not None:
        return profile.speed, ()
    experts = profile.block_expert_bytes or (0,) * profile.n_blocks
    dense = tuple(weights - expert for weights, expert in zip(profile.block_weight_bytes, experts, strict=True))
    kv_total = (
        profile.block_kv_bytes
        if not profile.host_kv_bytes
        else (profile.host_kv_bytes // profile.n_blocks,) * profile.n_blocks
    )
    per_position = tuple(-(-kv // settings.ctx) for kv in kv_total)
    mean_block = sum(profile.block_weight_bytes) / profile.n_blocks
    width = max(isqrt(int(mean_block / ASSUMED_BYTES_PER_WEIGHT / ASSUMED_BLOCK_WIDTHS)), 1)
    vocab = int(profile.output_weight_bytes / ASSUMED_BYTES_PER_WEIGHT / width)
    routed = any(experts)
    shape = SpeedShape(
        block_dense_bytes=dense,
        block_expert_bytes=tuple(experts),
        expert_count=1 if routed else 0,
        expert_used_count=1 if routed else 0,
        block_kv_position_bytes=per_position,
        block_window=(0,) * profile.n_blocks,
        block_state_bytes=(0,) * profile.n_blocks,
        block_dense_flops=tuple(int(2 * size / ASSUMED_BYTES_PER_WEIGHT) for size in dense),
        block_expert_flops=tuple(int(2 * size / ASSUMED_BYTES_PER_WEIGHT) for size in experts),
        block_attention_flops=tuple(size // 2 * 2 for size in per_position),
        output_bytes=profile.output_weight_bytes,
        output_flops=int(2 * profile.output_weight_bytes / ASSUMED_BYTES_PER_WEIGHT),
        embedding_length=width,
        vocab_size=vocab,
        ctx=settings.ctx,
        n_ubatch=settings.n_ubatch,
        flash_attn=settings.flash_attn,
    )
    assumed = [
        "the profile is given as numbers, without the model's per-token facts (speed): they are derived "
        f"from its bytes: FLOPs as 2 per weight of {ASSUMED_BYTES_PER_WEIGHT} bytes (4.5 bits), n_embd {width} "
        f"(a llama-shaped block of {ASSUMED_BLOCK_WIDTHS} n_embd^2 weights), the KV cache per position as "
        f"block_kv_bytes over ctx {settings.ctx}, full attention in every block",
    ]
    if routed:
        assumed.append(
            "the profile does not say how many experts a token uses: every expert's weights are counted as "
            "read per token (an upper bound on the time)"
        )
    return shape, tuple(assumed)
