"""A remote GGUF file as a ``ByteSource``: its header fetched as a growing prefix.

The header is the start of the file, so the bytes read are one prefix, fetched in windows that
double from ``FIRST_WINDOW`` up to steps of ``MAX_STEP``: a header of H bytes takes about
log2(H / 256 KiB) requests and at most ``MAX_STEP`` bytes past its end, never the tensor data
behind it. A prefix may grow to ``MAX_HEADER_BYTES``; a header claiming more is refused. Every
reply must carry the first one's size and ETag (else the file changed while it was read).
"""

from __future__ import annotations

from typing import Self

from layerfit.errors import EstimationError
from layerfit.remote import cache
from layerfit.remote.fetch import Fetcher, Reply
from layerfit.remote.locations import RemoteFile, parse_location

FIRST_WINDOW = 256 << 10
MAX_STEP = 4 << 20
MAX_HEADER_BYTES = 64 << 20
"""The most of a remote file read as its header (real headers, vocabularies included, hold a few MiB)."""


class RemoteSource:
    """Random reads from the header of a remote file (``layerfit.io.sources.ByteSource``)."""

    def __init__(self, remote: RemoteFile, fetcher: Fetcher | None = None) -> None:
        self.remote = remote
        self.name = remote.location
        self.fetcher = Fetcher(remote) if fetcher is None else fetcher
        self.from_cache = False
        self._window = FIRST_WINDOW
        cached = cache.load(remote.url, remote.revision)
        if cached is not None and remote.immutable:
            self._use(cached)
            return
        reply = self.fetcher.get(0, FIRST_WINDOW, if_none_match=None if cached is None else cached.etag)
        if cached is not None and (reply.data is None or (reply.etag == cached.etag and reply.size == cached.size)):
            self._use(cached)
            return
        if reply.data is None:
            raise self.fetcher.error("HTTP 304 (not modified) to a request that had nothing to compare")
        self.size = self._checked_size(reply)
        self.etag = reply.etag
        self._prefix = bytearray(reply.data)

    def _use(self, entry: cache.Entry) -> None:
        self.size, self.etag, self._prefix = entry.size, entry.etag, bytearray(entry.data)
        self.from_cache = True

    def _checked_size(self, reply: Reply) -> int:
        if reply.size is None:
            raise self.fetcher.error("the reply does not say the file's size")
        return reply.size

    @property
    def fetched(self) -> int:
        """Bytes of the file held (fetched now or read from the cache)."""
        return len(self._prefix)

    def read(self, offset: int, need: int, want: int) -> bytes:
        end = min(offset + need, self.size)
        if end > len(self._prefix):
            self._grow(end)
        return bytes(self._prefix[offset : min(offset + max(need, want), len(self._prefix))])

    def _grow(self, end: int) -> None:
        if end > MAX_HEADER_BYTES:
            raise EstimationError(
                self.name,
                f"byte {end}",
                f"the header runs past {MAX_HEADER_BYTES >> 20} MiB, the most layerfit reads of a remote file",
            )
        while len(self._prefix) < end:
            start = len(self._prefix)
            stop = min(self.size, MAX_HEADER_BYTES, max(end, start + self._window))
            reply = self.fetcher.get(start, stop)
            if reply.size != self.size or reply.etag != self.etag:
                raise self.fetcher.error(
                    f"the file changed while its header was read (size {self.size} and ETag {self.etag!r},"
                    f" then {reply.size} and {reply.etag!r})"
                )
            assert reply.data is not None
            self._prefix += reply.data
            self._window = min(self._window * 2, MAX_STEP)

    def done(self, header_end: int) -> None:
        """Cache the header ``[0, header_end)`` just read without error (not one read from the cache)."""
        if not self.from_cache and header_end <= len(self._prefix):
            entry = cache.Entry(etag=self.etag, size=self.size, data=bytes(self._prefix[:header_end]))
            if self.etag is not None or self.remote.immutable:
                cache.store(self.remote.url, self.remote.revision, entry)

    def close(self) -> None:
        self._prefix = bytearray()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_remote(location: str) -> RemoteSource:
    """The header of the remote file at ``location`` (``InputError`` for a refused form,
    ``EstimationError`` for a failed read)."""
    return RemoteSource(parse_location(location))
