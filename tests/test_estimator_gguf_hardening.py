"""GGUF files that attack memory or time: long strings, long string arrays, impossible metadata,
tensor data that lies, per-layer arrays of the wrong length. Each is read in bounded memory and
time, or refused with an EstimationError naming the key or place."""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import pytest
from fixtures_gguf import gguf_string, raw_gguf, u32
from gguf import GGMLQuantizationType, GGUFValueType

from layerfit.errors import EstimationError
from layerfit.estimators import ArrayInfo, read_gguf, read_header
from layerfit.estimators import gguf_reader as reader
from layerfit.estimators.gguf_reader import SkippedString

STRING, UINT32, ARRAY = GGUFValueType.STRING, GGUFValueType.UINT32, GGUFValueType.ARRAY
F32 = int(GGMLQuantizationType.F32)
ARCH = ("general.architecture", STRING, gguf_string("llama"))
MiB = 1 << 20


def _u32(key: str, value: int) -> tuple[str, int, bytes]:
    return (key, UINT32, u32(value))


def _string_array_head(key: str, count: int) -> tuple[str, int, bytes]:
    return (key, ARRAY, u32(STRING) + struct.pack("<Q", count))


def _sparse(path: Path, data: bytes, extra: int) -> Path:
    """``data`` followed by ``extra`` zero bytes that take no disk space."""
    path.write_bytes(data)
    with path.open("r+b") as handle:
        handle.truncate(len(data) + extra)
    return path


def _peak_bytes(path: Path) -> tuple[int, BaseException | None]:
    tracemalloc.start()
    error: BaseException | None = None
    try:
        read_header(path)
    except EstimationError as exc:
        error = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak, error


def test_a_300_mb_name_is_skipped_unread(tmp_path: Path) -> None:
    length = 300 * MiB
    data = raw_gguf([ARCH, ("general.name", STRING, struct.pack("<Q", length))], [])
    path = _sparse(tmp_path / "name.gguf", data, length)
    peak, error = _peak_bytes(path)
    assert error is None and peak < 8 * MiB
    assert read_header(path).metadata["general.name"] == SkippedString(length)


def test_chat_templates_of_100_kb_are_kept_and_longer_strings_skipped(tmp_path: Path) -> None:
    template = "{% for m in messages %}{{ m.content }}{% endfor %}" * 2000  # about 100 KB
    too_long = "x" * (reader.MAX_STRING_BYTES + 1)
    kv = [
        ARCH,
        ("tokenizer.chat_template", STRING, gguf_string(template)),
        ("general.description", STRING, gguf_string(too_long)),
        ("general.tags", ARRAY, u32(STRING) + struct.pack("<Q", 2) + gguf_string("a") + gguf_string(too_long)),
        _u32("general.after", 7),
    ]
    path = tmp_path / "template.gguf"
    path.write_bytes(raw_gguf(kv, []))
    metadata = read_header(path).metadata
    assert metadata["tokenizer.chat_template"] == template
    assert metadata["general.description"] == SkippedString(len(too_long))
    assert metadata["general.tags"] == ArrayInfo(STRING, 2)
    assert metadata["general.after"] == 7  # the reader kept its place past the skipped values


def test_31_million_empty_strings_are_refused_without_walking_them(tmp_path: Path) -> None:
    count = 31_000_000
    data = raw_gguf([ARCH, _string_array_head("tokenizer.ggml.tokens", count)], [])
    path = _sparse(tmp_path / "tokens.gguf", data, count * 8)
    with pytest.raises(EstimationError) as error:  # refused up front: walking them takes 6-26 s
        read_header(path)
    assert "tokenizer.ggml.tokens" in error.value.problem and f"{reader.MAX_STRINGS}" in error.value.problem


def test_string_arrays_share_one_budget_per_file(tmp_path: Path) -> None:
    half = reader.MAX_STRINGS // 2 + 1
    kv = [ARCH, _string_array_head("tokenizer.ggml.tokens", half)]
    first = raw_gguf(kv, [], kv_count=3) + b"\0" * (8 * half)
    second = gguf_string("tokenizer.ggml.merges") + u32(ARRAY) + u32(STRING) + struct.pack("<Q", half)
    path = _sparse(tmp_path / "two.gguf", first + second, 8 * half)
    with pytest.raises(EstimationError, match=r"tokenizer\.ggml\.merges"):
        read_header(path)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("llama.attention.head_count", 2**32 - 1),
        ("llama.attention.key_length", 2**63),
        ("llama.vocab_size", 2**64 - 1),
        ("llama.block_count", 40_000),
        ("llama.context_length", 2**40),
    ],
)
def test_impossible_metadata_is_refused_naming_the_key(tmp_path: Path, key: str, value: int) -> None:
    packed = (GGUFValueType.UINT64, struct.pack("<Q", value)) if value >= 2**32 else (UINT32, u32(value))
    path = tmp_path / "impossible.gguf"
    path.write_bytes(raw_gguf([ARCH, (key, *packed)], []))
    with pytest.raises(EstimationError) as error:
        read_header(path)
    assert error.value.where == key and "impossible" in error.value.problem


