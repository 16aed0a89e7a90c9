"""The files of a Hugging Face or ModelScope repository, for GPUStack's file names and projectors.

GPUStack 2.3.0 lists a hub model's repository before it estimates it (``scheduler/calculator.py``:
``list_repo``, then ``filter_filename``): the model file may be a pattern (``*Q4_K_M*.gguf``; the
first match in sorted order is used), and a projector matching ``*mmproj*.gguf`` is added when the
repository has one. These are the listings it reads, by one bounded JSON request (a page) each:

* Hugging Face: ``{HF_ENDPOINT}/api/models/ORG/REPO/tree/REVISION?recursive=true``, pages of up to
  1,000 entries joined by ``Link: <...>; rel="next"`` (the token as for a file: to that origin only);
* ModelScope: ``{MODELSCOPE_DOMAIN}/api/v1/models/ORG/REPO/repo/files?Revision=...&Recursive=true``,
  one page, which ModelScope cuts at 3,000 entries without saying so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import quote, urljoin

from layerfit.domain.base import Frozen
from layerfit.remote.fetch import Fetcher
from layerfit.remote.locations import (
    DEFAULT_REVISION,
    Hub,
    RemoteFile,
    check_repo,
    hf_endpoint,
    ms_endpoint,
    origin,
)

MAX_PAGE_BYTES = 16 << 20
"""The most one listing page may hold (1,000 Hugging Face entries take about 300 KB)."""
MAX_PAGES = 50
MS_LISTING_CAP = 3000
"""ModelScope returns at most this many entries and says nothing when it cuts the list."""
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


class Listing(Frozen):
    """A repository's file paths, sorted; ``complete`` is false where the hub may have cut the list."""

    files: tuple[str, ...]
    complete: bool = True

    @classmethod
    def of(cls, paths: Sequence[str], complete: bool) -> Listing:
        return cls(files=tuple(sorted(set(paths))), complete=complete)

    def first_match(self, pattern: str) -> str | None:
        """The first file, in sorted order, that ``pattern`` matches (GPUStack's ``filter_filename``)."""
        return next((path for path in self.files if fnmatchcase(path, pattern)), None)


def listing_url(hub: Hub, repo: str, revision: str) -> str:
    """Where a repository's files are listed."""
    if hub == "hf":
        return f"{hf_endpoint()}/api/models/{repo}/tree/{quote(revision, safe='')}?recursive=true"
    return f"{ms_endpoint()}/api/v1/models/{repo}/repo/files?Revision={quote(revision, safe='')}&Recursive=true"


def repo_files(hub: Hub, repo: str, revision: str | None = None) -> Listing:
    """The file paths of ``repo`` at ``revision`` (its default when ``None``); ``EstimationError``
    naming the repository and what went wrong when it cannot be listed."""
    check_repo(f"{hub}://{repo}", repo)
    revision = revision or DEFAULT_REVISION[hub]
    url = listing_url(hub, repo, revision)
    remote = RemoteFile(
        location=f"{hub}://{repo}@{revision} (its file listing)",
        url=url,
        hub=hub,
        repo=repo,
        revision=revision,
        token_origin=origin(hf_endpoint()) if hub == "hf" else None,
    )
    fetcher = Fetcher(remote)
    if hub == "ms":
        body, _ = fetcher.document(url, MAX_PAGE_BYTES)
        paths = _ms_paths(fetcher, _json(fetcher, body))
        return Listing.of(paths, complete=len(paths) < MS_LISTING_CAP)
    found: list[str] = []
    page_url: str | None = url
    for _ in range(MAX_PAGES):
        assert page_url is not None
        body, link = fetcher.document(page_url, MAX_PAGE_BYTES)
        found += _hf_paths(fetcher, _json(fetcher, body))
        page_url = _next_page(fetcher, page_url, link)
        if page_url is None:
            return Listing.of(found, complete=True)
    raise fetcher.error(f"more than {MAX_PAGES} pages of files")


def _json(fetcher: Fetcher, body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:  # UnicodeDecodeError too
        raise fetcher.error(f"the listing is not JSON ({len(body)} bytes)") from None


def _hf_paths(fetcher: Fetcher, page: Any) -> list[str]:
    if not isinstance(page, list):
        raise fetcher.error(f"expected a JSON list of files, got {type(page).__name__}")
    paths = []
    for entry in page:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise fetcher.error("a listing entry without a path")
        if entry.get("type") == "file":
            paths.append(entry["path"])
    return paths


def _ms_paths(fetcher: Fetcher, body: Any) -> list[str]:
    data = body.get("Data", body) if isinstance(body, dict) else body
    files = data.get("Files") if isinstance(data, dict) else data
    if not isinstance(files, list):
        raise fetcher.error("expected {'Data': {'Files': [...]}} in the listing")
    paths = []
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("Path"), str):
            raise fetcher.error("a listing entry without a Path")
        if entry.get("Type", "blob") != "tree":
            paths.append(entry["Path"])
    return paths


def _next_page(fetcher: Fetcher, current: str, link: str | None) -> str | None:
    """The next page a ``Link`` header names, on the listing's own origin (its token goes there)."""
    match = _NEXT.search(link or "")
    if match is None:
        return None
    following = urljoin(current, str(match[1]).strip())
    if origin(following) != origin(current):
        raise fetcher.error(f"the next page of the listing lies on another host ({origin(following)})")
    return following
