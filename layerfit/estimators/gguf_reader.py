"""Read a GGUF file's header, metadata and tensor table, never its tensor data.

The file is a location (``layerfit.io.sources``): a path, or a URL whose header is read by range
requests (``layerfit.remote``); either way its bytes come through a ``ByteSource``.

Large arrays (the tokenizer's tokens, scores and merges) are skipped by their length instead of
being decoded, so reading a header costs milliseconds and a few MiB whatever the model size.
GGUF v2 and v3 (little-endian) are supported, as are split models (``name-00001-of-00003.gguf``:
every shard's tensor table is read) and header-only or sparse files when ``allow_missing_data``.

Every defect is reported as an ``EstimationError`` naming the file, the byte offset or key, and
what was expected there. No allocation grows with a number the file writes: strings longer than
``MAX_STRING_BYTES`` are skipped without being read, string arrays are walked only up to
``MAX_STRINGS`` strings per file, entry and tensor counts are capped, and the metadata the
estimator reads is checked against what real models can have (``layerfit.estimators.sanity``).
When the file holds tensor data, every tensor must lie inside it and no two may overlap.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from itertools import pairwise
from typing import NamedTuple

from layerfit.errors import EstimationError
from layerfit.estimators.gguf_constants import (
    GGML_QUANT_SIZES,
    GGUF_DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    GGMLQuantizationType,
    Keys,
)
from layerfit.estimators.gguf_cursor import MAX_STRING_BYTES, MAX_STRINGS, Cursor
from layerfit.estimators.gguf_metadata import KEEP_ARRAY_ITEMS, KEEP_STRING_ITEMS, MAX_KEY_BYTES, read_metadata
from layerfit.estimators.gguf_types import ArrayInfo, GgufHeader, KeyType, MetaValue, SkippedString, TensorInfo
from layerfit.estimators.sanity import check_metadata
from layerfit.io import sources

__all__ = [
    "KEEP_ARRAY_ITEMS",
    "KEEP_STRING_ITEMS",
    "MAX_KEY_BYTES",
    "MAX_METADATA_ENTRIES",
    "MAX_STRINGS",
    "MAX_STRING_BYTES",
    "MAX_TENSORS",
    "ArrayInfo",
    "GgufHeader",
    "MetaValue",
    "SkippedString",
    "TensorInfo",
    "read_header",
    "shard_paths",
    "tensor_n_bytes",
]

SUPPORTED_VERSIONS = (2, 3)
MAX_DIMS = 4
"""ggml tensors have at most four dimensions."""
MAX_TENSOR_NAME_BYTES = 63
"""ggml keeps tensor names in 64-byte buffers, terminator included."""
MAX_METADATA_ENTRIES = 1 << 16
"""Metadata entries per file (real files have fewer than a hundred)."""
MAX_TENSORS = 1 << 17
"""Tensor-table entries per file (real files have a few thousand at most)."""
_MAX_INT64 = (1 << 63) - 1
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8
_MIN_KV_BYTES = 8 + 4 + 1
_SHARD_NAME = re.compile(r"^(?P<stem>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")


# ---------------------------------------------------------------------------------------------
# Tensor table
# ---------------------------------------------------------------------------------------------


class _RawTensor(NamedTuple):
    name: str
    shape: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    n_bytes: int
    relative_offset: int
    at: int


def tensor_n_bytes(shape: tuple[int, ...], ggml_type: GGMLQuantizationType) -> int:
    """``ggml_nbytes`` for a contiguous tensor: rows of ``ne0`` elements packed in blocks."""
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    n_elements = 1
    for dim in shape:
        n_elements *= dim
    return n_elements // block_size * type_size


def _read_tensor_info(cursor: Cursor, index: int) -> _RawTensor:
    at = cursor.pos
    name = cursor.utf8_string(f"name of tensor {index}", MAX_TENSOR_NAME_BYTES)
    n_dims = cursor.u32(f"dimension count of {name}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise cursor.error(f"tensor {name}: {n_dims} dimensions, expected 1 to {MAX_DIMS}", cursor.pos - 4)
    shape: list[int] = []
    n_elements = 1
    for axis in range(n_dims):
        dim_at = cursor.pos
        dim = cursor.u64(f"dimension {axis} of {name}")
        if dim > _MAX_INT64:
            raise cursor.error(f"tensor {name}: dimension {axis} is negative ({dim - (1 << 64)})", dim_at)
        n_elements *= dim
        if n_elements > _MAX_INT64:
            raise cursor.error(f"tensor {name}: element count overflows 64 bits", dim_at)
        shape.append(dim)
    type_at = cursor.pos
    code = cursor.u32(f"type of {name}")
    try:
        ggml_type = GGMLQuantizationType(code)
    except ValueError:
        raise cursor.error(f"tensor {name}: unknown tensor type {code}", type_at) from None
    if ggml_type not in GGML_QUANT_SIZES:
        raise cursor.error(f"tensor {name}: type {ggml_type.name} has no known block size", type_at)
    block_size, _ = GGML_QUANT_SIZES[ggml_type]
    if shape[0] % block_size:
        raise cursor.error(
            f"tensor {name}: first dimension {shape[0]} is not a multiple of "
            f"the {ggml_type.name} block size {block_size}",
            at,
        )
    offset = cursor.u64(f"data offset of {name}")
    return _RawTensor(name, tuple(shape), ggml_type, tensor_n_bytes(tuple(shape), ggml_type), offset, at)


# ---------------------------------------------------------------------------------------------
# One file
# ---------------------------------------------------------------------------------------------


class _Shard(NamedTuple):
    path: str
    version: int
    alignment: int
    metadata: dict[str, MetaValue]
    tensors: tuple[TensorInfo, ...]
    size: int
    data_start: int
    key_types: dict[str, KeyType]


def _alignment(cursor: Cursor, metadata: Mapping[str, MetaValue]) -> int:
    value = metadata.get(Keys.General.ALIGNMENT, GGUF_DEFAULT_ALIGNMENT)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value & (value - 1):
        raise EstimationError(cursor.path, Keys.General.ALIGNMENT, f"expected a positive power of two, got {value!r}")
    return value


def _read_shard(path: str, file_index: int, allow_missing_data: bool) -> _Shard:
    try:
        source = sources.open_source(path)
    except OSError as exc:
        raise EstimationError(path, "file", f"cannot open: {exc.strerror or exc}") from None
    with source:
        size = source.size
        cursor = Cursor(source)
        magic = cursor.u32("magic")
        if magic != GGUF_MAGIC:
            raise cursor.error(f"not a GGUF file: magic {magic:#010x}, expected {GGUF_MAGIC:#010x} ('GGUF')", 0)
        version = cursor.u32("version")
        if version not in SUPPORTED_VERSIONS:
            hint = " (a big-endian file?)" if version & 0xFFFF == 0 and version else ""
            raise cursor.error(f"unsupported GGUF version {version}{hint}; expected 2 or 3", 4)
        tensor_count = cursor.u64("tensor count")
        kv_count = cursor.u64("metadata entry count")
        if tensor_count * _MIN_TENSOR_INFO_BYTES > cursor.remaining():
            raise cursor.error(f"tensor count {tensor_count} cannot fit in a file of {size} bytes", 8)
        if kv_count * _MIN_KV_BYTES > cursor.remaining():
            raise cursor.error(f"metadata entry count {kv_count} cannot fit in a file of {size} bytes", 16)
        if kv_count > MAX_METADATA_ENTRIES:
            raise cursor.error(f"metadata entry count {kv_count} exceeds the limit of {MAX_METADATA_ENTRIES}", 16)
        if tensor_count > MAX_TENSORS:
            raise cursor.error(f"tensor count {tensor_count} exceeds the limit of {MAX_TENSORS}", 8)
        metadata, key_types = read_metadata(cursor, kv_count)
        alignment = _alignment(cursor, metadata)
        raw = [_read_tensor_info(cursor, i) for i in range(tensor_count)]
        data_start = -(-cursor.pos // alignment) * alignment
        tensors = _check_tensors(path, raw, alignment, data_start, size, file_index, allow_missing_data)
        source.done(min(data_start, size))
    return _Shard(path, version, alignment, metadata, tensors, size, data_start, key_types)


def _check_tensors(
    path: str,
    raw: list[_RawTensor],
    alignment: int,
    data_start: int,
    size: int,
    file_index: int,
    allow_missing_data: bool,
) -> tuple[TensorInfo, ...]:
    seen: set[str] = set()
    tensors: list[TensorInfo] = []
    has_data = size > data_start
    for tensor in raw:
        if tensor.name in seen:
            raise EstimationError(path, f"byte {tensor.at}", f"duplicate tensor name {tensor.name!r}")
        seen.add(tensor.name)
        if tensor.relative_offset % alignment:
            raise EstimationError(
                path,
                f"byte {tensor.at}",
                f"tensor {tensor.name}: data offset {tensor.relative_offset} "
                f"is not a multiple of the alignment {alignment}",
            )
        start = data_start + tensor.relative_offset
        if (has_data or not allow_missing_data) and start + tensor.n_bytes > size:
            raise EstimationError(
                path,
                f"byte {tensor.at}",
                f"tensor {tensor.name}: data [{start}, {start + tensor.n_bytes}) lies past the end of the file "
                f"({size} bytes); tensor data is missing",
            )
        tensors.append(TensorInfo(tensor.name, tensor.shape, tensor.ggml_type, tensor.n_bytes, start, file_index))
    _check_overlaps(path, raw)
    return tuple(tensors)


def _check_overlaps(path: str, raw: list[_RawTensor]) -> None:
    """No two tensors' data may share a byte (ggml lays them out one after the other)."""
    ordered = sorted((t for t in raw if t.n_bytes), key=lambda t: t.relative_offset)
    for before, after in pairwise(ordered):
        if before.relative_offset + before.n_bytes > after.relative_offset:
            raise EstimationError(
                path,
                f"byte {after.at}",
                f"tensor {after.name}: data at offset {after.relative_offset} overlaps tensor {before.name} "
                f"[{before.relative_offset}, {before.relative_offset + before.n_bytes})",
            )


