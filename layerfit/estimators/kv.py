"""KV cache and recurrent state per block, as llama.cpp allocates them.

* Context cells are padded to 256. With several sequences and no unified cache, each of the
  ``n_seq`` streams gets ``pad256(n_ctx / n_seq)`` cells, so the total is ``n_seq`` times that:
  ``-c 8192 -np 3`` caches 3 x 2816 = 8448 cells (llama.cpp logs "rounding down" but rounds up).
* Full-attention layers cache ``n_ctx`` cells; sliding-window layers
  ``pad256(min(n_ctx, window * n_seq + n_ubatch))`` (unified) or, per stream,
  ``pad256(min(n_ctx / n_seq, window + n_ubatch))``; with ``--swa-full`` as many as full-attention
  layers.
* A cell of a layer holds ``n_head_kv * key_length`` keys and ``n_head_kv * value_length`` values
  in the cache types (quantized types in blocks of 32); MLA layers hold one K-only latent row of
  ``kv_lora_rank + rope_dim``.
* Recurrent layers keep a float32 state per sequence, whatever the context.
* Encoder-only models keep no cache; neither do layers that share another layer's cache, nor
  multi-token-prediction blocks.
"""

from __future__ import annotations

from typing import NamedTuple

from layerfit.estimators import architectures as arch_rules
from layerfit.estimators.gguf_constants import GGML_QUANT_SIZES, GGMLQuantizationType
from layerfit.estimators.model_shape import ModelShape

CTX_PAD = 256
STATE_BYTES = 4
"""Recurrent states are float32."""


def pad(value: int, multiple: int = CTX_PAD) -> int:
    return -(-value // multiple) * multiple


def row_bytes(ggml_type: GGMLQuantizationType, n_elements: int) -> int:
    """Bytes of ``n_elements`` values of ``ggml_type`` (whole blocks)."""
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    return -(-n_elements // block_size) * type_size


class CacheGeometry(NamedTuple):
    """How many cells each kind of layer caches, and for how many sequences."""

    n_ctx: int
    """Padded context (``-c`` rounded up to 256), before it is shared out among the streams."""
    n_seq: int
    unified: bool
    n_ubatch: int
    swa_full: bool = False
    """``--swa-full``: sliding-window layers get the full-attention layers' cells."""

    @property
    def streams(self) -> int:
        return 1 if self.unified else self.n_seq

    @property
    def cells_per_stream(self) -> int:
        """Each stream's share of the context, itself padded to 256 (llama.cpp's ``n_ctx_seq``)."""
        return self.n_ctx if self.streams == 1 else pad(self.n_ctx // self.streams)

    @property
    def full_cells(self) -> int:
        """The cells of a full-attention layer, all streams together."""
        return self.cells_per_stream * self.streams

    def swa_cells(self, window: int) -> int:
        if self.swa_full:
            return self.full_cells
        if self.unified:
            return pad(min(self.n_ctx, window * self.n_seq + self.n_ubatch))
        return self.streams * pad(min(self.cells_per_stream, window + self.n_ubatch))

    def swa_cells_per_stream(self, window: int) -> int:
        return self.swa_cells(window) // self.streams


def geometry(ctx: int, n_seq: int, unified: bool, n_ubatch: int, swa_full: bool = False) -> CacheGeometry:
    return CacheGeometry(
        n_ctx=pad(ctx), n_seq=n_seq, unified=unified or n_seq == 1, n_ubatch=n_ubatch, swa_full=swa_full
    )


def block_kv_bytes(
    shape: ModelShape,
    cache: CacheGeometry,
    type_k: GGMLQuantizationType,
    type_v: GGMLQuantizationType,
) -> tuple[int, ...]:
    """KV cache plus recurrent state of every block."""
    return tuple(
        _attention_bytes(shape, layer, cache, type_k, type_v) + state_bytes(shape, layer, cache.n_seq)
        for layer in range(shape.block_count)
    )


def _attention_bytes(
    shape: ModelShape, layer: int, cache: CacheGeometry, type_k: GGMLQuantizationType, type_v: GGMLQuantizationType
) -> int:
    swa = shape.swa_layers[layer]
    cells = cache.swa_cells(shape.sliding_window) if swa else cache.full_cells
    return cell_bytes(shape, layer, type_k, type_v) * cells


def cell_bytes(shape: ModelShape, layer: int, type_k: GGMLQuantizationType, type_v: GGMLQuantizationType) -> int:
    """The KV cache of one cached position of one block (0 where the block keeps none)."""
    heads_kv = shape.head_count_kv[layer]
    trailing = shape.block_count - layer  # shared-KV and prediction-only blocks sit at the end
    if not shape.causal or heads_kv == 0 or trailing <= shape.shared_kv_layers + shape.nextn_predict_layers:
        return 0
    if shape.mla:
        return row_bytes(type_k, shape.kv_lora_rank + shape.rope_dimension_count)
    swa = shape.swa_layers[layer]
    key_length = (shape.key_length_swa if swa else None) or shape.key_length
    value_length = (shape.value_length_swa if swa else None) or shape.value_length
    return row_bytes(type_k, heads_kv * key_length) + row_bytes(type_v, heads_kv * value_length)


def state_bytes(shape: ModelShape, layer: int, n_seq: int = 1) -> int:
    """The recurrent state of one block for ``n_seq`` sequences (0 for a block without one)."""
    if not shape.recurrent_layers[layer]:
        return 0
    if shape.architecture in arch_rules.RWKV:
        per_seq = shape.token_shift_count * shape.embedding_length + shape.embedding_length * shape.wkv_head_size
    else:
        conv = max(shape.ssm_conv_kernel - 1, 0) * (
            shape.ssm_inner_size + 2 * shape.ssm_group_count * shape.ssm_state_size
        )
        per_seq = conv + shape.ssm_state_size * shape.ssm_inner_size
    return per_seq * STATE_BYTES * max(n_seq, 1)
