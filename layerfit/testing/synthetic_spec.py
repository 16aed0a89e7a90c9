"""Model hyperparameters (``ModelSpec``) and the tensor tables llama.cpp expects for them.

``tensor_table`` lists a spec's tensors in file order (names, ggml shapes, types) for the decoder
architectures; ``arch_fixtures`` edits it for the others.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from layerfit.domain.base import Frozen, NonNegInt, PosInt
from layerfit.estimators.tensor_names import created_by

Q = GGMLQuantizationType
F32 = Q.F32


class TensorSpec(NamedTuple):
    name: str
    shape: tuple[int, ...]
    """ggml order: ``ne0`` (the row length) first."""
    ggml_type: GGMLQuantizationType

    @property
    def n_bytes(self) -> int:
        block_size, type_size = GGML_QUANT_SIZES[self.ggml_type]
        return int(np.prod(self.shape, dtype=np.int64)) // block_size * type_size


class ModelSpec(Frozen):
    """Hyperparameters of a model, enough to rebuild its tensor table and metadata."""

    name: str
    architecture: str
    block_count: PosInt
    embedding_length: PosInt
    feed_forward_length: NonNegInt = 0
    head_count: PosInt
    head_count_kv: PosInt
    head_dim: PosInt
    value_dim: NonNegInt = 0
    """0: same as ``head_dim``."""
    vocab_size: PosInt
    context_length: PosInt = 8192
    tied_embeddings: bool = False
    weight_type: GGMLQuantizationType = Q.F16
    embedding_type: GGMLQuantizationType | None = None
    """Token embedding and output projection type; default ``weight_type``."""
    expert_type: GGMLQuantizationType | None = None
    """Routed-expert tensors' type; default ``weight_type``."""
    expert_count: NonNegInt = 0
    expert_used_count: NonNegInt = 0
    expert_feed_forward_length: NonNegInt = 0
    expert_shared_feed_forward_length: NonNegInt = 0
    leading_dense_block_count: NonNegInt = 0
    sliding_window: NonNegInt = 0
    qk_norm: bool = False
    post_norms: bool = False
    """Gemma's post-attention and post-feed-forward norms."""
    attention_bias: bool = False
    q_lora_rank: NonNegInt = 0
    kv_lora_rank: NonNegInt = 0
    rope_dim: NonNegInt = 0
    ssm_inner_size: NonNegInt = 0
    """Mamba-2 layers: inner width (0: no recurrent layers)."""
    ssm_state_size: NonNegInt = 0
    ssm_conv_kernel: NonNegInt = 0
    ssm_group_count: NonNegInt = 0
    ssm_head_count: NonNegInt = 0
    attention_layers: tuple[NonNegInt, ...] | None = None
    """Hybrids: the layers that attend; the others are Mamba-2 layers. ``None``: as the architecture."""
    encoder: bool = False
    """A BERT-style encoder: position and token-type embeddings, no output projection."""
    metadata: Mapping[str, int | float | bool | str | tuple[int, ...] | None] = {}
    """Extra keys, ``{arch}`` expanded; ``None`` removes a key."""

    @property
    def v_dim(self) -> int:
        return self.value_dim or self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.expert_count > 0

    def attends(self, block: int) -> bool:
        if self.attention_layers is not None:
            return block in self.attention_layers
        return self.ssm_inner_size == 0


# ---------------------------------------------------------------------------------------------
# Tensor tables
# ---------------------------------------------------------------------------------------------


def _fit(ggml_type: GGMLQuantizationType, row: int) -> GGMLQuantizationType:
    """A type whose block size divides the row (quantizers fall back the same way)."""
    for candidate in (ggml_type, Q.Q8_0, Q.F16):
        if row % GGML_QUANT_SIZES[candidate][0] == 0:
            return candidate
    return F32


def _weight(name: str, shape: tuple[int, ...], ggml_type: GGMLQuantizationType) -> TensorSpec:
    return TensorSpec(name, shape, _fit(ggml_type, shape[0]))


