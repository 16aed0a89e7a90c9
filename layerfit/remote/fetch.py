"""One byte range of a remote file, by an HTTP range request (urllib3).

Redirects are followed here, one at a time, so that each hop is checked: at most
``MAX_REDIRECTS``, no loop, no change of scheme but ``http`` to ``https``, and ``HF_TOKEN`` only
to the origin it is meant for (never along a redirect to another host). Every failure is an
``EstimationError`` naming the location as given and what went wrong; the token never appears in
one. A read takes at most the file's time limit (``LAYERFIT_REMOTE_TIMEOUT`` seconds, default
60, for all the requests of one file) and at most the bytes asked for.
"""

from __future__ import annotations

import email.utils
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from layerfit.errors import EstimationError, InputError
from layerfit.remote.locations import RemoteFile, origin

MAX_REDIRECTS = 10
MAX_RETRIES = 2
"""Retries of a 429 or 5xx reply whose ``Retry-After`` is short enough (``MAX_RETRY_WAIT``)."""
MAX_RETRY_WAIT = 10.0
MAX_FILE_BYTES = 1 << 44
"""The largest file size a server may report (16 TiB): the largest GGUF files are a few TB."""
DEFAULT_TIMEOUT = 60.0
SOCKET_TIMEOUT = 15.0
"""Longest wait for one connection or one read of the socket (never past the file's limit)."""
READ_PIECE = 1 << 16
USER_AGENT = "layerfit (GGUF header reader)"
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_REDIRECTS = (301, 302, 303, 307, 308)


@dataclass(frozen=True)
class Reply:
    """What one range request gave: ``data`` from ``start``; ``None`` data when not modified."""

    data: bytes | None
    start: int
    size: int | None
    etag: str | None


def time_limit() -> float:
    """``LAYERFIT_REMOTE_TIMEOUT``: seconds for all the requests of one file."""
    text = os.environ.get("LAYERFIT_REMOTE_TIMEOUT")
    if text is None or not text.strip():
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise InputError("LAYERFIT_REMOTE_TIMEOUT", f"expected seconds, got {text!r}") from None
    if not 0 < value <= 3600:
        raise InputError("LAYERFIT_REMOTE_TIMEOUT", f"expected seconds between 0 and 3600, got {text!r}")
    return value


def _pool() -> Any:
    try:
        import urllib3
    except ImportError:  # a dependency of layerfit (and of gguf, through requests)
        raise InputError("remote model", "reading a URL needs urllib3: pip install 'urllib3>=2.3'") from None
    global _POOL
    if _POOL is None:
        _POOL = urllib3.PoolManager(num_pools=8, maxsize=2, retries=False)
    return _POOL


_POOL: Any = None


