"""A local HTTP server for the remote-header tests: GGUF files served by range requests, the way
Hugging Face's resolve endpoint serves them (a redirect to a second, "CDN" server that answers
ranges with an ETag), and one fault at a time.

Files are virtual: a header (written by ``layerfit.testing.synthetic``) followed by zeros up to the
file's full size, so a 40 GB model costs the server its header only. Every request is logged with
its headers, and the body bytes sent are counted.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from layerfit.estimators import read_header
from layerfit.testing.synthetic import GROUND_TRUTH_MODELS, REAL_MODELS, write_gguf

FAULTS = (
    "no-range",
    "short-read",
    "reset",
    "wrong-range",
    "404",
    "401",
    "403",
    "429",
    "503-once",
    "redirect-loop",
    "slow",
    "huge-size",
    "huge-length",
    "to-file",
    "delay",
)
_RANGE = re.compile(r"^bytes=(\d+)-(\d+)$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>.+)$")
_MS_RESOLVE = re.compile(r"^/models/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>.+)$")
_HF_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<revision>[^/]+)$")
_MS_FILES = re.compile(r"^/api/v1/models/(?P<repo>[^/]+/[^/]+)/repo/files$")
LISTING_FAULTS = (
    "listing-not-json",
    "listing-huge",
    "listing-huge-unannounced",
    "listing-next-elsewhere",
    "listing-401",
)


REPO = "org/models"


@dataclass
class VirtualFile:
    header: bytes
    size: int

    @property
    def etag(self) -> str:
        return '"' + hashlib.sha256(self.header + str(self.size).encode()).hexdigest()[:16] + '"'

    def slice(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of the file: the header, then zeros."""
        head = self.header[start:stop]
        return head + bytes(max(0, stop - max(start, len(self.header))))


@dataclass
class Logged:
    path: str
    headers: dict[str, str]


