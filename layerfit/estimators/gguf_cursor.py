"""Bounds-checked sequential reads from a GGUF file through a sliding window buffer, and the walk
that skips a string array (a vocabulary) without decoding it. The bytes come from a ``ByteSource``
(``layerfit.io.sources``): a local file or a remote one, read the same way."""

from __future__ import annotations

import struct
from itertools import repeat

from layerfit.errors import EstimationError
from layerfit.estimators.gguf_constants import GGUFValueType
from layerfit.estimators.gguf_types import SkippedString
from layerfit.io.sources import ByteSource

MAX_STRING_BYTES = 1 << 20
"""Longer metadata strings are skipped unread (``SkippedString``); chat templates are ~100 KB."""
MAX_STRINGS = 1 << 21
"""Strings in skipped string arrays, all arrays of a file together (vocabularies and merges of real
models have a few hundred thousand); more are refused rather than walked."""
CHUNK = 1 << 20
"""The smallest read that refills the window."""
STRING_GUESS_BYTES = 32
"""Bytes per string assumed when sizing the read window for a skipped string array."""
MAX_WINDOW = 16 << 20

SCALAR_FORMATS: dict[GGUFValueType, struct.Struct] = {
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

U32 = SCALAR_FORMATS[GGUFValueType.UINT32]
U64 = SCALAR_FORMATS[GGUFValueType.UINT64]


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class Cursor:
    """Sequential, bounds-checked reads from a file through a sliding window buffer."""

    def __init__(self, source: ByteSource) -> None:
        self.path = source.name
        self.size = source.size
        self.pos = 0
        self.strings_left = MAX_STRINGS
        """What the string-array walks of this file may still cover."""
        self._source = source
        self._buf = b""
        self._start = 0

    def error(self, problem: str, at: int | None = None) -> EstimationError:
        return EstimationError(self.path, f"byte {self.pos if at is None else at}", problem)

    def remaining(self) -> int:
        return self.size - self.pos

    def _window(self, n: int, what: str, want: int = CHUNK) -> int:
        """Make ``[pos, pos + n)`` available in the buffer (reading up to ``want`` bytes when it
        must read); return its index there."""
        end = self.pos + n
        if end > self.size:
            raise self.error(f"{what}: needs {n} bytes but the file ends at byte {self.size}")
        if self.pos < self._start or end > self._start + len(self._buf):
            # One read from ``pos``, the old window's tail read again: joining it to the new bytes
            # instead copied the whole window twice (a vocabulary's megabytes, ~10 ms).
            self._buf = self._source.read(self.pos, n, max(want, n))
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
        return int(self.unpack(U32, what))

    def u64(self, what: str) -> int:
        return int(self.unpack(U64, what))

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

    def utf8_string(self, what: str, max_bytes: int) -> str:
        """``string`` decoded as UTF-8, refused (at its length prefix) when it is not."""
        start = self.pos
        raw = self.string(what, max_bytes)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"{what} is not UTF-8", start) from None

    def string_or_skip(self, what: str) -> str | SkippedString:
        """A length-prefixed string, decoded when at most ``MAX_STRING_BYTES`` long, else skipped."""
        start = self.pos
        length = self.u64(f"{what} length")
        if length > self.remaining():
            raise self.error(f"{what}: length {length} runs past the end of the file ({self.size} bytes)", start)
        if length > MAX_STRING_BYTES:
            self.pos += length
            return SkippedString(length)
        return decode(self.raw(length, what))

    def skip(self, n: int, what: str) -> None:
        if n > self.remaining():
            raise self.error(f"{what}: {n} bytes run past the end of the file ({self.size} bytes)")
        self.pos += n

    def skip_strings(self, count: int, what: str) -> None:
        """Skip ``count`` length-prefixed strings without decoding them, a read window at a time
        (each read asks for at least the next length prefix: a remote source need not fetch past
        the header for the guess of how long the strings are)."""
        left = count
        while left:
            want = min(self.remaining(), max(CHUNK, STRING_GUESS_BYTES * left), MAX_WINDOW)
            index = self._window(U64.size, f"{what} item length", want)
            end, walked = walk_strings(self._buf, index, left, len(self._buf))
            if walked:
                self.pos = self._start + end
                left -= walked
            else:  # the next string does not fit in the window: skip it by its length
                self.skip(self.u64(f"{what} item length"), f"{what} item")
                left -= 1


def walk_strings(buf: bytes, pos: int, count: int, limit: int) -> tuple[int, int]:
    """Walk up to ``count`` length-prefixed strings from ``pos`` that end by ``limit``: the offset
    reached and how many were walked."""
    end = min(limit, len(buf))
    view = buf if end == len(buf) else memoryview(buf)[:end]
    reached = walk_all(view, pos, count)
    if reached is not None and reached <= end:
        return reached, count
    return walk_checked(view, pos, count, end)


def walk_all(view: bytes | memoryview, pos: int, count: int) -> int | None:
    """The offset after ``count`` strings from ``pos``, or ``None`` when a length prefix lies past
    ``view``. The hot loop of a header read (a vocabulary has ~10^5 strings), so it checks nothing
    per string: the last string may end past ``view``, which the caller checks once."""
    unpack = U64.unpack_from
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


def walk_checked(view: bytes | memoryview, pos: int, count: int, end: int) -> tuple[int, int]:
    """``walk_strings`` one bounds check per string: where the window ends inside the array."""
    unpack = U64.unpack_from
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