# ---------------------------------------------------------------------------------------------
# Split models
# ---------------------------------------------------------------------------------------------


def shard_paths(path: str, count: int) -> tuple[str, ...]:
    """All shard paths (or URLs) of a split model, given any one of them."""
    match = _SHARD_NAME.match(sources.file_name(path))
    if match is None:
        raise EstimationError(
            path, Keys.Split.LLM_KV_SPLIT_COUNT, f"{count} shards, but the name is not NAME-00001-of-{count:05d}.gguf"
        )
    if int(match["count"]) != count:
        raise EstimationError(
            path, Keys.Split.LLM_KV_SPLIT_COUNT, f"{count} shards, but the name says {int(match['count'])}"
        )
    names = (f"{match['stem']}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1))
    return tuple(sources.sibling(path, name) for name in names)


def _int_key(path: str, metadata: Mapping[str, MetaValue], key: str, default: int | None) -> int:
    value = metadata.get(key, default)
    if value is None:
        raise EstimationError(path, key, "required key missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EstimationError(path, key, f"expected a non-negative integer, got {value!r}")
    return value


def read_header(path: str | os.PathLike[str], allow_missing_data: bool = True) -> GgufHeader:
    """Read the header, metadata and tensor table of a GGUF file (all shards of a split model):
    a path, an ``https://`` URL, ``hf://ORG/REPO[@REVISION]/FILE.gguf`` or ``ms://...`` (see
    ``layerfit.remote``). A URL's file size is the server's, so the tensor-extent checks hold."""
    path = os.fspath(path)
    first = _read_shard(path, 0, allow_missing_data)
    count = _int_key(path, first.metadata, Keys.Split.LLM_KV_SPLIT_COUNT, 1)
    if count <= 1:
        shards = [first]
    else:
        paths = shard_paths(path, count)
        number = _int_key(path, first.metadata, Keys.Split.LLM_KV_SPLIT_NO, 0)
        shards = []
        for index, shard_path in enumerate(paths):
            if not sources.exists(shard_path):
                raise EstimationError(shard_path, "file", f"shard {index + 1} of {count} is missing")
            shard = (
                first
                if index == number and sources.same_file(shard_path, path)
                else _read_shard(shard_path, index, allow_missing_data)
            )
            shards.append(shard)
        _check_split(shards, count)
    main = shards[0]
    check_metadata(main.path, main.metadata)
    return GgufHeader(
        path=main.path,
        version=main.version,
        alignment=main.alignment,
        metadata=main.metadata,
        tensors=tuple(tensor for shard in shards for tensor in shard.tensors),
        files=tuple(shard.path for shard in shards),
        file_bytes=sum(shard.size for shard in shards),
        header_bytes=sum(min(shard.data_start, shard.size) for shard in shards),
        key_types=main.key_types,
    )


def _check_split(shards: list[_Shard], count: int) -> None:
    names: set[str] = set()
    for index, shard in enumerate(shards):
        number = _int_key(shard.path, shard.metadata, Keys.Split.LLM_KV_SPLIT_NO, None)
        if number != index:
            raise EstimationError(
                shard.path, Keys.Split.LLM_KV_SPLIT_NO, f"expected shard number {index}, got {number}"
            )
        shard_count = _int_key(shard.path, shard.metadata, Keys.Split.LLM_KV_SPLIT_COUNT, 1)
        if shard_count != count:
            raise EstimationError(shard.path, Keys.Split.LLM_KV_SPLIT_COUNT, f"expected {count}, got {shard_count}")
        for tensor in shard.tensors:
            if tensor.name in names:
                raise EstimationError(shard.path, "tensor table", f"tensor {tensor.name!r} appears in two shards")
            names.add(tensor.name)
    first = shards[0]
    expected = first.metadata.get(Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT)
    if expected is not None and expected != len(names):
        raise EstimationError(
            first.path, Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT, f"says {expected} tensors, the shards hold {len(names)}"
        )
