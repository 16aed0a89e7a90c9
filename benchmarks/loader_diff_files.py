"""The GGUF files of the loader differential: an architecture model as typed keys and tensors.

``base_model`` turns an ``ARCH_MODELS`` entry into a ``GgufModel`` (every metadata key with its
GGUF type, the tokenizer's keys, the tensor table) with a small vocabulary; mutations edit that
model and ``write_model`` writes it as a sparse file (header, then zeros to full size), so that
llama.cpp can load it and layerfit can read it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gguf import GGUFValueType, GGUFWriter

from layerfit.testing.arch_fixtures import ARCH_MODELS, TOKENIZER, arch_tensor_table
from layerfit.testing.synthetic import TensorSpec, metadata

VOCAB = 512
"""Tokens of every written model (the architecture models have 32,000 or 30,522)."""


@dataclass(frozen=True)
class Value:
    """One metadata value with the GGUF type it is written as (and its items' type for arrays)."""

    type: GGUFValueType
    value: object
    item_type: GGUFValueType | None = None


@dataclass(frozen=True)
class GgufModel:
    """A GGUF file to write: its model's name, architecture, block count, keys and tensors."""

    name: str
    architecture: str
    blocks: int
    keys: dict[str, Value]
    tensors: tuple[TensorSpec, ...]
    encoder: bool = False

    def with_keys(self, keys: dict[str, Value]) -> GgufModel:
        return replace(self, keys=keys)

    def with_tensors(self, tensors: Sequence[TensorSpec]) -> GgufModel:
        return replace(self, tensors=tuple(tensors))


def typed(value: object) -> Value:
    """The GGUF type ``write_gguf`` gives a Python value (integers are uint32, arrays int32)."""
    if isinstance(value, tuple):
        first = value[0]
        item = (
            GGUFValueType.BOOL
            if isinstance(first, bool)
            else GGUFValueType.FLOAT32
            if isinstance(first, float)
            else GGUFValueType.STRING
            if isinstance(first, str)
            else GGUFValueType.INT32
        )
        return Value(GGUFValueType.ARRAY, value, item)
    if isinstance(value, bool):
        return Value(GGUFValueType.BOOL, value)
    if isinstance(value, int):
        return Value(GGUFValueType.UINT32 if 0 <= value < 2**32 else GGUFValueType.INT64, value)
    if isinstance(value, float):
        return Value(GGUFValueType.FLOAT32, value)
    return Value(GGUFValueType.STRING, str(value))


def tokenizer_keys(vocab: int) -> dict[str, Value]:
    """llama.cpp's hashing test tokenizer over ``vocab`` tokens, with scores and types."""
    return {
        "tokenizer.ggml.model": Value(GGUFValueType.STRING, TOKENIZER),
        "tokenizer.ggml.tokens": Value(
            GGUFValueType.ARRAY, tuple(f"tok{i}" for i in range(vocab)), GGUFValueType.STRING
        ),
        "tokenizer.ggml.scores": Value(GGUFValueType.ARRAY, (0.0,) * vocab, GGUFValueType.FLOAT32),
        "tokenizer.ggml.token_type": Value(GGUFValueType.ARRAY, (1,) * vocab, GGUFValueType.INT32),
    }


def base_model(name: str, vocab: int = VOCAB) -> GgufModel:
    """``ARCH_MODELS[name]`` with a ``vocab``-token vocabulary, as typed keys and its tensor table."""
    spec = ARCH_MODELS[name].model_copy(update={"vocab_size": vocab})
    keys = {
        "general.architecture": Value(GGUFValueType.STRING, spec.architecture),
        "general.name": Value(GGUFValueType.STRING, spec.name),
        "general.file_type": Value(GGUFValueType.UINT32, int(spec.weight_type)),
    }
    keys |= {key: typed(value) for key, value in metadata(spec).items()}
    keys |= tokenizer_keys(vocab)
    tensors = tuple(arch_tensor_table(spec))
    return GgufModel(name, spec.architecture, spec.block_count, keys, tensors, spec.encoder)


def write_model(path: str | os.PathLike[str], model: GgufModel) -> Path:
    """Write the model's header and tensor table, then extend the file with zeros to full size."""
    path = Path(path)
    writer = GGUFWriter(os.fspath(path), arch=model.architecture)
    writer.kv_data[0].clear()  # the architecture key is one of the model's own (or mutated away)
    for key, value in model.keys.items():
        items = list(value.value) if isinstance(value.value, tuple) else value.value
        writer.add_key_value(key, items, value.type, value.item_type)
    for tensor in model.tensors:
        shape = tuple(reversed(tensor.shape))
        writer.add_tensor_info(tensor.name, shape, np.dtype(np.float32), tensor.n_bytes, raw_dtype=tensor.ggml_type)
    data_bytes = sum(GGUFWriter.ggml_pad(t.n_bytes, writer.data_alignment) for t in model.tensors)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    size = path.stat().st_size
    start = -(-size // writer.data_alignment) * writer.data_alignment
    with open(path, "r+b") as handle:
        handle.truncate(start + data_bytes)
    return path
