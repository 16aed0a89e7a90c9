"""Synthetic GGUF files with the exact tensor tables of real models, without their weights.

A ``ModelSpec`` describes a model's hyperparameters; ``tensor_table`` lists the tensors llama.cpp
expects for its architecture (names, ggml shapes, types); ``write_gguf`` writes the header, the
metadata and that table with ``gguf.GGUFWriter`` and either stops there (header-only) or extends
the file to its full size as a sparse file (zeros, no disk blocks). ``REAL_MODELS`` holds the
shapes of well-known models; ``GROUND_TRUTH_MODELS`` those measured in ``shared/ground-truth``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter, Keys

from layerfit.domain.base import Frozen, NonNegInt, PosInt

Q = GGMLQuantizationType
F32 = Q.F32
DataMode = Literal["header", "sparse"]


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


# ---------------------------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------------------------


MetadataValue = int | float | bool | str | tuple[int, ...]


def metadata(spec: ModelSpec) -> dict[str, MetadataValue]:
    """The hyperparameter keys llama.cpp reads for the architecture."""
    keys: dict[str, MetadataValue] = {
        Keys.LLM.CONTEXT_LENGTH: spec.context_length,
        Keys.LLM.EMBEDDING_LENGTH: spec.embedding_length,
        Keys.LLM.BLOCK_COUNT: spec.block_count,
        Keys.LLM.FEED_FORWARD_LENGTH: spec.feed_forward_length,
        Keys.LLM.VOCAB_SIZE: spec.vocab_size,
        Keys.Attention.HEAD_COUNT: spec.head_count,
        Keys.Attention.HEAD_COUNT_KV: spec.head_count_kv,
        Keys.Attention.KEY_LENGTH: spec.head_dim,
        Keys.Attention.VALUE_LENGTH: spec.v_dim,
        Keys.Attention.LAYERNORM_RMS_EPS: 1e-6,
        Keys.Rope.FREQ_BASE: 10000.0,
    }
    if spec.is_moe:
        keys[Keys.LLM.EXPERT_COUNT] = spec.expert_count
        keys[Keys.LLM.EXPERT_USED_COUNT] = spec.expert_used_count
        keys[Keys.LLM.EXPERT_FEED_FORWARD_LENGTH] = spec.expert_feed_forward_length
    if spec.expert_shared_feed_forward_length:
        keys[Keys.LLM.EXPERT_SHARED_COUNT] = 1
        keys[Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH] = spec.expert_shared_feed_forward_length
    if spec.leading_dense_block_count:
        keys[Keys.LLM.LEADING_DENSE_BLOCK_COUNT] = spec.leading_dense_block_count
    if spec.sliding_window:
        keys[Keys.Attention.SLIDING_WINDOW] = spec.sliding_window
    if spec.kv_lora_rank:
        # converted MLA files: one latent "head" of kv_lora_rank + rope_dim keys, kv_lora_rank values
        keys[Keys.Attention.HEAD_COUNT_KV] = 1
        keys[Keys.Attention.KEY_LENGTH] = spec.kv_lora_rank + spec.rope_dim
        keys[Keys.Attention.VALUE_LENGTH] = spec.kv_lora_rank
        keys[Keys.Attention.KEY_LENGTH_MLA] = spec.head_dim
        keys[Keys.Attention.VALUE_LENGTH_MLA] = spec.v_dim
        keys[Keys.Attention.KV_LORA_RANK] = spec.kv_lora_rank
        keys[Keys.Rope.DIMENSION_COUNT] = spec.rope_dim
        if spec.q_lora_rank:
            keys[Keys.Attention.Q_LORA_RANK] = spec.q_lora_rank
    if spec.ssm_inner_size:
        keys[Keys.SSM.CONV_KERNEL] = spec.ssm_conv_kernel
        keys[Keys.SSM.INNER_SIZE] = spec.ssm_inner_size
        keys[Keys.SSM.STATE_SIZE] = spec.ssm_state_size
        keys[Keys.SSM.GROUP_COUNT] = spec.ssm_group_count
        keys[Keys.SSM.TIME_STEP_RANK] = spec.ssm_head_count
        if spec.attention_layers is None:
            for key in (
                Keys.Attention.HEAD_COUNT,
                Keys.Attention.HEAD_COUNT_KV,
                Keys.Attention.KEY_LENGTH,
                Keys.Attention.VALUE_LENGTH,
            ):
                del keys[key]
        else:
            keys[Keys.Attention.HEAD_COUNT_KV] = tuple(
                spec.head_count_kv if spec.attends(block) else 0 for block in range(spec.block_count)
            )
    if spec.encoder:
        keys[Keys.LLM.POOLING_TYPE] = 1
        keys[Keys.Attention.CAUSAL] = False
    for key, value in spec.metadata.items():
        if value is None:
            keys.pop(key, None)
        else:
            keys[key] = value
    return {key.format(arch=spec.architecture): value for key, value in keys.items()}


def _add(writer: GGUFWriter, key: str, value: MetadataValue) -> None:
    if isinstance(value, tuple):
        writer.add_array(key, list(value))
    elif isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int) and 0 <= value < 2**32:
        writer.add_uint32(key, value)
    elif isinstance(value, int):
        writer.add_int64(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    else:
        writer.add_string(key, value)


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def write_gguf(
    path: str | os.PathLike[str],
    spec: ModelSpec,
    *,
    data: DataMode = "header",
    tokenizer: bool = False,
    merges: int = 0,
    split_max_tensors: int = 0,
    tensors: list[TensorSpec] | None = None,
    tokenizer_model: str = "gpt2",
) -> list[Path]:
    """Write the model's GGUF: header and tensor table, then (``sparse``) zero data to full size.

    ``tokenizer`` adds a vocabulary of ``vocab_size`` token strings with scores and types, as
    real files carry, and ``merges`` BPE merge strings. With ``split_max_tensors`` the model is split into shards named
    ``NAME-0000i-of-0000N.gguf``. ``tensors`` replaces the spec's tensor table and
    ``tokenizer_model`` names the vocabulary type (``test``: llama.cpp's hashing test tokenizer,
    which needs no merges). Returns the written paths.
    """
    writer = GGUFWriter(os.fspath(path), spec.architecture, split_max_tensors=split_max_tensors)
    writer.add_name(spec.name)
    writer.add_file_type(int(spec.weight_type))
    for key, value in metadata(spec).items():
        _add(writer, key, value)
    if tokenizer:
        _add_tokenizer(writer, spec.vocab_size, merges, tokenizer_model)
    for tensor in tensor_table(spec) if tensors is None else tensors:
        element_shape = tuple(reversed(tensor.shape))
        writer.add_tensor_info(
            tensor.name, element_shape, np.dtype(np.float32), tensor.n_bytes, raw_dtype=tensor.ggml_type
        )
    paths = writer.format_shard_names(Path(path))
    shard_data = [
        sum(GGUFWriter.ggml_pad(info.nbytes, writer.data_alignment) for info in shard.values())
        for shard in writer.tensors
    ]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    for shard_path, data_bytes in zip(paths, shard_data, strict=True):
        _finish(shard_path, writer.data_alignment, data_bytes if data == "sparse" else 0)
    return paths


def _finish(path: Path, alignment: int, data_bytes: int) -> None:
    """Pad the header to the alignment and, for sparse files, extend to the full data size."""
    size = path.stat().st_size
    data_start = -(-size // alignment) * alignment
    with open(path, "r+b") as handle:
        handle.truncate(data_start + data_bytes)


def _add_tokenizer(writer: GGUFWriter, vocab_size: int, merges: int, model: str = "gpt2") -> None:
    writer.add_tokenizer_model(model)
    writer.add_token_list([f"tok{i}" for i in range(vocab_size)])
    writer.add_token_scores([0.0] * vocab_size)
    writer.add_token_types([1] * vocab_size)
    if merges:
        writer.add_token_merges([f"tok{i} tok{i + 1}" for i in range(merges)])


def set_version(path: str | os.PathLike[str], version: int) -> None:
    """Rewrite the format version of a written file (GGUF v2 and v3 share their layout)."""
    with open(path, "r+b") as handle:
        handle.seek(4)
        handle.write(int(version).to_bytes(4, "little"))


# ---------------------------------------------------------------------------------------------
# Catalogue
# ---------------------------------------------------------------------------------------------


def _llama(
    name: str, blocks: int, d: int, ffn: int, heads: int, heads_kv: int, head_dim: int, **kw: object
) -> ModelSpec:
    fields: dict[str, object] = {
        "name": name,
        "architecture": "llama",
        "block_count": blocks,
        "embedding_length": d,
        "feed_forward_length": ffn,
        "head_count": heads,
        "head_count_kv": heads_kv,
        "head_dim": head_dim,
        "vocab_size": 128256,
        "context_length": 131072,
    }
    fields.update(kw)
    return ModelSpec.model_validate(fields)


REAL_MODELS: dict[str, ModelSpec] = {
    "llama-3.2-1b": _llama("Llama-3.2-1B", 16, 2048, 8192, 32, 8, 64, tied_embeddings=True),
    "llama-3.1-8b": _llama("Llama-3.1-8B", 32, 4096, 14336, 32, 8, 128, weight_type=Q.Q4_K, embedding_type=Q.Q6_K),
    "llama-3.1-70b": _llama("Llama-3.1-70B", 80, 8192, 28672, 64, 8, 128, weight_type=Q.Q4_K, embedding_type=Q.Q6_K),
    "llama-3.1-405b": _llama(
        "Llama-3.1-405B", 126, 16384, 53248, 128, 8, 128, weight_type=Q.Q4_K, embedding_type=Q.Q6_K
    ),
    "mixtral-8x7b": _llama(
        "Mixtral-8x7B",
        32,
        4096,
        14336,
        32,
        8,
        128,
        vocab_size=32000,
        context_length=32768,
        weight_type=Q.Q4_K,
        embedding_type=Q.Q6_K,
        expert_count=8,
        expert_used_count=2,
        expert_feed_forward_length=14336,
    ),
    "qwen3-30b-a3b": ModelSpec(
        name="Qwen3-30B-A3B",
        architecture="qwen3moe",
        block_count=48,
        embedding_length=2048,
        feed_forward_length=6144,
        head_count=32,
        head_count_kv=4,
        head_dim=128,
        vocab_size=151936,
        context_length=40960,
        weight_type=Q.Q4_K,
        embedding_type=Q.Q6_K,
        expert_count=128,
        expert_used_count=8,
        expert_feed_forward_length=768,
        qk_norm=True,
    ),
    "qwen3-235b-a22b": ModelSpec(
        name="Qwen3-235B-A22B",
        architecture="qwen3moe",
        block_count=94,
        embedding_length=4096,
        feed_forward_length=12288,
        head_count=64,
        head_count_kv=4,
        head_dim=128,
        vocab_size=151936,
        context_length=40960,
        weight_type=Q.Q4_K,
        embedding_type=Q.Q6_K,
        expert_count=128,
        expert_used_count=8,
        expert_feed_forward_length=1536,
        qk_norm=True,
    ),
    "deepseek-v3": ModelSpec(
        name="DeepSeek-V3",
        architecture="deepseek2",
        block_count=61,
        embedding_length=7168,
        feed_forward_length=18432,
        head_count=128,
        head_count_kv=128,
        head_dim=192,
        value_dim=128,
        vocab_size=129280,
        context_length=163840,
        weight_type=Q.Q4_K,
        embedding_type=Q.Q6_K,
        expert_count=256,
        expert_used_count=8,
        expert_feed_forward_length=2048,
        expert_shared_feed_forward_length=2048,
        leading_dense_block_count=3,
        q_lora_rank=1536,
        kv_lora_rank=512,
        rope_dim=64,
    ),
    "gemma-3-27b": ModelSpec(
        name="Gemma-3-27B",
        architecture="gemma3",
        block_count=62,
        embedding_length=5376,
        feed_forward_length=21504,
        head_count=32,
        head_count_kv=16,
        head_dim=128,
        vocab_size=262208,
        context_length=131072,
        tied_embeddings=True,
        weight_type=Q.Q4_K,
        embedding_type=Q.Q6_K,
        sliding_window=1024,
        qk_norm=True,
        post_norms=True,
    ),
    "gpt-oss-120b": ModelSpec(
        name="gpt-oss-120b",
        architecture="gpt-oss",
        block_count=36,
        embedding_length=2880,
        feed_forward_length=0,
        head_count=64,
        head_count_kv=8,
        head_dim=64,
        vocab_size=201088,
        context_length=131072,
        weight_type=Q.F16,
        expert_type=Q.MXFP4,
        expert_count=128,
        expert_used_count=4,
        expert_feed_forward_length=2880,
        sliding_window=128,
        attention_bias=True,
        post_norms=False,
    ),
}
"""Shapes of well-known models (the usual Q4_K_M-style mix: Q4_K weights, Q6_K embeddings)."""

GROUND_TRUTH_MODELS: dict[str, ModelSpec] = {
    "llama1b-f16": _llama("llama1b-f16", 16, 2048, 8192, 32, 8, 64, tied_embeddings=True),
    "llama1b-q8": _llama("llama1b-q8", 16, 2048, 8192, 32, 8, 64, tied_embeddings=True, weight_type=Q.Q8_0),
    "llama8b-q4": _llama("llama8b-q4", 32, 4096, 14336, 32, 8, 128, weight_type=Q.Q4_0),
    "llama70b-q4": _llama("llama70b-q4", 80, 8192, 28672, 64, 8, 128, weight_type=Q.Q4_0),
    "qwen30b-q4": ModelSpec(
        name="qwen30b-q4",
        architecture="qwen3moe",
        block_count=48,
        embedding_length=2048,
        feed_forward_length=6144,
        head_count=32,
        head_count_kv=4,
        head_dim=128,
        vocab_size=151936,
        context_length=40960,
        weight_type=Q.Q4_0,
        expert_count=128,
        expert_used_count=8,
        expert_feed_forward_length=768,
        qk_norm=True,
    ),
}
"""The synthetic models measured in ``shared/ground-truth`` (all 2-D weights in one type)."""
