"""Fuzz target: mutated headers of the real gemma-3-270m file never escape as anything but an
EstimationError, and each is read within a time and memory cap.

The base is the file's real header (metadata, tokenizer, all 236 tensor-table entries) with its
three 262,144-entry tokenizer arrays cut to their first ``KEPT_TOKENS`` entries, so that one case
costs milliseconds; a second, smaller target mutates the header in full. Half of the cases carry
the file's data region as a sparse tail of the real size, so the tensor-extent checks run too.
Under the ci profile the first target runs 2,000 cases (``settings.default.max_examples * 5``).
Caps per case: ``CASE_SECONDS`` of wall time and ``CASE_MEMORY_BYTES`` more address space
(``RLIMIT_AS``; an allocation past it raises MemoryError, which fails the case like any exception
other than EstimationError).
"""

from __future__ import annotations

import functools
import os
import resource
import struct
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from fixtures_gguf import gemma_270m_path
from gguf import GGUFValueType
from hypothesis import given, settings
from hypothesis import strategies as st

from layerfit.errors import EstimationError
from layerfit.estimators import estimate_profile, read_header, shape_from_header

KEPT_TOKENS = 512
TOKEN_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")
CASE_SECONDS = 2.0
CASE_MEMORY_BYTES = 512 << 20
"""Address space one case may add; beyond it an allocation fails with MemoryError (a failure)."""
EXTREMES = [0, 1, 3, 64, 2**31, 2**32 - 1, 2**40, 2**63 - 1, 2**63, 2**64 - 1]
_TMP = "/dev/shm" if os.path.isdir("/dev/shm") else None


@functools.cache
def real_header() -> tuple[bytes, int]:
    """The gemma file's bytes before its tensor data, and the file's full size."""
    path = gemma_270m_path()
    header = read_header(path)
    with open(path, "rb") as handle:
        return handle.read(header.header_bytes), header.file_bytes


def _array_span(data: bytes, key: str) -> tuple[int, int, int]:
    """Where ``key``'s array count sits, where its items start, and the item size (0: strings)."""
    name = struct.pack("<Q", len(key)) + key.encode()
    at = data.index(name) + len(name) + 4  # skip the value type (ARRAY)
    item_type = GGUFValueType(struct.unpack_from("<I", data, at)[0])
    sizes = {GGUFValueType.STRING: 0, GGUFValueType.FLOAT32: 4, GGUFValueType.INT32: 4}
    return at + 4, at + 12, sizes[item_type]


def _items_end(data: bytes, start: int, count: int, size: int) -> int:
    if size:
        return start + count * size
    pos = start
    for _ in range(count):
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]
    return pos


@functools.cache
def small_header() -> bytes:
    """The real header with each tokenizer array cut to ``KEPT_TOKENS`` entries."""
    data, _ = real_header()
    out = bytearray(data)
    for key in TOKEN_ARRAYS:
        count_at, start, size = _array_span(bytes(out), key)
        total = struct.unpack_from("<Q", out, count_at)[0]
        keep_end = _items_end(bytes(out), start, KEPT_TOKENS, size)
        full_end = _items_end(bytes(out), start, total, size)
        struct.pack_into("<Q", out, count_at, KEPT_TOKENS)
        del out[keep_end:full_end]
    return bytes(out)


def mutations(size: int) -> st.SearchStrategy[list[tuple[str, int, int]]]:
    byte_flip = st.tuples(st.just("byte"), st.integers(0, size - 1), st.integers(0, 255))
    word = st.tuples(st.just("u64"), st.integers(0, size - 8), st.sampled_from(EXTREMES))
    dword = st.tuples(st.just("u32"), st.integers(0, size - 4), st.sampled_from([v % 2**32 for v in EXTREMES]))
    return st.lists(st.one_of(byte_flip, word, dword), min_size=1, max_size=6)


def mutated(base: bytes, changes: list[tuple[str, int, int]], cut: int | None) -> bytes:
    data = bytearray(base)
    for kind, position, value in changes:
        if kind == "byte":
            data[position] = value
        else:
            struct.pack_into("<Q" if kind == "u64" else "<I", data, position, value)
    return bytes(data[:cut] if cut is not None else data)


@contextmanager
def memory_cap(extra: int) -> Iterator[None]:
    """Limit the process's address space to what it uses now plus ``extra`` bytes (Linux)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        in_use = int(statm.read().split()[0]) * resource.getpagesize()
    cap = in_use + extra if hard == resource.RLIM_INFINITY else min(hard, in_use + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def read_within_caps(data: bytes, sparse_size: int | None) -> None:
    """Read and estimate one mutated file; only EstimationError may escape, within the caps."""
    with tempfile.NamedTemporaryFile(suffix=".gguf", dir=_TMP, delete=False) as handle:
        handle.write(data)
        if sparse_size is not None and sparse_size > len(data):
            handle.truncate(sparse_size)
    started = time.perf_counter()
    try:
        with memory_cap(CASE_MEMORY_BYTES):
            header = read_header(handle.name)
            profile = estimate_profile(shape_from_header(header))
    except EstimationError as error:
        assert error.path == handle.name and error.where and error.problem
    else:
        assert profile.n_blocks == len(profile.block_weight_bytes)
    finally:
        elapsed = time.perf_counter() - started
        os.unlink(handle.name)
    assert elapsed < CASE_SECONDS, f"one case took {elapsed:.2f} s"


def test_the_cut_header_is_the_real_one_less_tokens() -> None:
    header_path = gemma_270m_path()
    real = read_header(header_path)
    with tempfile.NamedTemporaryFile(suffix=".gguf", dir=_TMP) as handle:
        handle.write(small_header())
        handle.flush()
        small = read_header(handle.name)
    assert small.tensors and len(small.tensors) == len(real.tensors)
    assert [t[:3] for t in small.tensors] == [t[:3] for t in real.tensors]
    kept = {key: value for key, value in small.metadata.items() if key not in TOKEN_ARRAYS}
    assert kept == {key: value for key, value in real.metadata.items() if key not in TOKEN_ARRAYS}


_SMALL_SIZE = len(small_header())


@settings(max_examples=5 * settings.default.max_examples)  # 2,000 under the ci profile
@given(
    changes=mutations(_SMALL_SIZE),
    cut=st.one_of(st.none(), st.integers(0, _SMALL_SIZE)),
    with_data=st.booleans(),
)
def test_mutated_gemma_headers_raise_only_estimation_errors(
    changes: list[tuple[str, int, int]], cut: int | None, with_data: bool
) -> None:
    read_within_caps(mutated(small_header(), changes, cut), real_header()[1] if with_data else None)


_FULL_SIZE = len(real_header()[0])


@settings(max_examples=max(5, settings.default.max_examples // 4))  # 100 under the ci profile
@given(changes=mutations(_FULL_SIZE), with_data=st.booleans())
def test_mutated_full_gemma_headers_raise_only_estimation_errors(
    changes: list[tuple[str, int, int]], with_data: bool
) -> None:
    read_within_caps(mutated(real_header()[0], changes, None), real_header()[1] if with_data else None)