def _vector(name: str, length: int) -> TensorSpec:
    return TensorSpec(name, (length,), F32)


def tensor_table(spec: ModelSpec) -> list[TensorSpec]:
    """The tensors of the model in file order: embeddings and output first, then block by block."""
    d = spec.embedding_length
    embd_type = spec.embedding_type or spec.weight_type
    tensors = [_weight("token_embd.weight", (d, spec.vocab_size), embd_type)]
    if spec.encoder:
        tensors.append(TensorSpec("position_embd.weight", (d, spec.context_length), F32))
        tensors.append(TensorSpec("token_types.weight", (d, 2), F32))
        tensors.append(_vector("token_embd_norm.weight", d))
    elif not spec.tied_embeddings:
        tensors.append(_weight("output.weight", (d, spec.vocab_size), embd_type))
    if not spec.encoder:
        tensors.append(_vector("output_norm.weight", d))
    for block in range(spec.block_count):
        tensors += _block(spec, block)
    return tensors


LOADER_RENAMES: dict[str, tuple[tuple[str, str], ...]] = {
    "gpt-oss": ((".ffn_norm.", ".post_attention_norm."),),
    **dict.fromkeys(
        ("bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2"),
        ((".attn_norm.", ".attn_output_norm."), (".ffn_norm.", ".layer_output_norm.")),
    ),
}
"""Block norms the architecture's loader names otherwise than ``tensor_table`` (same shapes)."""


def loader_table(spec: ModelSpec, tensors: list[TensorSpec]) -> list[TensorSpec]:
    """``tensors`` as the architecture's llama.cpp loader names them: norms renamed
    (``LOADER_RENAMES``), tensors it never creates left out (layerfit refuses them)."""
    renamed = []
    for tensor in tensors:
        name = tensor.name
        for old, new in LOADER_RENAMES.get(spec.architecture, ()):
            name = name.replace(old, new)
        renamed.append(TensorSpec(name, tensor.shape, tensor.ggml_type))
    return [tensor for tensor in renamed if created_by(spec.architecture, tensor.name)]


def _block(spec: ModelSpec, block: int) -> Iterator[TensorSpec]:
    p = f"blk.{block}."
    d = spec.embedding_length
    yield _vector(p + "attn_norm.weight", d)
    if not spec.attends(block):
        yield from _mamba2(spec, p)
        if spec.feed_forward_length == 0:
            return
    else:
        yield from _mla_attention(spec, p) if spec.kv_lora_rank else _attention(spec, p)
    if spec.post_norms:
        yield _vector(p + "post_attention_norm.weight", d)
    yield _vector(p + "ffn_norm.weight", d)
    if spec.is_moe and block >= spec.leading_dense_block_count:
        yield from _moe(spec, p)
    else:
        yield from _dense_ffn(spec, p, spec.feed_forward_length)
    if spec.post_norms:
        yield _vector(p + "post_ffw_norm.weight", d)


def _attention(spec: ModelSpec, p: str) -> Iterator[TensorSpec]:
    d, w = spec.embedding_length, spec.weight_type
    q, k, v = spec.head_count * spec.head_dim, spec.head_count_kv * spec.head_dim, spec.head_count_kv * spec.v_dim
    yield _weight(p + "attn_q.weight", (d, q), w)
    yield _weight(p + "attn_k.weight", (d, k), w)
    yield _weight(p + "attn_v.weight", (d, v), w)
    yield _weight(p + "attn_output.weight", (spec.head_count * spec.v_dim, d), w)
    if spec.attention_bias:
        yield from (_vector(p + "attn_q.bias", q), _vector(p + "attn_k.bias", k), _vector(p + "attn_v.bias", v))
        yield _vector(p + "attn_output.bias", d)
    if spec.qk_norm:
        yield _vector(p + "attn_q_norm.weight", spec.head_dim)
        yield _vector(p + "attn_k_norm.weight", spec.head_dim)
    if spec.architecture == "gpt-oss":
        yield _vector(p + "attn_sinks.weight", spec.head_count)


