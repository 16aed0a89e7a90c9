"""Read a GGUF file's header, metadata and tensor table, never its tensor data.

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
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise, repeat
from typing import BinaryIO, NamedTuple

from layerfit.errors import EstimationError
from layerfit.estimators.gguf_constants import (
    GGML_QUANT_SIZES,
    GGUF_DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    GGMLQuantizationType,
    GGUFValueType,
    Keys,
)
from layerfit.estimators.sanity import check_metadata

SUPPORTED_VERSIONS = (2, 3)
MAX_DIMS = 4
"""ggml tensors have at most four dimensions."""
MAX_TENSOR_NAME_BYTES = 63
"""ggml keeps tensor names in 64-byte buffers, terminator included."""
MAX_KEY_BYTES = 65535
KEEP_ARRAY_ITEMS = 4096
"""Numeric arrays up to this length are decoded (per-layer values); longer ones are skipped."""
KEEP_STRING_ITEMS = 64
"""String arrays up to this length are decoded (tags, languages); longer ones are skipped."""
MAX_STRING_BYTES = 1 << 20
"""Longer metadata strings are skipped unread (``SkippedString``); chat templates are ~100 KB."""
MAX_STRINGS = 1 << 21
"""Strings in skipped string arrays, all arrays of a file together (vocabularies and merges of real
models have a few hundred thousand); more are refused rather than walked."""
MAX_METADATA_ENTRIES = 1 << 16
"""Metadata entries per file (real files have fewer than a hundred)."""
MAX_TENSORS = 1 << 17
"""Tensor-table entries per file (real files have a few thousand at most)."""
_CHUNK = 1 << 20
_MAX_INT64 = (1 << 63) - 1
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8
_MIN_KV_BYTES = 8 + 4 + 1
_STRING_GUESS_BYTES = 32
"""Bytes per string assumed when sizing the read window for a skipped string array."""
_MAX_WINDOW = 16 << 20

_SCALAR_FORMATS: dict[GGUFValueType, struct.Struct] = {
    GGUFValueType.UINT8: struct.Struct("<B"),
    GGUFValueType.INT8: struct.Struct("<b"),
    GGUFValueType.UINT16: struct.Struct("<H"),
    GGUFValueType.INT16: struct.Struct("<h"),
    GGUFValueType.UINT32: struct.Struct("<I"),
    GGUFValueType.INT32: struct.Struct("<i"),
    GGUFValueType.FLOAT32: struct.Struct("<f"),
    GGUFValueType.BOOL: struct.Struct("<?"),
    GGUFValueType.UINT64: struct.Struct("<Q"),
    GGUFValueType.INT64: struct.Struct("<q"),
    GGUFValueType.FLOAT64: struct.Struct("<d"),
}
"""Wire format of each scalar value type (GGUF is little-endian here)."""

_U32 = _SCALAR_FORMATS[GGUFValueType.UINT32]
_U64 = _SCALAR_FORMATS[GGUFValueType.UINT64]
_SHARD_NAME = re.compile(r"^(?P<stem>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")


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

    @property
    def architecture(self) -> str:
        value = self.metadata.get(Keys.General.ARCHITECTURE)
        if not isinstance(value, str) or not value:
            raise EstimationError(self.path, Keys.General.ARCHITECTURE, "required key missing or not a string")
        return value

    @property
    def tensor_bytes(self) -> int:
        return sum(tensor.n_bytes for tensor in self.tensors)


# ---------------------------------------------------------------------------------------------
# Byte cursor
# ---------------------------------------------------------------------------------------------


class _Cursor:
    """Sequential, bounds-checked reads from a file through a sliding window buffer."""

    def __init__(self, path: str, handle: BinaryIO, size: int) -> None:
        self.path = path
        self.size = size
        self.pos = 0
        self.strings_left = MAX_STRINGS
        """What the string-array walks of this file may still cover."""
        self._handle = handle
        self._buf = b""
        self._start = 0

    def error(self, problem: str, at: int | None = None) -> EstimationError:
        return EstimationError(self.path, f"byte {self.pos if at is None else at}", problem)

    def remaining(self) -> int:
        return self.size - self.pos

    def _window(self, n: int, what: str) -> int:
        """Make ``[pos, pos + n)`` available in the buffer; return its index there."""
        end = self.pos + n
        if end > self.size:
            raise self.error(f"{what}: needs {n} bytes but the file ends at byte {self.size}")
        if self.pos < self._start or end > self._start + len(self._buf):
            # One read from ``pos``, the old window's tail read again: joining it to the new bytes
            # instead copied the whole window twice (a vocabulary's megabytes, ~10 ms).
            self._handle.seek(self.pos)
            self._buf = self._handle.read(max(_CHUNK, n))
            self._start = self.pos
            if len(self._buf) < n:
                raise self.error(f"{what}: the file is shorter than its reported size")
        return self.pos - self._start

    def unpack(self, fmt: struct.Struct, what: str) -> int | float | bool:
        index = self._window(fmt.size, what)
        value = fmt.unpack_from(self._buf, index)[0]
        self.pos += fmt.size
        return value  # type: ignore[no-any-return]

    def u32(self, what: str) -> int:
        return int(self.unpack(_U32, what))

    def u64(self, what: str) -> int:
        return int(self.unpack(_U64, what))

    def raw(self, n: int, what: str) -> bytes:
        index = self._window(n, what)
        self.pos += n
        return self._buf[index : index + n]

    def string(self, what: str, max_bytes: int | None = None) -> bytes:
        start = self.pos
        length = self.u64(f"{what} length")
        if max_bytes is not None and length > max_bytes:
            raise self.error(f"{what}: length {length} exceeds the limit of {max_bytes} bytes", start)
        if length > self.remaining():
            raise self.error(f"{what}: length {length} runs past the end of the file ({self.size} bytes)", start)
        return self.raw(length, what)

    def string_or_skip(self, what: str) -> str | SkippedString:
        """A length-prefixed string, decoded when at most ``MAX_STRING_BYTES`` long, else skipped."""
        start = self.pos
        length = self.u64(f"{what} length")
        if length > self.remaining():
            raise self.error(f"{what}: length {length} runs past the end of the file ({self.size} bytes)", start)
        if length > MAX_STRING_BYTES:
            self.pos += length
            return SkippedString(length)
        return _decode(self.raw(length, what))

    def skip(self, n: int, what: str) -> None:
        if n > self.remaining():
            raise self.error(f"{what}: {n} bytes run past the end of the file ({self.size} bytes)")
        self.pos += n

    def skip_strings(self, count: int, what: str) -> None:
        """Skip ``count`` length-prefixed strings without decoding them, a read window at a time."""
        left = count
        while left:
            want = min(self.remaining(), max(_CHUNK, _STRING_GUESS_BYTES * left), _MAX_WINDOW)
            index = self._window(want, f"{what} item")
            end, walked = _walk_strings(self._buf, index, left, index + want)
            if walked:
                self.pos = self._start + end
                left -= walked
            else:  # the next string does not fit in the window: skip it by its length
                self.skip(self.u64(f"{what} item length"), f"{what} item")
                left -= 1


def _walk_strings(buf: bytes, pos: int, count: int, limit: int) -> tuple[int, int]:
    """Walk up to ``count`` length-prefixed strings from ``pos`` that end by ``limit``: the offset
    reached and how many were walked."""
    end = min(limit, len(buf))
    view = buf if end == len(buf) else memoryview(buf)[:end]
    reached = _walk_all(view, pos, count)
    if reached is not None and reached <= end:
        return reached, count
    return _walk_checked(view, pos, count, end)


def _walk_all(view: bytes | memoryview, pos: int, count: int) -> int | None:
    """The offset after ``count`` strings from ``pos``, or ``None`` when a length prefix lies past
    ``view``. The hot loop of a header read (a vocabulary has ~10^5 strings), so it checks nothing
    per string: the last string may end past ``view``, which the caller checks once."""
    unpack = _U64.unpack_from
    fours, rest = divmod(count, 4)
    try:
        for _ in repeat(None, fours):  # four strings a turn: the loop's own overhead was 40 % of the walk
            pos += 8 + unpack(view, pos)[0]
            pos += 8 + unpack(view, pos)[0]
            pos += 8 + unpack(view, pos)[0]
            pos += 8 + unpack(view, pos)[0]
        for _ in repeat(None, rest):
            pos += 8 + unpack(view, pos)[0]
    except (struct.error, OverflowError):  # a length prefix past ``view``, or past any buffer
        return None
    return pos


def _walk_checked(view: bytes | memoryview, pos: int, count: int, end: int) -> tuple[int, int]:
    """``_walk_strings`` one bounds check per string: where the window ends inside the array."""
    unpack = _U64.unpack_from
    walked = 0
    try:
        for walked in range(count):
            after = pos + 8 + unpack(view, pos)[0]
            if after > end:
                return pos, walked
            pos = after
    except struct.error:  # the next length prefix itself runs past the window
        return pos, walked
    return pos, count


# ---------------------------------------------------------------------------------------------
# Metadata values
# ---------------------------------------------------------------------------------------------


def _value_type(cursor: _Cursor, what: str) -> GGUFValueType:
    at = cursor.pos
    code = cursor.u32(what)
    try:
        return GGUFValueType(code)
    except ValueError:
        raise cursor.error(f"{what}: unknown value type {code}", at) from None


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _read_value(cursor: _Cursor, vtype: GGUFValueType, key: str) -> MetaValue:
    if vtype is GGUFValueType.STRING:
        return cursor.string_or_skip(f"value of {key}")
    if vtype is GGUFValueType.ARRAY:
        return _read_array(cursor, key)
    return cursor.unpack(_SCALAR_FORMATS[vtype], f"value of {key}")


def _read_array(cursor: _Cursor, key: str) -> MetaValue:
    at = cursor.pos
    item_type = _value_type(cursor, f"item type of {key}")
    count = cursor.u64(f"length of {key}")
    if item_type is GGUFValueType.ARRAY:
        raise cursor.error(f"{key}: arrays of arrays are not supported", at)
    if item_type is GGUFValueType.STRING:
        if count * 8 > cursor.remaining():
            raise cursor.error(f"{key}: {count} strings cannot fit in the remaining {cursor.remaining()} bytes", at)
        if count <= KEEP_STRING_ITEMS:
            return _small_string_array(cursor, key, count)
        if count > cursor.strings_left:
            raise cursor.error(
                f"{key}: {count} strings, more than the {MAX_STRINGS} a file's string arrays may hold together "
                "(real vocabularies have a few hundred thousand)",
                at,
            )
        cursor.strings_left -= count
        cursor.skip_strings(count, key)
        return ArrayInfo(item_type, count)
    fmt = _SCALAR_FORMATS[item_type]
    if count * fmt.size > cursor.remaining():
        raise cursor.error(f"{key}: {count} items of {fmt.size} bytes run past the end of the file", at)
    if count <= KEEP_ARRAY_ITEMS:
        data = cursor.raw(count * fmt.size, key)
        return tuple(item[0] for item in fmt.iter_unpack(data))
    cursor.skip(count * fmt.size, key)
    return ArrayInfo(item_type, count)


def _small_string_array(cursor: _Cursor, key: str, count: int) -> MetaValue:
    """Up to ``KEEP_STRING_ITEMS`` strings, decoded; skipped whole if one is too long to keep."""
    items: list[str] = []
    for i in range(count):
        item = cursor.string_or_skip(f"{key}[{i}]")
        if isinstance(item, SkippedString):
            cursor.skip_strings(count - i - 1, key)
            return ArrayInfo(GGUFValueType.STRING, count)
        items.append(item)
    return tuple(items)


def _read_metadata(cursor: _Cursor, kv_count: int) -> dict[str, MetaValue]:
    metadata: dict[str, MetaValue] = {}
    for i in range(kv_count):
        at = cursor.pos
        raw_key = cursor.string(f"key of metadata entry {i}", MAX_KEY_BYTES)
        try:
            key = raw_key.decode("utf-8")
        except UnicodeDecodeError:
            raise cursor.error(f"key of metadata entry {i} is not UTF-8", at) from None
        if key in metadata:
            raise cursor.error(f"duplicate metadata key {key!r}", at)
        vtype = _value_type(cursor, f"type of {key}")
        metadata[key] = _read_value(cursor, vtype, key)
    return metadata


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


def _read_tensor_info(cursor: _Cursor, index: int) -> _RawTensor:
    at = cursor.pos
    raw_name = cursor.string(f"name of tensor {index}", MAX_TENSOR_NAME_BYTES)
    try:
        name = raw_name.decode("utf-8")
    except UnicodeDecodeError:
        raise cursor.error(f"name of tensor {index} is not UTF-8", at) from None
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


def _alignment(cursor: _Cursor, metadata: Mapping[str, MetaValue]) -> int:
    value = metadata.get(Keys.General.ALIGNMENT, GGUF_DEFAULT_ALIGNMENT)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value & (value - 1):
        raise EstimationError(cursor.path, Keys.General.ALIGNMENT, f"expected a positive power of two, got {value!r}")
    return value


def _read_shard(path: str, file_index: int, allow_missing_data: bool) -> _Shard:
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise EstimationError(path, "file", "a pipe or socket, not a GGUF file (opening it waits for a writer)")
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise EstimationError(path, "file", f"cannot open: {exc.strerror or exc}") from None
    with handle:
        size = os.fstat(handle.fileno()).st_size
        cursor = _Cursor(path, handle, size)
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
        metadata = _read_metadata(cursor, kv_count)
        alignment = _alignment(cursor, metadata)
        raw = [_read_tensor_info(cursor, i) for i in range(tensor_count)]
    data_start = -(-cursor.pos // alignment) * alignment
    tensors = _check_tensors(path, raw, alignment, data_start, size, file_index, allow_missing_data)
    return _Shard(path, version, alignment, metadata, tensors, size, data_start)


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
    """All shard paths of a split model, given any one of them."""
    directory, name = os.path.split(path)
    match = _SHARD_NAME.match(name)
    if match is None:
        raise EstimationError(
            path, Keys.Split.LLM_KV_SPLIT_COUNT, f"{count} shards, but the name is not NAME-00001-of-{count:05d}.gguf"
        )
    if int(match["count"]) != count:
        raise EstimationError(
            path, Keys.Split.LLM_KV_SPLIT_COUNT, f"{count} shards, but the name says {int(match['count'])}"
        )
    return tuple(os.path.join(directory, f"{match['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1))


def _int_key(path: str, metadata: Mapping[str, MetaValue], key: str, default: int | None) -> int:
    value = metadata.get(key, default)
    if value is None:
        raise EstimationError(path, key, "required key missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EstimationError(path, key, f"expected a non-negative integer, got {value!r}")
    return value


def read_header(path: str | os.PathLike[str], allow_missing_data: bool = True) -> GgufHeader:
    """Read the header, metadata and tensor table of a GGUF file (all shards of a split model)."""
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
            if not os.path.exists(shard_path):
                raise EstimationError(shard_path, "file", f"shard {index + 1} of {count} is missing")
            shard = (
                first
                if index == number and os.path.samefile(shard_path, path)
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
