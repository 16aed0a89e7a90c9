"""layerfit.io.files: the one rule for input files (regular files only, opened without waiting)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from layerfit.io.files import not_regular, open_regular


def test_each_kind_of_file_is_named() -> None:
    assert not_regular(stat.S_IFREG | 0o644) is None
    assert not_regular(stat.S_IFDIR) == "a folder, not a regular file"
    assert not_regular(stat.S_IFIFO) == "a pipe, not a regular file"
    assert not_regular(stat.S_IFSOCK) == "a socket, not a regular file"
    assert not_regular(stat.S_IFCHR) == "a character device, not a regular file"
    assert not_regular(stat.S_IFBLK) == "a block device, not a regular file"


def test_a_regular_file_is_read_and_a_socket_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_bytes(b"x: 1\n")
    with open_regular(path) as handle:
        assert handle.read() == b"x: 1\n"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(tmp_path / "s"))
        with pytest.raises(OSError, match="a socket, not a regular file"):
            open_regular(tmp_path / "s")
    finally:
        server.close()


def test_a_pipe_swapped_in_after_the_check_is_refused_without_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check on the path passes (a regular file's mode), the pipe is what open() meets: it opens
    at once (O_NONBLOCK) and the descriptor's own mode refuses it."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda path: real_stat(__file__))
    with pytest.raises(OSError, match="a pipe, not a regular file"):
        open_regular(pipe)
