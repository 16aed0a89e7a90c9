"""The one rule for every input file layerfit reads (YAML and JSON documents, GGUF models): a
regular file, opened without waiting.

A pipe opened for reading waits for a writer, and a pipe or a character device (``/dev/zero``,
``/dev/urandom``) can be read without end; a folder or a block device is no document either.
The file is checked before it is opened and again, on the open descriptor, after it: a pipe put
in its place in between opens at once (``O_NONBLOCK``) and is refused, instead of blocking.

Within ``reading_once`` a file is read once while it is unchanged (``read_once``).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, BinaryIO, TypeVar

T = TypeVar("T")
_READ: ContextVar[dict[tuple[Any, ...], Any] | None] = ContextVar("read", default=None)

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def not_regular(mode: int) -> str | None:
    """What a file of this ``st_mode`` is when it is not a regular file (``None`` when it is)."""
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "a special file")
    return f"{kind}, not a regular file"


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for binary reading; ``OSError`` (its ``strerror`` saying what the file is)
    when it is not a regular file or cannot be opened."""
    problem = not_regular(os.stat(path).st_mode)
    if problem is not None:
        raise OSError(errno.EINVAL, problem)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        problem = not_regular(os.fstat(descriptor).st_mode)
        if problem is not None:
            raise OSError(errno.EINVAL, problem)
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def is_remote(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` is a URL (``scheme://...``) rather than a path."""
    return isinstance(location, str) and _URL.match(location) is not None


@contextmanager
def reading_once() -> Iterator[None]:
    """Within it, ``read_once`` reads a file once while it is unchanged: a context search,
    ``explain``'s relaxed plans and a fleet plan estimate one model many times, and a GGUF header of
    131,072 tensors takes ~1.7 s to read. Nested uses share the outermost one; outside it, every
    call reads the file."""
    token = _READ.set({}) if _READ.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _READ.reset(token)


def read_once(path: str | os.PathLike[str], how: tuple[Any, ...], read: Callable[[], T]) -> T:
    """``read()`` (what ``path`` holds, read in the way ``how`` names); within ``reading_once``, what
    it gave before for the same file while it has the same device, inode, size and modification
    and change times (a URL: for the same URL, taken as unchanged within it)."""
    done = _READ.get()
    if done is not None and is_remote(path):
        remote_key = (path, how, "remote")
        if remote_key not in done:
            done[remote_key] = read()
        remote_result: T = done[remote_key]
        return remote_result
    try:
        info = os.stat(path)
    except OSError:  # the reader says what is wrong, naming the file
        done = None
    if done is None:
        return read()
    key = (os.fspath(path), how, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    if key not in done:
        done[key] = read()
    result: T = done[key]
    return result
