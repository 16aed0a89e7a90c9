"""Where a model file's bytes come from: a local file, or a remote one read by range requests.

A *location* is a path or a URL (``https://...``, ``hf://ORG/REPO[@REVISION]/FILE.gguf``,
``ms://ORG/REPO[@REVISION]/FILE.gguf``). ``open_source`` gives a ``ByteSource`` for either; the
GGUF reader reads through it and never knows which it has. URLs are opened by
``layerfit.remote`` (imported only when a URL is given).
"""

from __future__ import annotations

import os
from typing import BinaryIO, Protocol, Self

from layerfit.io.files import is_remote, open_regular

__all__ = ["ByteSource", "FileSource", "exists", "file_name", "is_remote", "open_source", "same_file", "sibling"]


class ByteSource(Protocol):
    """Random reads from one file whose size is known."""

    name: str
    """What errors call the file: its path or its URL as given."""
    size: int

    def read(self, offset: int, need: int, want: int) -> bytes:
        """Bytes from ``offset``: at least ``need`` (fewer only at the end of the file), at most ``want``."""
        ...

    def done(self, header_end: int) -> None:
        """The header, ``[0, header_end)``, was read without error (a remote source caches it)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


class FileSource:
    """A local regular file (``io.files.open_regular``)."""

    def __init__(self, path: str) -> None:
        self.name = path
        self._handle: BinaryIO = open_regular(path)
        self.size = os.fstat(self._handle.fileno()).st_size

    def read(self, offset: int, need: int, want: int) -> bytes:
        self._handle.seek(offset)
        return self._handle.read(max(need, want))

    def done(self, header_end: int) -> None:
        """Nothing to keep: the file is still there."""

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_source(location: str) -> ByteSource:
    """The bytes at ``location``. A path: ``OSError`` when it cannot be opened (or is no regular
    file); a URL: ``InputError`` for a URL layerfit refuses, ``EstimationError`` for a failed read."""
    if is_remote(location):
        from layerfit.remote.source import open_remote

        return open_remote(location)
    return FileSource(location)


def _split_query(location: str) -> tuple[str, str]:
    """A URL's path part and its ``?query#fragment`` (empty for a path)."""
    if not is_remote(location):
        return location, ""
    cut = min((i for i in (location.find("?"), location.find("#")) if i >= 0), default=len(location))
    return location[:cut], location[cut:]


def file_name(location: str) -> str:
    """The last part of a path or a URL's path."""
    path, _ = _split_query(location)
    return path.rsplit("/", 1)[-1] if is_remote(location) else os.path.basename(path)


def sibling(location: str, name: str) -> str:
    """The file called ``name`` beside ``location`` (a shard of the same split model)."""
    if not is_remote(location):
        return os.path.join(os.path.dirname(location), name)
    path, query = _split_query(location)
    return f"{path.rsplit('/', 1)[0]}/{name}{query}"


def same_file(first: str, second: str) -> bool:
    """Whether two locations name one file (a path compared by ``os.path.samefile``)."""
    if is_remote(first) or is_remote(second):
        return first == second
    return os.path.samefile(first, second)


def exists(location: str) -> bool:
    """A path exists; a URL is taken to, and its read says otherwise."""
    return is_remote(location) or os.path.exists(location)
