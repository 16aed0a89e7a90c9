"""The one rule for every input file layerfit reads (YAML and JSON documents, GGUF models): a
regular file, opened without waiting.

A pipe opened for reading waits for a writer, and a pipe or a character device (``/dev/zero``,
``/dev/urandom``) can be read without end; a folder or a block device is no document either.
The file is checked before it is opened and again, on the open descriptor, after it: a pipe put
in its place in between opens at once (``O_NONBLOCK``) and is refused, instead of blocking.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

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
