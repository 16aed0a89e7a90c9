"""A misbehaving server, one fault at a time: each read fails with an error naming the location and
what went wrong, within a bounded time and bounded bytes, and leaves nothing in the cache."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from http_fixtures import Server, serving

from layerfit.cli import EXIT_BAD_INPUT, main
from layerfit.errors import EstimationError
from layerfit.estimators import read_gguf
from layerfit.remote import cache
from layerfit.remote.fetch import Fetcher
from layerfit.remote.locations import parse_location
from layerfit.remote.source import MAX_HEADER_BYTES
from layerfit.testing.synthetic import GROUND_TRUTH_MODELS, write_gguf

REPO = "org/models"
TOKEN = "hf_secret_token_123"
LOCATION = f"hf://{REPO}/m.gguf"


@pytest.fixture
def header(tmp_path: Path) -> Path:
    path = tmp_path / "m.gguf"
    write_gguf(path, GROUND_TRUTH_MODELS["llama1b-f16"])
    return path


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HF_ENDPOINT", "LAYERFIT_CACHE", "LAYERFIT_REMOTE_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)


FAULTS = [
    ("no-range", "ignored the range request (HTTP 200, the whole file)"),
    ("short-read", "of 262144 bytes"),
    ("reset", "of 262144 bytes"),
    ("wrong-range", "sent Content-Range 'bytes 1-262143/"),
    ("404", "HTTP 404 from http://127.0.0.1"),
    ("401", "HF_TOKEN was refused"),
    ("403", "HF_TOKEN was refused"),
    ("429", "HTTP 429 from http://127.0.0.1"),
    ("redirect-loop", "redirect loop"),
    ("slow", "no complete reply within the time limit of 1 s (LAYERFIT_REMOTE_TIMEOUT)"),
    ("huge-size", "more than any GGUF file"),
    ("huge-length", "announced Content-Length 4611686018427387904 for a range of 262144 bytes"),
    ("to-file", "to a file:// URL refused"),
]


@pytest.mark.parametrize(("fault", "problem"), FAULTS, ids=[fault for fault, _ in FAULTS])
def test_each_fault_is_a_clear_error(
    fault: str,
    problem: str,
    header: Path,
    env: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LAYERFIT_REMOTE_TIMEOUT", "1")
    with serving(Server(fault=fault)) as server:
        server.add_hub(REPO, "m.gguf", header, 40 << 30)
        monkeypatch.setenv("HF_ENDPOINT", server.base)
        started = time.monotonic()
        with pytest.raises(EstimationError) as caught:
            read_gguf(LOCATION)
        elapsed = time.monotonic() - started
        message = str(caught.value)
        assert message.startswith(f"{LOCATION}: http: ") and problem in message, message
        assert TOKEN not in message
        assert elapsed < 4, elapsed
        if fault == "no-range":  # the whole file is not read: the connection is dropped at once
            assert server.body_bytes < 64 << 20
        else:
            assert server.body_bytes <= 262144  # never more than the window asked for
        assert cache.usage() == (0, 0)
        assert main(["estimate", LOCATION]) == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert problem in err and TOKEN not in err and "Traceback" not in err


def test_401_without_a_token_says_set_hf_token(header: Path, env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN")
    with serving(Server(fault="401")) as server:
        server.add_hub(REPO, "m.gguf", header)
        monkeypatch.setenv("HF_ENDPOINT", server.base)
        with pytest.raises(EstimationError, match="a gated or private repository: set HF_TOKEN"):
            read_gguf(LOCATION)


def test_503_with_a_short_retry_after_is_retried(header: Path, env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with serving(Server(fault="503-once")) as server:
        server.add_hub(REPO, "m.gguf", header)
        monkeypatch.setenv("HF_ENDPOINT", server.base)
        assert read_gguf(LOCATION).block_count == 16
        assert [entry.path for entry in server.log].count(f"/{REPO}/resolve/main/m.gguf") == 2


def test_https_to_http_redirect_is_refused(env: None) -> None:
    fetcher = Fetcher(parse_location("https://models.example/m.gguf"))
    with pytest.raises(EstimationError, match=r"redirect from https to http refused .*it would drop TLS"):
        fetcher._check_redirect("https://models.example/m.gguf", "http://cdn.example/m.gguf")
    fetcher._check_redirect("http://models.example/m.gguf", "https://cdn.example/m.gguf")  # an upgrade is fine


def test_a_header_claiming_more_than_the_server_sends(
    tmp_path: Path, env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A metadata string of 2^40 bytes in a file the server says is 2^42 bytes: the reader skips
    # the string by its length, and the next read lies past the most layerfit fetches of a header.
    path = tmp_path / "m.gguf"
    write_gguf(path, GROUND_TRUTH_MODELS["llama1b-f16"])
    data = bytearray(path.read_bytes())
    key = b"general.name"
    at = data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key) + 4  # the value's length prefix
    data[at : at + 8] = struct.pack("<Q", 1 << 40)
    path.write_bytes(bytes(data))
    with serving(Server()) as server:
        server.add_hub(REPO, "m.gguf", path, 1 << 42)
        monkeypatch.setenv("HF_ENDPOINT", server.base)
        with pytest.raises(EstimationError, match=f"runs past {MAX_HEADER_BYTES >> 20} MiB"):
            read_gguf(LOCATION)
        assert server.body_bytes <= 262144 and cache.usage() == (0, 0)
    # and a file that ends before what its header claims: the reader's own check, naming the URL
    with serving(Server()) as server:
        short = tmp_path / "short.gguf"
        short.write_bytes(path.read_bytes()[:100])
        server.add_hub(REPO, "m.gguf", short)
        monkeypatch.setenv("HF_ENDPOINT", server.base)
        with pytest.raises(
            EstimationError, match=f"^{LOCATION}: byte 8: tensor count 146 cannot fit in a file of 100 bytes"
        ):
            read_gguf(LOCATION)
        assert cache.usage() == (0, 0)


def test_an_unreachable_host_is_named(env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")
    with pytest.raises(
        EstimationError,
        match=r"^hf://org/models/m.gguf: http: http://127.0.0.1:1/.*cannot connect \(Connection refused\)",
    ):
        read_gguf(LOCATION)
