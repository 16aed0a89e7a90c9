"""The remote forms of a model location, and where each is fetched from.

* ``https://HOST/PATH`` (or ``http://``, for a mirror or a test server): fetched as given.
* ``hf://ORG/REPO[@REVISION]/FILE.gguf``: Hugging Face's resolve endpoint,
  ``{HF_ENDPOINT}/ORG/REPO/resolve/{REVISION or main}/FILE.gguf`` (``HF_ENDPOINT`` defaults to
  ``https://huggingface.co``); ``HF_TOKEN`` is sent to that endpoint's host only.
* ``ms://ORG/REPO[@REVISION]/FILE.gguf``: ModelScope's,
  ``{MODELSCOPE_URL_SCHEME}{MODELSCOPE_DOMAIN}/models/ORG/REPO/resolve/{REVISION or master}/FILE.gguf``
  (as the ModelScope SDK reads them: ``https://`` and ``modelscope.cn`` by default). Public models only.

A revision may be written URL-encoded (``refs%2Fpr%2F1``). Credentials in a URL are refused
(``HF_TOKEN`` carries them, and only to the host it is meant for); so is any other scheme.
"""

from __future__ import annotations

import os
import re
from typing import Literal
from urllib.parse import quote, unquote, urlsplit

from layerfit.domain.base import Frozen
from layerfit.errors import InputError

Hub = Literal["hf", "ms"]
HF_DEFAULT_ENDPOINT = "https://huggingface.co"
MS_DEFAULT_DOMAIN = "modelscope.cn"
DEFAULT_REVISION: dict[Hub, str] = {"hf": "main", "ms": "master"}
FORMS = "a path, https://HOST/FILE.gguf, hf://ORG/REPO[@REVISION]/FILE.gguf or ms://ORG/REPO[@REVISION]/FILE.gguf"