@dataclass
class Server:
    """Files by path; ``fault`` (one of ``FAULTS``) misbehaves on file requests."""

    files: dict[str, VirtualFile] = field(default_factory=dict)
    fault: str | None = None
    redirect_to: str | None = None
    """Base URL a hub resolve request is redirected to (HF's CDN); ``None``: answered here."""
    listing_fault: str | None = None
    """One of ``LISTING_FAULTS``: how the repository listings (``/api/...``) misbehave."""
    page_size: int = 1000
    """Entries per page of a Hugging Face tree listing."""
    log: list[Logged] = field(default_factory=list)
    body_bytes: int = 0
    port: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, path: str, local: Path, size: int | None = None) -> None:
        """Serve the file written at ``local`` at ``path``, virtually ``size`` bytes long."""
        header = local.read_bytes()
        self.files[path] = VirtualFile(header, max(size or 0, len(header)))

    def add_hub(self, repo: str, name: str, local: Path, size: int | None = None, revision: str = "main") -> None:
        """A Hugging Face file: its resolve path here (and its CDN path where ``redirect_to`` serves it)."""
        self.add(f"/{repo}/resolve/{revision}/{name}", local, size)

    def listed(self, prefix: str) -> list[str]:
        """The paths of the files served under ``prefix`` (a repository at a revision), sorted."""
        return sorted(path.removeprefix(prefix) for path in self.files if path.startswith(prefix))

    def count(self, sent: int) -> None:
        with self._lock:
            self.body_bytes += sent


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            server.log.append(Logged(self.path, {k.lower(): v for k, v in self.headers.items()}))
            path, _, query = self.path.partition("?")
            if path.startswith("/api/"):
                return self._listing(path, parse_qs(query))
            if server.fault == "delay":
                time.sleep(0.5)
            if server.fault == "redirect-loop":
                return self._redirect(path[:-1] if path.endswith("a") else path + "a")  # A -> Aa -> A
            if server.fault == "to-file":
                return self._redirect("file:///etc/passwd")
            hub = _RESOLVE.match(path) or _MS_RESOLVE.match(path)
            if hub is not None and server.redirect_to is not None:
                return self._redirect(f"{server.redirect_to}/cdn{path}")
            file = server.files.get(path[4:] if path.startswith("/cdn/") else path)
            if file is None:
                return self._send(404, b"not found")
            status = {"404": 404, "401": 401, "403": 403, "429": 429}.get(server.fault or "")
            if status is not None:
                return self._send(status, b"no", {"Retry-After": "3600"} if status == 429 else {})
            if server.fault == "503-once":
                server.fault = None
                return self._send(503, b"busy", {"Retry-After": "1"})
            if self.headers.get("If-None-Match") == file.etag:
                return self._send(304, b"", {"ETag": file.etag})
            self._range(file)

        def _listing(self, path: str, query: dict[str, list[str]]) -> None:
            """Hugging Face's tree listing (paged by ``cursor``, ``Link: rel="next"``) or ModelScope's."""
            fault = server.listing_fault
            if fault == "listing-401":
                return self._send(401, b"no")
            if fault == "listing-not-json":
                return self._send(200, b"<html>a login page</html>")
            if fault == "listing-huge":
                return self._send(200, b"[" + b" " * (17 << 20) + b"]")
            if fault == "listing-huge-unannounced":  # no Content-Length: the body ends when the connection does
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                for _ in range(17 << 4):
                    if not self._write(b" " * (1 << 16)):
                        return
                return
            tree, files = _HF_TREE.match(path), _MS_FILES.match(path)
            if tree is not None and query.get("recursive") == ["true"]:
                names = server.listed(f"/{tree['repo']}/resolve/{unquote(tree['revision'])}/")
                start = int(query.get("cursor", ["0"])[0])
                page = names[start : start + server.page_size]
                headers = {"Content-Type": "application/json"}
                if start + server.page_size < len(names):
                    base = "http://elsewhere.invalid" if fault == "listing-next-elsewhere" else server.base
                    following = f"{base}{path}?recursive=true&cursor={start + server.page_size}"
                    headers["Link"] = f'<{following}>; rel="next"'
                entries = [{"type": "file", "path": name, "size": 1} for name in page]
                folders = {name.rsplit("/", 1)[0] for name in page if "/" in name}
                entries += [{"type": "directory", "path": folder, "size": 0} for folder in sorted(folders)]
                return self._send(200, json.dumps(entries).encode(), headers)
            if files is not None and query.get("Recursive") == ["true"]:
                revision = query.get("Revision", ["master"])[0]
                names = server.listed(f"/models/{files['repo']}/resolve/{revision}/")
                entries = [{"Name": name.rsplit("/", 1)[-1], "Path": name, "Type": "blob"} for name in names]
                body = {"Code": 200, "Data": {"Files": entries}, "Success": True}
                return self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})
            return self._send(404, b"")

        def _range(self, file: VirtualFile) -> None:
            match = _RANGE.match(self.headers.get("Range", ""))
            if server.fault == "no-range" or match is None:
                return self._whole(file)
            start, last = int(match[1]), min(int(match[2]), file.size - 1)
            if start >= file.size:
                return self._send(416, b"", {"Content-Range": f"bytes */{file.size}"})
            body = file.slice(start, last + 1)
            size = 1 << 62 if server.fault == "huge-size" else file.size
            shown_start = start + 1 if server.fault == "wrong-range" else start
            headers = {"Content-Range": f"bytes {shown_start}-{last}/{size}", "ETag": file.etag}
            if server.fault == "huge-length":
                headers["Content-Length"] = str(1 << 62)
            self.send_response(206)
            for key, value in headers.items():
                self.send_header(key, value)
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if server.fault == "short-read":
                self._write(body[: len(body) // 2])
                self.close_connection = True
            elif server.fault == "reset":
                self._write(body[: len(body) // 2])
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
            elif server.fault == "slow":
                for offset in range(0, len(body), 64):
                    if not self._write(body[offset : offset + 64]):
                        return
                    time.sleep(0.2)
            else:
                self._write(body)

        def _whole(self, file: VirtualFile) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(file.size))
            self.send_header("ETag", file.etag)
            self.end_headers()
            for offset in range(0, min(file.size, 64 << 20), 1 << 16):
                if not self._write(file.slice(offset, min(offset + (1 << 16), file.size))):
                    return

        def _write(self, data: bytes) -> bool:
            server.count(len(data))  # before it is sent: the client may be done before this thread goes on
            try:
                self.wfile.write(data)
                self.wfile.flush()
            except OSError:
                self.close_connection = True
                return False
            return True

        def _redirect(self, target: str) -> None:
            self._send(302, b"", {"Location": target})

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self._write(body)

    return Handler


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-body (as the reader does on a fault) is no server error."""


@contextmanager
def serving(server: Server) -> Iterator[Server]:
    """Run ``server`` on 127.0.0.1 (a free port) while the block runs; stopped after it."""
    http = _QuietServer(("127.0.0.1", 0), _handler(server))
    http.daemon_threads = True
    server.port = http.server_address[1]
    thread = threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        http.shutdown()
        http.server_close()
        thread.join(timeout=5)


def sparse_model(directory: Path, name: str, **options: object) -> tuple[Path, int, int]:
    """A full-size sparse GGUF file: its path, size and header bytes."""
    path = directory / f"{name}.gguf"
    write_gguf(
        path, GROUND_TRUTH_MODELS[name] if name in GROUND_TRUTH_MODELS else REAL_MODELS[name], data="sparse", **options
    )  # type: ignore[arg-type]
    header = read_header(path)
    return path, path.stat().st_size, header.header_bytes


def serve_header(
    servers: tuple[Server, ...], local: Path, name: str, size: int, header_bytes: int, **kw: str
) -> None:
    with open(local, "rb") as handle:
        head = handle.read(header_bytes)
    header_file = local.with_suffix(".head")
    header_file.write_bytes(head)
    for server in servers:
        server.add_hub(REPO, name, header_file, size, **kw)


def serve_model(
    servers: tuple[Server, ...], directory: Path, model: str, name: str, **kw: str
) -> tuple[Path, int, int]:
    """Write ``model`` (``sparse_model``) and serve its header as ``REPO``'s file ``name`` on each
    server: the local file's path, its size and its header bytes."""
    local, size, header_bytes = sparse_model(directory, model)
    serve_header(servers, local, name, size, header_bytes, **kw)
    return local, size, header_bytes
