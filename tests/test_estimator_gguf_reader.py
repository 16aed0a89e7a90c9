"""The GGUF header reader: agrees with gguf.GGUFReader, skips large arrays, reads v2/v3, split and
header-only files, and turns every kind of bad input into an EstimationError naming the place."""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import pytest
from fixtures_gguf import gguf_string, raw_gguf, tiny_spec, u32, write_tiny
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType
from hypothesis import given, settings
from hypothesis import strategies as st

from layerfit.errors import EstimationError
from layerfit.estimators import ArrayInfo, estimate_profile, gguf_cursor, read_gguf, read_header
from layerfit.testing.synthetic import set_version, write_gguf

STRING, UINT32, ARRAY = GGUFValueType.STRING, GGUFValueType.UINT32, GGUFValueType.ARRAY
F32, Q4_0 = int(GGMLQuantizationType.F32), int(GGMLQuantizationType.Q4_0)


def _kv(key: str, vtype: int, value: bytes) -> tuple[str, int, bytes]:
    return (key, vtype, value)


ARCH = _kv("general.architecture", STRING, gguf_string("llama"))
TENSOR = ("blk.0.attn_q.weight", (64, 64), Q4_0, 0)


def test_reads_what_gguf_reader_reads(tmp_path: Path) -> None:
    path = write_tiny(tmp_path, data="sparse", tokenizer=True)
    ours = read_header(path, allow_missing_data=False)
    theirs = GGUFReader(path)
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for mine, other in zip(ours.tensors, theirs.tensors, strict=True):
        assert mine.shape == tuple(int(d) for d in other.shape)
        assert mine.ggml_type == other.tensor_type
        assert mine.n_bytes == other.n_bytes
        assert mine.data_offset == other.data_offset
    for key, field in theirs.fields.items():
        if key.startswith("GGUF."):
            continue
        value = ours.metadata[key]
        if field.types[0] is ARRAY and field.types[1] is STRING:
            # 1000 token strings: more than the reader decodes, skipped by their lengths
            assert value == ArrayInfo(STRING, len(field.data))
        elif field.types[0] is ARRAY:
            # 1000 scores and types: few enough to decode
            assert value == pytest.approx(tuple(field.contents()))
        elif field.types[0] is GGUFValueType.FLOAT32:
            assert value == pytest.approx(field.contents())
        else:
            assert value == field.contents()
    assert ours.header_bytes == theirs.data_offset
    assert ours.file_bytes == os.path.getsize(path)


@pytest.mark.parametrize("window", [8, 64, 257, 1 << 20])
def test_string_arrays_are_skipped_across_read_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    # A tokenizer of 1000 strings skipped through windows smaller than one string, and larger.
    path = write_tiny(tmp_path, data="header", tokenizer=True)
    expected = read_header(path)
    monkeypatch.setattr(gguf_cursor, "CHUNK", window)
    monkeypatch.setattr(gguf_cursor, "MAX_WINDOW", window)
    monkeypatch.setattr(gguf_cursor, "STRING_GUESS_BYTES", 4)
    assert read_header(path) == expected


def test_small_arrays_are_decoded(tmp_path: Path) -> None:
    per_layer = u32(UINT32) + struct.pack("<Q", 4) + b"".join(u32(v) for v in (2, 0, 2, 0))
    tags = u32(STRING) + struct.pack("<Q", 2) + gguf_string("a") + gguf_string("b")
    path = tmp_path / "arrays.gguf"
    path.write_bytes(
        raw_gguf([ARCH, _kv("llama.attention.head_count_kv", ARRAY, per_layer), _kv("general.tags", ARRAY, tags)], [])
    )
    metadata = read_header(path).metadata
    assert metadata["llama.attention.head_count_kv"] == (2, 0, 2, 0)
    assert metadata["general.tags"] == ("a", "b")


def test_version_2_reads_like_version_3(tmp_path: Path) -> None:
    path = write_tiny(tmp_path, data="header")
    v3 = read_header(path)
    set_version(path, 2)
    v2 = read_header(path)
    assert v2.version == 2
    assert (v2.metadata, v2.tensors) == (v3.metadata, v3.tensors)


def test_header_only_files_need_permission(tmp_path: Path) -> None:
    path = write_tiny(tmp_path, data="header")
    assert read_header(path, allow_missing_data=True).tensors
    with pytest.raises(EstimationError, match=r"token_embd.weight: data .* lies past the end of the file"):
        read_header(path, allow_missing_data=False)


def test_split_models_read_every_shard(tmp_path: Path) -> None:
    spec = tiny_spec(name="split")
    whole = tmp_path / "whole.gguf"
    write_gguf(whole, spec, data="sparse")
    shards = write_gguf(tmp_path / "split.gguf", spec, data="sparse", split_max_tensors=15)
    assert len(shards) == 3  # 39 tensors, 15 per shard
    assert shards[0].name == "split-00001-of-00003.gguf"
    expected = read_gguf(str(whole))
    for shard in shards:  # any shard names the whole model
        shape = read_gguf(str(shard), allow_missing_data=False)
        assert shape.block_bytes == expected.block_bytes
        assert shape.tensor_count == expected.tensor_count
        assert shape.files == tuple(str(path) for path in shards)
        assert shape.file_bytes == sum(path.stat().st_size for path in shards)
    shards[2].unlink()
    with pytest.raises(EstimationError, match="shard 3 of 3 is missing") as error:
        read_header(shards[0])
    assert error.value.path == str(shards[2])