_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_HUB = re.compile(rf"^(?P<org>{_NAME})/(?P<repo>{_NAME})(?:@(?P<revision>[^/@?#\s]+))?/(?P<file>[^?#\s]+)$")
_REPO = re.compile(rf"^{_NAME}/{_NAME}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_PATTERN_CHARS = frozenset("*?[]")


class RemoteFile(Frozen):
    """One remote file: what the user wrote, the URL fetched first, and whose token it may carry."""

    location: str
    """As given; errors name it."""
    url: str
    hub: Hub | None = None
    repo: str | None = None
    """``ORG/REPO`` of a hub location."""
    file: str | None = None
    """The file's path in the repository of a hub location."""
    revision: str | None = None
    """A hub location's revision (its default when none is written)."""
    token_origin: str | None = None
    """``scheme://host:port`` that ``HF_TOKEN`` may be sent to; ``None``: never sent."""

    @property
    def immutable(self) -> bool:
        """A hub file at a commit id: its bytes never change."""
        return self.hub is not None and self.revision is not None and _COMMIT.match(self.revision) is not None


def origin(url: str) -> str:
    """``scheme://host:port`` of a URL (the port made explicit), lower case."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{port}"


def _without_credentials(url: str) -> str:
    """The URL with any ``user:password@`` replaced, fit to show in an error."""
    scheme, _, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    return f"{scheme}://***@{authority.rpartition('@')[2]}{slash}{path}" if "@" in authority else url


def _endpoint(name: str, value: str) -> str:
    """An endpoint from the environment: ``http(s)://HOST[:PORT][/PATH]``, no credentials."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (a malformed port raises here)
    except ValueError as exc:
        raise InputError(name, f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(name, f"expected http(s)://HOST[:PORT], got {value!r}")
    if parts.username is not None or parts.password is not None:
        raise InputError(name, "credentials in the endpoint are refused: set HF_TOKEN")
    return value.rstrip("/")


def hf_endpoint() -> str:
    """``HF_ENDPOINT`` (a mirror) or Hugging Face itself."""
    return _endpoint("HF_ENDPOINT", os.environ.get("HF_ENDPOINT") or HF_DEFAULT_ENDPOINT)


def ms_endpoint() -> str:
    """ModelScope's endpoint, from ``MODELSCOPE_URL_SCHEME`` and ``MODELSCOPE_DOMAIN`` as its SDK reads them."""
    scheme = os.environ.get("MODELSCOPE_URL_SCHEME") or "https://"
    domain = os.environ.get("MODELSCOPE_DOMAIN") or MS_DEFAULT_DOMAIN
    return _endpoint("MODELSCOPE_DOMAIN", f"{scheme}{domain}")


def is_pattern(name: str) -> bool:
    """Whether a file name is a glob pattern (``*``, ``?``, ``[...]``), as GPUStack allows."""
    return any(char in _PATTERN_CHARS for char in name)


def _hub_file(location: str, hub: Hub, rest: str) -> RemoteFile:
    match = _HUB.match(rest)
    form = f"{hub}://ORG/REPO[@REVISION]/FILE.gguf"
    if match is None:
        raise InputError(location, f"expected {form}")
    file = match["file"]
    parts = file.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise InputError(location, f"the file path {file!r} has an empty, '.' or '..' part")
    if is_pattern(file):
        raise InputError(location, f"{file!r} is a pattern; name one file ({form})")
    if not file.endswith(".gguf"):
        raise InputError(location, f"expected a .gguf file ({form})")
    revision = unquote(match["revision"]) if match["revision"] else DEFAULT_REVISION[hub]
    repo = f"{match['org']}/{match['repo']}"
    base = hf_endpoint() if hub == "hf" else f"{ms_endpoint()}/models"
    url = f"{base}/{repo}/resolve/{quote(revision, safe='')}/{quote(file)}"
    token_origin = origin(hf_endpoint()) if hub == "hf" else None
    return RemoteFile(
        location=location, url=url, hub=hub, repo=repo, file=file, revision=revision, token_origin=token_origin
    )


def _url_file(location: str) -> RemoteFile:
    try:
        parts = urlsplit(location)
        parts.port  # noqa: B018 (a malformed port raises here)
    except ValueError as exc:
        raise InputError(_without_credentials(location), f"not a URL ({exc})") from None
    if parts.username is not None or parts.password is not None:
        raise InputError(_without_credentials(location), "credentials in a URL are refused: set HF_TOKEN instead")
    if not parts.hostname:
        raise InputError(location, "the URL names no host")
    hf_origin = origin(hf_endpoint())
    token_origin = hf_origin if origin(location) == hf_origin else None
    return RemoteFile(location=location, url=location, token_origin=token_origin)


def parse_location(location: str) -> RemoteFile:
    """What a remote location names; ``InputError`` for a form layerfit refuses."""
    match = _SCHEME.match(location)
    if match is None:
        raise InputError(location, f"not a URL; expected {FORMS}")
    scheme = match["scheme"].lower()
    rest = location[match.end() :]
    if scheme in ("hf", "ms"):
        return _hub_file(location, "hf" if scheme == "hf" else "ms", rest)
    if scheme in ("http", "https"):
        return _url_file(location)
    raise InputError(_without_credentials(location), f"unknown scheme {scheme}://; expected {FORMS}")


def check_repo(what: str, repo: str) -> str:
    """A hub repository id, ``ORG/REPO`` (``InputError`` naming ``what`` otherwise)."""
    if _REPO.match(repo) is None:
        raise InputError(what, f"expected ORG/REPO (letters, digits, '.', '_', '-'), got {repo!r}")
    return repo


def hub_location(hub: Hub, repo: str, file: str, revision: str | None = None) -> str:
    """``hf://`` or ``ms://`` location of one file of a repository."""
    at = f"@{quote(revision, safe='')}" if revision else ""
    return f"{hub}://{repo}{at}/{file}"
