"""Backend parameters split into words as ``shlex`` splits them, in time linear in their length.

``LlamaParams`` reads each item of ``backend_parameters`` (``"--ctx-size 8192"``) the way
``shlex.shlex(item, posix=True)`` with ``whitespace_split`` and no escape character reads it.
``shlex`` builds each word one character at a time on an attribute (``self.token + char``), so its
time grows with the square of a word's length: an item of 283,000 characters took 1.3 s, one of
2.8 MB 193 s, and a deployment file may hold 32 MiB. ``split_words`` follows the same rules with
one regular-expression step per run of characters.

What is read is bounded by what a command line can carry, since the words go into llama-server's:
one argument of at most ``MAX_ARGUMENT_BYTES`` (Linux's ``MAX_ARG_STRLEN``; execve fails with
E2BIG beyond it), ``MAX_PARAMETER_BYTES`` in all (Linux's default ``ARG_MAX``), and at most
``MAX_WORDS`` words (layerfit's own bound: real deployments pass a few dozen).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from layerfit.errors import InputError

MAX_ARGUMENT_BYTES = 131_071
"""Longest argument a Linux command takes: ``MAX_ARG_STRLEN`` (32 pages of 4 KiB) with its NUL."""
MAX_PARAMETER_BYTES = 2 * 1024**2
"""Most backend-parameter text read: Linux's default ``ARG_MAX`` for a whole command line."""
MAX_WORDS = 16_384
"""Most words read (4,095 tensor overrides given with one ``-ot`` each take 8,190)."""
FIELD = "backend_parameters"

_SPACE = " \t\r\n"
"""``shlex``'s whitespace: other white space (``\\v``, ``\\f``, non-ASCII) is part of a word."""
_PIECE = re.compile(r"[ \t\r\n]+|#[^\n]*\n?|'[^']*'|\"[^\"]*\"|[^ \t\r\n#'\"]+")
"""White space, a comment to the end of its line, a quoted string, or a run of other characters;
nothing matches only at a quote that is never closed."""


def split_words(text: str) -> list[str]:
    """The words of ``text``: white space separates them; ``#`` starts a comment to the end of its
    line, also inside a word (which it ends); single or double quotes keep their content as it is
    (no escapes) and join the characters around them into one word (``''`` is an empty word).
    ``ValueError("No closing quotation")`` for a quote that is never closed, as ``shlex`` raises."""
    return list(_words(text))


def _words(text: str) -> Iterator[str]:
    word: list[str] | None = None
    pos = 0
    while pos < len(text):
        match = _PIECE.match(text, pos)
        if match is None:
            raise ValueError("No closing quotation")
        piece, pos = match.group(), match.end()
        if piece[0] in _SPACE or piece[0] == "#":
            if word is not None:
                yield "".join(word)
            word = None
            continue
        word = [] if word is None else word
        word.append(piece[1:-1] if piece[0] in "'\"" else piece)
    if word is not None:
        yield "".join(word)


def split_items(items: Sequence[object]) -> list[str]:
    """Items such as ``"--ctx-size 8192"`` flattened into words (``-c=8192`` stays one word), within
    the bounds; ``InputError`` naming ``backend_parameters`` for a non-string item, an unclosed quote
    or input beyond them."""
    words: list[str] = []
    size = 0
    for item in items:
        if not isinstance(item, str):
            raise InputError(FIELD, f"expected strings, got {_shown(repr(item))}")
        size += len(item.encode("utf-8", "surrogatepass"))
        if size > MAX_PARAMETER_BYTES:
            raise InputError(FIELD, _too_long(f"more than {MAX_PARAMETER_BYTES:,} bytes", MAX_PARAMETER_BYTES))
        words += _bounded_words(item, MAX_WORDS - len(words))
    check_words(words)
    return words


def _bounded_words(item: str, room: int) -> list[str]:
    """The words of one item, refused past ``room`` words (before splitting the rest)."""
    words: list[str] = []
    try:
        for word in _words(item):
            words.append(word)
            if len(words) > room:
                break
    except ValueError as exc:
        raise InputError(FIELD, f"cannot split {_shown(repr(item))}: {exc}") from None
    if len(words) > room:
        raise InputError(FIELD, f"more than {MAX_WORDS:,} words; layerfit reads at most that many")
    return words


def check_words(words: Sequence[str]) -> None:
    """``InputError`` when llama-server could not be started with these words as its arguments."""
    if len(words) > MAX_WORDS:
        raise InputError(FIELD, f"{len(words):,} words; layerfit reads at most {MAX_WORDS:,}")
    size = 0
    for word in words:
        length = len(word.encode("utf-8", "surrogatepass"))
        if length > MAX_ARGUMENT_BYTES:
            raise InputError(FIELD, _too_long(f"an argument of {length:,} bytes ({_shown(repr(word))})"))
        size += length + 1
    if size > MAX_PARAMETER_BYTES:
        raise InputError(FIELD, _too_long(f"{size:,} bytes of arguments", MAX_PARAMETER_BYTES))


def argument_problem(what: str, length: int) -> str | None:
    """Why one argument of ``length`` bytes cannot be passed to llama-server (``None``: it can)."""
    return _too_long(f"{what} of {length:,} bytes") if length > MAX_ARGUMENT_BYTES else None


def _too_long(what: str, most: int = MAX_ARGUMENT_BYTES) -> str:
    limit = "per argument (MAX_ARG_STRLEN)" if most == MAX_ARGUMENT_BYTES else "of arguments in all (ARG_MAX)"
    return f"{what}: Linux takes at most {most:,} bytes {limit}, so llama-server could not be started with it"


def _shown(text: str) -> str:
    return text if len(text) <= 80 else f"{text[:80]}... ({len(text):,} characters)"