# Each row: the bytes, what the error must name (``where``) and say (``problem``). Offsets: the
# fixed header is 24 bytes; ARCH takes 45 (8 + 20 key, 4 type, 8 + 5 value), so a tensor table
# after it starts at byte 69; a tensor named "t" with one dimension takes 33 bytes.
BAD_INPUTS = [
    ("empty file", b"", "byte 0", "magic: needs 4 bytes"),
    ("wrong magic", raw_gguf([ARCH], [], magic=b"GGML"), "byte 0", "not a GGUF file"),
    ("version 1", raw_gguf([ARCH], [], version=1), "byte 4", "unsupported GGUF version 1"),
    ("big-endian", raw_gguf([ARCH], [], version=3 << 24), "byte 4", "big-endian"),
    (
        "tensor count 2^40",
        raw_gguf([ARCH], [], tensor_count=1 << 40),
        "byte 8",
        "tensor count 1099511627776 cannot fit",
    ),
    ("kv count 2^62", raw_gguf([ARCH], [], kv_count=1 << 62), "byte 16", "metadata entry count"),
    ("truncated key", raw_gguf([ARCH], [])[:40], "byte 24", "key of metadata entry 0: length 20 runs past"),
    ("truncated tensor table", raw_gguf([ARCH], [TENSOR])[:79], "byte 69", "name of tensor 0: length 19 runs past"),
    # the first dimension of TENSOR at 69 + 27 (name) + 4 (count) = 100
    (
        "truncated dimension",
        raw_gguf([ARCH], [TENSOR])[:104],
        "byte 100",
        "dimension 0 of blk.0.attn_q.weight: needs 8 bytes",
    ),
    (
        "key length past EOF",
        raw_gguf([], [], kv_count=1) + gguf_string("k" * 20, length=99),
        "byte 24",
        "length 99 runs past the end of the file",
    ),
    (
        "string value past EOF",  # value length at 24 + 20 (key "general.name") + 4 (type)
        raw_gguf([_kv("general.name", STRING, gguf_string("x", length=1 << 50))], []),
        "byte 48",
        "length 1125899906842624 runs past the end of the file",
    ),
    ("unknown value type", raw_gguf([_kv("general.name", 77, b"")], []), "byte 44", "unknown value type 77"),
    (
        "array longer than the file",
        raw_gguf([_kv("general.tags", ARRAY, u32(UINT32) + struct.pack("<Q", 1 << 40))], []),
        "byte 48",
        "1099511627776 items of 4 bytes run past the end",
    ),
    (
        "nested array",
        raw_gguf([_kv("general.tags", ARRAY, u32(ARRAY) + struct.pack("<Q", 1))], []),
        "byte 48",
        "arrays of arrays",
    ),
    # dimension 0 at 69 + 9 (name) + 4 (count) = 82, dimension 1 at 90, type at 90 with one dimension
    ("negative dimension", raw_gguf([ARCH], [("t", (2**64 - 5,), F32, 0)]), "byte 82", "dimension 0 is negative (-5)"),
    (
        "dimensions overflow",
        raw_gguf([ARCH], [("t", (1 << 40, 1 << 40), F32, 0)]),
        "byte 90",
        "element count overflows",
    ),
    ("five dimensions", raw_gguf([ARCH], [("t", (1, 1, 1, 1, 1), F32, 0)]), "byte 78", "5 dimensions, expected 1 to 4"),
    ("unknown tensor type", raw_gguf([ARCH], [("t", (32,), 999, 0)]), "byte 90", "unknown tensor type 999"),
    (
        "partial block",
        raw_gguf([ARCH], [("t", (48,), Q4_0, 0)]),
        "byte 69",
        "48 is not a multiple of the Q4_0 block size 32",
    ),
    (
        "misaligned offset",
        raw_gguf([ARCH], [("t", (32,), F32, 7)]),
        "byte 69",
        "offset 7 is not a multiple of the alignment 32",
    ),
    (
        "long tensor name",
        raw_gguf([ARCH], [("t" * 64, (32,), F32, 0)]),
        "byte 69",
        "length 64 exceeds the limit of 63 bytes",
    ),
    (
        "duplicate tensor",
        raw_gguf([ARCH], [("t", (32,), F32, 0), ("t", (32,), F32, 128)]),
        "byte 102",
        "duplicate tensor",
    ),
    ("duplicate key", raw_gguf([ARCH, ARCH], []), "byte 69", "duplicate metadata key"),
    (
        "bad alignment",
        raw_gguf([ARCH, _kv("general.alignment", UINT32, u32(3))], []),
        "general.alignment",
        "power of two",
    ),
]


