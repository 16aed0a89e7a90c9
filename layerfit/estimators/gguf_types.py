"""The values a GGUF header is read into: metadata values, tensor-table entries, the header."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from layerfit.errors import EstimationError
from layerfit.estimators.gguf_constants import GGMLQuantizationType, GGUFValueType, Keys


@dataclass(frozen=True)
class ArrayInfo:
    """A metadata array that was skipped rather than decoded: its item type and length.

    Not a tuple on purpose: a skipped array must never pass for a decoded one."""

    item_type: GGUFValueType
    length: int


@dataclass(frozen=True)
class SkippedString:
    """A metadata string longer than ``MAX_STRING_BYTES``, skipped without being read."""

    length: int


MetaValue = int | float | bool | str | tuple[int | float | bool | str, ...] | ArrayInfo | SkippedString


class KeyType(NamedTuple):
    """The GGUF type a metadata value was written as, and its items' type for an array."""

    value: GGUFValueType
    item: GGUFValueType | None = None


class TensorInfo(NamedTuple):
    """One entry of a tensor table. ``shape`` is in ggml order (``ne0`` first)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    n_bytes: int
    data_offset: int
    """Absolute byte offset of the tensor's data in its file."""
    file_index: int
    """Index of the shard holding the tensor (0 for single-file models)."""


@dataclass(frozen=True)
class GgufHeader:
    """Everything a GGUF file says about itself, tensor data excluded."""

    path: str
    version: int
    alignment: int
    metadata: Mapping[str, MetaValue]
    tensors: tuple[TensorInfo, ...]
    files: tuple[str, ...]
    file_bytes: int
    """Size of all shards together."""
    header_bytes: int
    """Bytes before the tensor data, all shards together (metadata, tokenizer, tensor table)."""
    key_types: Mapping[str, KeyType] = field(default_factory=dict)
    """The GGUF type of each metadata value (llama.cpp refuses a key it reads as another type)."""

    @property
    def architecture(self) -> str:
        value = self.metadata.get(Keys.General.ARCHITECTURE)
        if not isinstance(value, str) or not value:
            raise EstimationError(self.path, Keys.General.ARCHITECTURE, "required key missing or not a string")
        return value

    @property
    def tensor_bytes(self) -> int:
        return sum(tensor.n_bytes for tensor in self.tensors)