def _mla_attention(spec: ModelSpec, p: str) -> Iterator[TensorSpec]:
    """DeepSeek-style latent attention, in the split ``k_b``/``v_b`` form current GGUFs use."""
    d, w, heads = spec.embedding_length, spec.weight_type, spec.head_count
    nope = spec.head_dim - spec.rope_dim
    if spec.q_lora_rank:
        yield _weight(p + "attn_q_a.weight", (d, spec.q_lora_rank), w)
        yield _vector(p + "attn_q_a_norm.weight", spec.q_lora_rank)
        yield _weight(p + "attn_q_b.weight", (spec.q_lora_rank, heads * spec.head_dim), w)
    else:
        yield _weight(p + "attn_q.weight", (d, heads * spec.head_dim), w)
    yield _weight(p + "attn_kv_a_mqa.weight", (d, spec.kv_lora_rank + spec.rope_dim), w)
    yield _vector(p + "attn_kv_a_norm.weight", spec.kv_lora_rank)
    yield _weight(p + "attn_k_b.weight", (nope, spec.kv_lora_rank, heads), w)
    yield _weight(p + "attn_v_b.weight", (spec.kv_lora_rank, spec.v_dim, heads), w)
    yield _weight(p + "attn_output.weight", (heads * spec.v_dim, d), w)


def _mamba2(spec: ModelSpec, p: str) -> Iterator[TensorSpec]:
    d, w, inner = spec.embedding_length, spec.weight_type, spec.ssm_inner_size
    heads, xbc = spec.ssm_head_count, inner + 2 * spec.ssm_group_count * spec.ssm_state_size
    yield _weight(p + "ssm_in.weight", (d, inner + xbc + heads), w)
    yield TensorSpec(p + "ssm_conv1d.weight", (spec.ssm_conv_kernel, xbc), F32)
    yield _vector(p + "ssm_conv1d.bias", xbc)
    yield _vector(p + "ssm_dt.bias", heads)
    yield TensorSpec(p + "ssm_a", (1, heads), F32)
    yield TensorSpec(p + "ssm_d", (1, heads), F32)
    yield TensorSpec(p + "ssm_norm.weight", (inner // max(spec.ssm_group_count, 1), max(spec.ssm_group_count, 1)), F32)
    yield _weight(p + "ssm_out.weight", (inner, d), w)


def _dense_ffn(spec: ModelSpec, p: str, width: int) -> Iterator[TensorSpec]:
    d, w = spec.embedding_length, spec.weight_type
    yield _weight(p + "ffn_gate.weight", (d, width), w)
    yield _weight(p + "ffn_up.weight", (d, width), w)
    yield _weight(p + "ffn_down.weight", (width, d), w)


def _moe(spec: ModelSpec, p: str) -> Iterator[TensorSpec]:
    d, n = spec.embedding_length, spec.expert_count
    f, x = spec.expert_feed_forward_length, spec.expert_type or spec.weight_type
    yield TensorSpec(p + "ffn_gate_inp.weight", (d, n), F32)
    if spec.architecture == "deepseek2":
        yield _vector(p + "exp_probs_b.bias", n)
    yield _weight(p + "ffn_gate_exps.weight", (d, f, n), x)
    yield _weight(p + "ffn_up_exps.weight", (d, f, n), x)
    yield _weight(p + "ffn_down_exps.weight", (f, d, n), x)
    if spec.architecture == "gpt-oss":
        yield TensorSpec(p + "ffn_gate_inp.bias", (n,), F32)
        for name in ("ffn_gate_exps.bias", "ffn_up_exps.bias"):
            yield TensorSpec(p + name, (f, n), F32)
        yield TensorSpec(p + "ffn_down_exps.bias", (d, n), F32)
    if spec.expert_shared_feed_forward_length:
        s, w = spec.expert_shared_feed_forward_length, spec.weight_type
        yield _weight(p + "ffn_gate_shexp.weight", (d, s), w)
        yield _weight(p + "ffn_up_shexp.weight", (d, s), w)
        yield _weight(p + "ffn_down_shexp.weight", (s, d), w)
