"""Header bytes of remote GGUF files kept on disk, so that a file's header is fetched once.

An entry is keyed by the URL fetched and the revision, and holds the ETag the server gave with
the bytes: it is used again when the file still has that ETag (one conditional request, answered
``304 Not Modified`` without a body) or, for a hub file at a commit id, without asking at all.
Only the header of a successful read is kept, never an error, a token or a redirected URL.

Where: ``$XDG_CACHE_HOME/layerfit/headers`` (default ``~/.cache/layerfit/headers``), folders
0700 and files 0600. ``LAYERFIT_CACHE=off`` turns it off; ``layerfit cache clear`` empties it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

_OFF = frozenset({"off", "0", "no", "false"})
_META = "meta.json"
_DATA = "header.bin"


@dataclass(frozen=True)
class Entry:
    """The cached header of one file: its first ``len(data)`` bytes."""

    etag: str | None
    size: int
    data: bytes


def enabled() -> bool:
    """Whether the cache is on (``LAYERFIT_CACHE`` is not ``off``)."""
    return os.environ.get("LAYERFIT_CACHE", "").strip().lower() not in _OFF


def root() -> Path:
    """The cache's folder (it may not exist yet)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "layerfit" / "headers"


def _folder(url: str, revision: str | None) -> Path:
    digest = hashlib.sha256(f"{url}\n{revision or ''}".encode()).hexdigest()
    return root() / digest[:2] / digest


def load(url: str, revision: str | None) -> Entry | None:
    """The entry for this URL and revision; ``None`` when there is none or it is damaged."""
    if not enabled():
        return None
    folder = _folder(url, revision)
    try:
        meta = json.loads((folder / _META).read_text(encoding="utf-8"))
        data = (folder / _DATA).read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("url") != url or meta.get("revision") != revision:
        return None
    size, length, digest = meta.get("size"), meta.get("length"), meta.get("sha256")
    etag = meta.get("etag")
    if not isinstance(size, int) or length != len(data) or digest != hashlib.sha256(data).hexdigest():
        return None
    if etag is not None and not isinstance(etag, str):
        return None
    return Entry(etag=etag, size=size, data=data)


def store(url: str, revision: str | None, entry: Entry) -> None:
    """Keep a header read without error. A cache that cannot be written is no error: the next read
    fetches the header again."""
    if not enabled():
        return
    folder = _folder(url, revision)
    meta = {
        "url": url,
        "revision": revision,
        "etag": entry.etag,
        "size": entry.size,
        "length": len(entry.data),
        "sha256": hashlib.sha256(entry.data).hexdigest(),
    }
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write(folder / _DATA, entry.data)
        _write(folder / _META, json.dumps(meta).encode())
    except OSError:
        return


def _write(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all (a temporary file renamed into place), mode 0600."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".part-")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def usage() -> tuple[int, int]:
    """Entries and bytes the cache holds."""
    entries = total = 0
    for meta in root().glob(f"*/*/{_META}"):
        entries += 1
        total += sum(item.stat().st_size for item in meta.parent.iterdir() if item.is_file())
    return entries, total


def clear() -> tuple[int, int]:
    """Remove every entry: how many there were and their bytes."""
    entries, total = usage()
    folder = root()
    if folder.is_dir():
        shutil.rmtree(folder)
    return entries, total
