"""GGUF metadata entries: typed values, small arrays decoded, large ones skipped by their length."""

from __future__ import annotations

from layerfit.estimators.gguf_constants import GGUFValueType
from layerfit.estimators.gguf_cursor import MAX_STRINGS, SCALAR_FORMATS, Cursor
from layerfit.estimators.gguf_types import ArrayInfo, KeyType, MetaValue, SkippedString

MAX_KEY_BYTES = 65535
KEEP_ARRAY_ITEMS = 4096
"""Numeric arrays up to this length are decoded (per-layer values); longer ones are skipped."""
KEEP_STRING_ITEMS = 64
"""String arrays up to this length are decoded (tags, languages); longer ones are skipped."""


def _value_type(cursor: Cursor, what: str) -> GGUFValueType:
    at = cursor.pos
    code = cursor.u32(what)
    try:
        return GGUFValueType(code)
    except ValueError:
        raise cursor.error(f"{what}: unknown value type {code}", at) from None


def _read_value(cursor: Cursor, vtype: GGUFValueType, key: str) -> tuple[MetaValue, KeyType]:
    if vtype is GGUFValueType.STRING:
        return cursor.string_or_skip(f"value of {key}"), KeyType(vtype)
    if vtype is GGUFValueType.ARRAY:
        at = cursor.pos
        item_type = _value_type(cursor, f"item type of {key}")
        return _read_array(cursor, key, item_type, at), KeyType(vtype, item_type)
    return cursor.unpack(SCALAR_FORMATS[vtype], f"value of {key}"), KeyType(vtype)


def _read_array(cursor: Cursor, key: str, item_type: GGUFValueType, at: int) -> MetaValue:
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
    fmt = SCALAR_FORMATS[item_type]
    if count * fmt.size > cursor.remaining():
        raise cursor.error(f"{key}: {count} items of {fmt.size} bytes run past the end of the file", at)
    if count <= KEEP_ARRAY_ITEMS:
        data = cursor.raw(count * fmt.size, key)
        return tuple(item[0] for item in fmt.iter_unpack(data))
    cursor.skip(count * fmt.size, key)
    return ArrayInfo(item_type, count)


def _small_string_array(cursor: Cursor, key: str, count: int) -> MetaValue:
    """Up to ``KEEP_STRING_ITEMS`` strings, decoded; skipped whole if one is too long to keep."""
    items: list[str] = []
    for i in range(count):
        item = cursor.string_or_skip(f"{key}[{i}]")
        if isinstance(item, SkippedString):
            cursor.skip_strings(count - i - 1, key)
            return ArrayInfo(GGUFValueType.STRING, count)
        items.append(item)
    return tuple(items)


def read_metadata(cursor: Cursor, kv_count: int) -> tuple[dict[str, MetaValue], dict[str, KeyType]]:
    """The entries' values, and the GGUF type each was written as."""
    metadata: dict[str, MetaValue] = {}
    types: dict[str, KeyType] = {}
    for i in range(kv_count):
        at = cursor.pos
        key = cursor.utf8_string(f"key of metadata entry {i}", MAX_KEY_BYTES)
        if key in metadata:
            raise cursor.error(f"duplicate metadata key {key!r}", at)
        vtype = _value_type(cursor, f"type of {key}")
        metadata[key], types[key] = _read_value(cursor, vtype, key)
    return metadata, types
