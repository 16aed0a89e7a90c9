"""Synthetic GGUF files with the exact tensor tables of real models, without their weights.

A ``ModelSpec`` describes a model's hyperparameters; ``tensor_table`` lists the tensors llama.cpp
expects for its architecture (names, ggml shapes, types); ``write_gguf`` writes the header, the
metadata and that table with ``gguf.GGUFWriter`` and either stops there (header-only) or extends
the file to its full size as a sparse file (zeros, no disk blocks). ``REAL_MODELS`` holds the
shapes of well-known models; ``GROUND_TRUTH_MODELS`` those measured in ``shared/ground-truth``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import numpy as np
from gguf import GGUFWriter, Keys

from layerfit.estimators import arch_keys
from layerfit.testing.synthetic_catalogue import GROUND_TRUTH_MODELS, REAL_MODELS
from layerfit.testing.synthetic_spec import F32, ModelSpec, Q, TensorSpec, loader_table, tensor_table

__all__ = [
    "F32",
    "GROUND_TRUTH_MODELS",
    "NO_TOKENIZER",
    "REAL_MODELS",
    "DataMode",
    "ModelSpec",
    "Q",
    "TensorSpec",
    "metadata",
    "set_version",
    "tensor_table",
    "write_gguf",
]

DataMode = Literal["header", "sparse"]
NO_TOKENIZER = "none"
"""The tokenizer model of a file written without a vocabulary: llama.cpp loads it without a token
list, with ``vocab_size`` dummy tokens: the model loads and its context is built (b11434 CPU build),
though no prompt can be tokenized."""


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
    for key, default in _required_defaults(spec).items():
        keys.setdefault(key, default)
    for key, value in spec.metadata.items():
        if value is None:
            keys.pop(key, None)
        else:
            keys[key] = value
    return {key.format(arch=spec.architecture): value for key, value in keys.items()}


def _required_defaults(spec: ModelSpec) -> dict[str, MetadataValue]:
    """The keys the architecture's loader requires (``arch_keys.ARCH_KEYS``) that the spec does not
    set, with the spec's own value or a neutral one, so that llama.cpp would load the file."""
    defaults: dict[str, MetadataValue] = {
        arch_keys.EPS: 1e-5,
        arch_keys.RMS_EPS: 1e-6,
        arch_keys.WINDOW: spec.sliding_window,
        arch_keys.EXPERT_WIDTH: spec.expert_feed_forward_length,
        "{arch}.expert_shared_count": 1 if spec.expert_shared_feed_forward_length else 0,
        "{arch}.attention.kv_lora_rank": spec.kv_lora_rank,
        "{arch}.logit_scale": 1.0,
        "{arch}.interleave_moe_layer_step": 1,
        **dict.fromkeys(arch_keys.SSM, 0),
        arch_keys.SSM_GROUPS: spec.ssm_group_count,
    }
    rules = arch_keys.ARCH_KEYS.get(spec.architecture, {})
    return {key: value for key, value in defaults.items() if rules.get(key, (None, False))[1]}


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
    real files carry, and ``merges`` BPE merge strings; without it the file's tokenizer is ``none``
    (``NO_TOKENIZER``: no token list, llama.cpp sizes the vocabulary by ``vocab_size``), the
    smallest that llama.cpp loads (it loads a tokenizer for every model). With ``split_max_tensors``
    the model is split into shards named ``NAME-0000i-of-0000N.gguf``. ``tensors`` replaces the
    spec's tensor table (``tensor_table`` as the architecture's loader names it, ``loader_table``)
    and ``tokenizer_model`` names the vocabulary type (``test``: llama.cpp's hashing test tokenizer,
    which needs no merges). Returns the written paths.
    """
    writer = GGUFWriter(os.fspath(path), spec.architecture, split_max_tensors=split_max_tensors)
    writer.add_name(spec.name)
    writer.add_file_type(int(spec.weight_type))
    for key, value in metadata(spec).items():
        _add(writer, key, value)
    if tokenizer:
        _add_tokenizer(writer, spec.vocab_size, merges, tokenizer_model)
    else:
        writer.add_tokenizer_model(NO_TOKENIZER)
    for tensor in loader_table(spec, tensor_table(spec)) if tensors is None else tensors:
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