@pytest.mark.parametrize(
    ("data", "where", "problem"), [row[1:] for row in BAD_INPUTS], ids=[row[0] for row in BAD_INPUTS]
)
def test_bad_input_names_file_place_and_problem(tmp_path: Path, data: bytes, where: str, problem: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(EstimationError) as error:
        read_header(path, allow_missing_data=True)
    assert error.value.path == str(path)
    assert error.value.where == where
    assert problem in error.value.problem


def test_missing_file_is_an_estimation_error(tmp_path: Path) -> None:
    with pytest.raises(EstimationError, match="cannot open"):
        read_header(tmp_path / "absent.gguf")


def test_missing_required_key_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "no-blocks.gguf"
    path.write_bytes(raw_gguf([ARCH, _kv("llama.embedding_length", UINT32, u32(64))], []))
    with pytest.raises(EstimationError) as error:
        read_gguf(str(path))
    assert (error.value.where, error.value.problem) == ("llama.block_count", "required key missing")


def test_mistyped_key_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "typed.gguf"
    path.write_bytes(raw_gguf([ARCH, _kv("llama.block_count", STRING, gguf_string("32"))], []))
    with pytest.raises(EstimationError) as error:
        read_gguf(str(path))
    assert error.value.where == "llama.block_count"
    assert "expected an integer" in error.value.problem


# ---------------------------------------------------------------------------------------------
# Mutated headers never escape as anything but EstimationError
# ---------------------------------------------------------------------------------------------


def _valid_header() -> bytes:
    with tempfile.TemporaryDirectory() as directory:
        path = write_tiny(Path(directory), data="header", tokenizer=True, vocab_size=80)
        return path.read_bytes()


VALID = _valid_header()
EXTREMES = [0, 1, 3, 64, 2**31, 2**32 - 1, 2**40, 2**63 - 1, 2**63, 2**64 - 1]

byte_flip = st.tuples(st.just("byte"), st.integers(0, len(VALID) - 1), st.integers(0, 255))
word_write = st.tuples(st.just("u64"), st.integers(0, len(VALID) - 8), st.sampled_from(EXTREMES))
dword_write = st.tuples(st.just("u32"), st.integers(0, len(VALID) - 4), st.sampled_from([v % 2**32 for v in EXTREMES]))


@settings(max_examples=20 * settings.default.max_examples)  # 8,000 mutated headers under the ci profile
@given(
    mutations=st.lists(st.one_of(byte_flip, word_write, dword_write), min_size=1, max_size=6),
    cut=st.one_of(st.none(), st.integers(0, len(VALID))),
)
def test_mutated_headers_raise_only_estimation_errors(mutations: list[tuple[str, int, int]], cut: int | None) -> None:
    data = bytearray(VALID)
    for kind, position, value in mutations:
        if kind == "byte":
            data[position] = value
        else:
            fmt = "<Q" if kind == "u64" else "<I"
            struct.pack_into(fmt, data, position, value)
    if cut is not None:
        del data[cut:]
    with tempfile.NamedTemporaryFile(suffix=".gguf", delete=False) as handle:
        handle.write(data)
    try:
        shape = read_gguf(handle.name)
        profile = estimate_profile(shape)
    except EstimationError as error:
        assert error.path == handle.name
        assert error.where and error.problem
    else:
        assert profile.n_blocks == shape.block_count == len(shape.block_bytes)
    finally:
        os.unlink(handle.name)


def _walk_reference(buf: bytes, pos: int, count: int, limit: int) -> tuple[int, int]:
    """One string at a time: stop before the first string (or length prefix) that ends past ``limit``."""
    end = min(limit, len(buf))
    for walked in range(count):
        if pos + 8 > end:
            return pos, walked
        after = pos + 8 + int.from_bytes(buf[pos : pos + 8], "little")
        if after > end:
            return pos, walked
        pos = after
    return pos, count


@given(
    lengths=st.lists(st.integers(0, 40) | st.sampled_from([2**40, 2**64 - 1]), max_size=30),
    cut=st.integers(0, 1500),
    start=st.integers(0, 3),
    extra=st.integers(0, 5),
)
@settings(max_examples=300)
def test_string_walk_stops_where_a_string_runs_past_the_window(
    lengths: list[int], cut: int, start: int, extra: int
) -> None:
    """The unchecked fast walk and its checked fallback agree with a plain walk for every window end,
    also when a length prefix is absurd (past any buffer) or cut in half."""
    buf = b"\x01" * start + b"".join(n.to_bytes(8, "little") + b"x" * min(n, 40) for n in lengths)
    count = len(lengths) + extra
    assert gguf_cursor.walk_strings(buf, start, count, cut) == _walk_reference(buf, start, count, cut)
    whole = len(lengths), len(buf)
    assert gguf_cursor.walk_strings(buf, start, *whole) == _walk_reference(buf, start, *whole)