def test_impossible_per_layer_values_are_refused_naming_the_key(tmp_path: Path) -> None:
    heads = ("llama.attention.head_count", ARRAY, u32(UINT32) + struct.pack("<Q", 2) + u32(8) + u32(2**31))
    path = tmp_path / "heads.gguf"
    path.write_bytes(raw_gguf([ARCH, heads], []))
    with pytest.raises(EstimationError, match="impossible") as error:
        read_header(path)
    assert error.value.where == "llama.attention.head_count"


def test_tensor_past_the_end_of_present_data_is_refused(tmp_path: Path) -> None:
    data = raw_gguf([ARCH], [("a", (32,), F32, 0), ("b", (64,), F32, 128)])
    padded = data + b"\0" * (-len(data) % 32)
    path = tmp_path / "short.gguf"
    path.write_bytes(padded + b"\0" * 200)  # data region exists: a takes 128 bytes, b ends at 384
    with pytest.raises(EstimationError, match=r"tensor b: data .* lies past the end"):
        read_header(path, allow_missing_data=True)
    path.write_bytes(padded)  # header only: no data region to check
    assert len(read_header(path, allow_missing_data=True).tensors) == 2


def test_overlapping_tensors_are_refused(tmp_path: Path) -> None:
    data = raw_gguf([ARCH], [("a", (64,), F32, 0), ("b", (32,), F32, 128), ("c", (32,), F32, 224)])
    path = tmp_path / "overlap.gguf"
    path.write_bytes(data + b"\0" * 4096)
    with pytest.raises(EstimationError, match="tensor b: data at offset 128 overlaps tensor a"):
        read_header(path)


def test_a_skipped_array_never_passes_for_per_layer_values(tmp_path: Path) -> None:
    heads = ("llama.attention.head_count", ARRAY, u32(UINT32) + struct.pack("<Q", 5000) + u32(4) * 5000)
    kv = [
        ARCH,
        _u32("llama.block_count", 2),
        _u32("llama.embedding_length", 64),
        heads,
    ]
    tensors = [(f"blk.{i}.attn_q.weight", (64, 64), F32, i * 64 * 64 * 4) for i in range(2)]
    path = tmp_path / "heads.gguf"
    path.write_bytes(raw_gguf(kv, tensors))
    assert read_header(path).metadata["llama.attention.head_count"] == ArrayInfo(UINT32, 5000)
    with pytest.raises(EstimationError) as error:
        read_gguf(str(path))
    assert error.value.where == "llama.attention.head_count" and "5000 entries for 2 blocks" in error.value.problem


def test_entry_and_tensor_counts_are_capped(tmp_path: Path) -> None:
    path = tmp_path / "counts.gguf"
    count = reader.MAX_METADATA_ENTRIES + 1
    _sparse(path, raw_gguf([], [], kv_count=count), count * 16)
    with pytest.raises(EstimationError, match="exceeds the limit"):
        read_header(path)


NOT_UTF8 = struct.pack("<Q", 2) + b"\xff\xfe"


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (struct.pack("<IQQ", 3, 0, 1) + NOT_UTF8 + struct.pack("<II", 4, 7), "key of metadata entry 0"),
        (struct.pack("<IQQ", 3, 1, 0) + NOT_UTF8 + struct.pack("<IQIQ", 1, 4, 0, 0) + bytes(64), "name of tensor 0"),
    ],
)
def test_a_key_or_tensor_name_not_utf8_is_refused_at_its_length(tmp_path: Path, body: bytes, what: str) -> None:
    path = tmp_path / "not-utf8.gguf"
    path.write_bytes(b"GGUF" + body)
    with pytest.raises(EstimationError) as error:
        read_header(path)
    assert error.value.where == "byte 24" and error.value.problem == f"{what} is not UTF-8"
