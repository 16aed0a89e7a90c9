"""layerfit.io.files: the one rule for input files (regular files only, opened without waiting),
and a plan reading each GGUF file once (``reading_once``); outside a plan every read reads the file."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fixtures_gguf import write_tiny

import layerfit.estimators.shape as shape_module
from layerfit.cli import EXIT_PLACED, main
from layerfit.domain import Cluster, Deployment, PlannerConfig
from layerfit.estimators.gguf_reader import GgufHeader
from layerfit.estimators.shape import read_gguf
from layerfit.io.documents import load_file
from layerfit.io.files import not_regular, open_regular, reading_once
from layerfit.planning.planner import plan


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


# ---------------------------------------------------------------------------------------------
# Each file read once within a plan
# ---------------------------------------------------------------------------------------------

EXAMPLES = Path(__file__).parent.parent / "layerfit" / "examples"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The paths read_gguf has read, in order."""
    done: list[str] = []
    real = shape_module.read_header

    def counted(path: str, allow_missing_data: bool = True) -> GgufHeader:
        done.append(path)
        return real(path, allow_missing_data)

    monkeypatch.setattr(shape_module, "read_header", counted)
    yield done


def test_a_context_search_reads_its_model_once(tmp_path: Path, reads: list[str]) -> None:
    path = str(write_tiny(tmp_path, "tiny", data="header", context_length=32768))
    cluster = load_file(Cluster, str(EXAMPLES / "cluster.yaml"))
    ranged = Deployment(name="m", gguf_path=path, ctx_min=512, ctx_max=32768)
    result = plan(cluster, ranged, PlannerConfig(time_limit_s=5))
    assert result.best is not None and result.stats[-1].engine == "context"
    assert reads == [path]  # the old code read it for the training context and again for each context tried


def test_a_fleet_plan_and_its_picture_read_each_model_once(
    tmp_path: Path, reads: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(write_tiny(tmp_path, "tiny", data="header", context_length=32768))
    fleet = yaml.safe_load((EXAMPLES / "fleet.yaml").read_text(encoding="utf-8"))
    fleet["deployments"] += [
        {"name": "ranged", "gguf_path": path, "ctx_min": 1024, "ctx_max": 8192},
        {"name": "fixed", "gguf_path": path, "backend_parameters": ["-c 2048"], "replicas": 2},
    ]
    file = tmp_path / "fleet.yaml"
    file.write_text(yaml.safe_dump(fleet), encoding="utf-8")
    code = main(["replan", str(file), "--time-limit", "5", "--executor", "serial", "--plot", str(tmp_path / "p.svg")])
    assert code == EXIT_PLACED
    assert "ranged#0" in capsys.readouterr().out
    assert reads == [path]


def test_outside_a_plan_every_read_reads_the_file(tmp_path: Path, reads: list[str]) -> None:
    path = str(write_tiny(tmp_path, "tiny", data="header", context_length=4096))
    assert read_gguf(path).context_length == 4096
    write_tiny(tmp_path, "tiny", data="header", context_length=8192)
    assert read_gguf(path).context_length == 8192
    with reading_once():
        assert read_gguf(path) is read_gguf(path)
        write_tiny(tmp_path, "tiny", data="header", context_length=16384, vocab_size=1001)  # another size
        assert read_gguf(path).context_length == 16384
    assert len(reads) == 4