def _shown(url: str) -> str:
    """A URL fit for an error: no query (a CDN's signed URL carries its signature there)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def _retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (a number or an HTTP date)."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(min(int(value), 1 << 31))
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(moment.timestamp() - time.time(), 0.0)


def _token() -> str | None:
    token = (os.environ.get("HF_TOKEN") or "").strip()
    return token or None


class Fetcher:
    """Range requests for one remote file, within one time limit."""

    def __init__(self, remote: RemoteFile, limit: float | None = None) -> None:
        self.remote = remote
        self.limit = time_limit() if limit is None else limit
        self.deadline = time.monotonic() + self.limit
        self.requests = 0

    def error(self, problem: str) -> EstimationError:
        return EstimationError(self.remote.location, "http", problem)

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.error(f"no complete reply within the time limit of {self.limit:g} s (LAYERFIT_REMOTE_TIMEOUT)")
        return left

    def get(self, start: int, end: int, if_none_match: str | None = None) -> Reply:
        """Bytes ``[start, end)``; with ``if_none_match``, ``Reply(data=None)`` when the file still has that ETag."""
        headers = {"Range": f"bytes={start}-{end - 1}"}
        if if_none_match is not None:
            headers["If-None-Match"] = if_none_match
        status, response, url = self._answered(self.remote.url, headers)
        return self._reply(status, response, url, start, end)

    def document(self, url: str, max_bytes: int) -> tuple[bytes, str | None]:
        """The whole body at ``url`` (a hub's JSON listing), at most ``max_bytes``, and its ``Link``
        header; redirects, retries and the time limit as for a range."""
        status, response, shown = self._answered(url, {})
        complete = False
        try:
            if status != 200:
                raise self.error(_status_problem(status, self.remote, shown))
            _identity(response, shown, self.error)
            announced = (response.headers.get("Content-Length") or "").strip()
            length = int(announced) if announced.isascii() and announced.isdigit() else None
            if length is not None and length > max_bytes:
                raise self.error(f"{_shown(shown)} announced {length:,} bytes, more than {max_bytes:,}")
            data = self._read(response, shown, max_bytes + 1 if length is None else length, exact=length is not None)
            if len(data) > max_bytes:
                raise self.error(f"{_shown(shown)} sent more than {max_bytes:,} bytes")
            complete = True
            return data, response.headers.get("Link")
        finally:
            _done(response, complete)

    def _answered(self, url: str, headers: dict[str, str]) -> tuple[int, Any, str]:
        """The first reply that is neither a redirect nor a 429/5xx worth waiting for."""
        for attempt in range(MAX_RETRIES + 1):
            status, response, answered = self._follow(url, headers)
            if status not in (429, 500, 502, 503, 504):
                return status, response, answered
            wait = _retry_after(response.headers.get("Retry-After"))
            response.close()
            if attempt < MAX_RETRIES and wait is not None and wait <= MAX_RETRY_WAIT and wait < self._left():
                time.sleep(wait)
                continue
            asked = "" if wait is None else f", retry after {wait:.0f} s"
            tries = f" ({attempt + 1} tries)" if attempt else ""
            raise self.error(f"HTTP {status} from {_shown(answered)}{asked}{tries}")
        raise AssertionError("unreachable")  # pragma: no cover

    def _follow(self, url: str, headers: dict[str, str]) -> tuple[int, Any, str]:
        """The first reply that is not a redirect: its status, the response and its URL."""
        first = url
        seen = [url]
        while True:
            response = self._request(url, headers)
            if response.status not in _REDIRECTS:
                return response.status, response, url
            target = response.headers.get("Location")
            response.close()  # its body unread: the connection is not reused
            if not target:
                raise self.error(f"HTTP {response.status} from {_shown(url)} without a Location")
            following = urljoin(url, target.strip())
            self._check_redirect(url, following)
            if following in seen:
                raise self.error(f"redirect loop: {' -> '.join(_shown(u) for u in [*seen, following][-3:])}")
            if len(seen) > MAX_REDIRECTS:
                raise self.error(f"more than {MAX_REDIRECTS} redirects from {_shown(first)}")
            seen.append(following)
            url = following

    def _check_redirect(self, current: str, target: str) -> None:
        before, after = urlsplit(current).scheme.lower(), urlsplit(target).scheme.lower()
        if after not in ("http", "https"):
            raise self.error(f"redirect from {_shown(current)} to a {after}:// URL refused")
        if before == "https" and after == "http":
            raise self.error(f"redirect from https to http refused ({_shown(target)}): it would drop TLS")

    def _request(self, url: str, extra: dict[str, str]) -> Any:
        import urllib3

        headers = {**extra, "Accept-Encoding": "identity", "User-Agent": USER_AGENT}
        token = _token()
        if token is not None and self.remote.token_origin is not None and origin(url) == self.remote.token_origin:
            headers["Authorization"] = f"Bearer {token}"
        wait = min(SOCKET_TIMEOUT, self._left())
        self.requests += 1
        try:
            return _pool().request(
                "GET",
                url,
                headers=headers,
                redirect=False,
                retries=False,
                preload_content=False,
                decode_content=False,
                timeout=urllib3.Timeout(connect=wait, read=wait),
            )
        except urllib3.exceptions.HTTPError as exc:
            raise self.error(f"{_shown(url)}: {_failure(exc, wait)}") from None

    def _reply(self, status: int, response: Any, url: str, start: int, end: int) -> Reply:
        etag = response.headers.get("ETag")
        complete = False
        try:
            if status == 304:
                complete = True
                return Reply(data=None, start=start, size=None, etag=etag)
            if status != 206:
                raise self.error(_status_problem(status, self.remote, url))
            _identity(response, url, self.error)
            first, last, size = self._content_range(response.headers.get("Content-Range"), url, start, end)
            data = self._body(response, url, last - first + 1)
            complete = True
            return Reply(data=data, start=first, size=size, etag=etag)
        finally:
            _done(response, complete)

    def _content_range(self, value: str | None, url: str, start: int, end: int) -> tuple[int, int, int]:
        match = _CONTENT_RANGE.match((value or "").strip())
        if match is None:
            raise self.error(f"{_shown(url)} answered 206 with Content-Range {value!r}, expected 'bytes A-B/SIZE'")
        first, last = int(match[1]), int(match[2])
        if match[3] == "*":
            raise self.error(f"{_shown(url)} does not say the file's size (Content-Range {value!r})")
        size = int(match[3])
        if size > MAX_FILE_BYTES:
            raise self.error(f"{_shown(url)} reports a file of {size:,} bytes, more than any GGUF file (2^44 at most)")
        expected_last = min(end, size) - 1
        if first != start or last != expected_last or last >= size:
            raise self.error(
                f"{_shown(url)} sent Content-Range {value!r} for the request bytes={start}-{end - 1}"
                f" (expected bytes {start}-{expected_last}/{size})"
            )
        return first, last, size

    def _body(self, response: Any, url: str, length: int) -> bytes:
        announced = response.headers.get("Content-Length")
        if announced is not None and announced.strip() != str(length):
            shown = announced.strip()
            raise self.error(f"{_shown(url)} announced Content-Length {shown} for a range of {length} bytes")
        return self._read(response, url, length, exact=True)

    def _read(self, response: Any, url: str, length: int, exact: bool) -> bytes:
        """Up to ``length`` bytes of the body, within the time limit; ``exact``: fewer is an error."""
        import urllib3

        data = bytearray()
        try:
            while len(data) < length:
                self._left()
                piece = response.read1(min(READ_PIECE, length - len(data)))
                if not piece:
                    break
                data += piece
        except urllib3.exceptions.HTTPError as exc:
            problem = _failure(exc, SOCKET_TIMEOUT)
            of = f" of {length}" if exact else ""
            raise self.error(f"{_shown(url)}: {problem} after {len(data)}{of} bytes") from None
        if exact and len(data) < length:
            raise self.error(f"{_shown(url)} closed the connection after {len(data)} of {length} bytes")
        return bytes(data)


def _identity(response: Any, url: str, error: Callable[[str], EstimationError]) -> None:
    """The body is sent as it is (layerfit asks for ``Accept-Encoding: identity``)."""
    encoding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding != "identity":
        raise error(f"{_shown(url)} sent its reply {encoding}-encoded; layerfit asked for identity")


def _done(response: Any, complete: bool) -> None:
    """Give the connection back after a body read whole; drop it after one left unread (a whole
    file sent to a range request, a broken range)."""
    if complete:
        response.release_conn()
    else:
        response.close()


def _status_problem(status: int, remote: RemoteFile, url: str) -> str:
    shown = _shown(url)
    if status == 200:
        return (
            f"{shown} ignored the range request (HTTP 200, the whole file): "
            "layerfit reads headers by range requests only"
        )
    if status in (401, 403):
        if remote.hub == "ms":
            return f"HTTP {status} from {shown}: access refused (layerfit reads public ModelScope models only)"
        sent = _token() is not None and remote.token_origin is not None
        hint = (
            "HF_TOKEN was refused: it has no access to this repository"
            if sent
            else "a gated or private repository: set HF_TOKEN"
        )
        return f"HTTP {status} from {shown}: {hint}"
    if status == 404:
        what = " (check the repository, revision and file name)" if remote.hub else ""
        return f"HTTP 404 from {shown}: not found{what}"
    if status == 416:
        return f"HTTP 416 from {shown}: the range lies past the end of the file"
    return f"unexpected HTTP {status} from {shown}"


def _failure(exc: Exception, wait: float) -> str:
    """What a urllib3 error says happened, in a few words (no URL: the caller names it)."""
    import urllib3

    cause: BaseException | None = exc
    while cause is not None and not (isinstance(cause, OSError) and cause.strerror):
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, urllib3.exceptions.NewConnectionError | urllib3.exceptions.NameResolutionError):
        return f"cannot connect ({cause.strerror if isinstance(cause, OSError) else type(exc).__name__})"
    if isinstance(exc, urllib3.exceptions.TimeoutError):
        return f"no reply within {wait:.0f} s"
    if isinstance(exc, urllib3.exceptions.SSLError):
        return "TLS failed (certificate or handshake)"
    if isinstance(cause, OSError):
        return f"connection broken ({cause.strerror})"
    return "connection broken" if isinstance(exc, urllib3.exceptions.ProtocolError) else type(exc).__name__
