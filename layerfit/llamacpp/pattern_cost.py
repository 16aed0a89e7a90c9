"""How much work a tensor-override pattern can make a backtracking regex engine do on one tensor name.

llama.cpp tests every ``-ot`` pattern with ``std::regex_search`` (a backtracking engine in libstdc++
and MSVC) and layerfit with Python's ``re`` (backtracking too). Both can take exponential time:
in Python, ``(.*)*x``, ``(a|a)*$`` and ``.*.*.*.*.*.*x`` each ran past 5 s on one 63-byte name;
llama-completion b11434 loading a small model with ``-ot '(.*)*x=CPU'`` ran past 30 s. A tensor name
is at most 63 bytes (ggml's 64-byte name buffer), so the work of one search is bounded by the
number of ways the pattern can consume a name of that length, times the start positions. That
count is read from the pattern as written: a sequence multiplies
its parts' ways, an alternation adds them, ``x*`` over one-character ``x`` has one way per length,
and a repetition of anything that can match in more than one way or at more than one length
multiplies per iteration (``(a+)+``, ``(ab|a)*``: exponential). Python's own parser is no help
here: it rewrites ``(\\w|\\d)`` into the class ``[\\w\\d]``, one way in Python's engine, two in
ECMAScript's, where ``(\\w|\\d)+$`` is exponential. Patterns whose bound passes
``MAX_SEARCH_PATHS`` are refused; every pattern in llama.cpp's documentation and presets is far
below it or at it (``\\.ffn_(up|down|gate)_exps`` 192 paths over the 64 start positions,
``blk\\.(1[0-9]|2[0-9])\\.ffn_.*`` 8,192, ``.*ffn_.*exps.*`` 16,777,216).

A model's tensors are searched by each pattern's ``search_core``, which finds a match exactly where
the pattern does, and ``search_paths`` at the model's longest name bounds each search
(``layerfit.estimators.overrides`` sums them over the tensors).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import NamedTuple

LONGEST_TENSOR_NAME = 63
"""Longest tensor name in bytes (ggml's ``GGML_MAX_NAME`` buffer, terminator included, is 64)."""
MAX_PATTERN_BYTES = 1024
"""Longest ``-ot`` pattern layerfit reads (real ones are under 100 bytes)."""
MAX_NESTING = 50
"""Deepest group nesting read (Python's ``re`` fails with a RecursionError near 500)."""
MAX_SEARCH_PATHS = 64**4
"""Most backtracking paths one search of one name may take: three ``.*`` pass, a fourth does not
(on a 63-byte name Python's ``re`` takes ~3 ms with three, ~35 ms with four, minutes with six)."""
MAX_TOTAL_PATHS = 4 * MAX_SEARCH_PATHS
"""Most paths over all the overrides of one deployment, since every tensor name is tested against
each in turn (``--n-cpu-moe 4095`` uses 2,096,640)."""
READ_CACHE = 8192
"""Patterns whose reading is kept: parsing a deployment's flags, checking them and estimating read
each pattern several times (a 1,024-byte pattern takes a few ms)."""
KEY_CANDIDATES = 4
"""Required literals of a pattern looked for in every name to choose its key (each a scan per name)."""
_SATURATED = MAX_SEARCH_PATHS * (LONGEST_TENSOR_NAME + 1) + 1
_QUANTIFIER = re.compile(r"\{(\d+)(,(\d*))?\}")
_ZERO_WIDTH_ESCAPES = frozenset("bB")


class _Shape(NamedTuple):
    """Ways a (sub)pattern can match from one position, and its width when fixed."""

    ways: int
    width: int | None
    free: bool = False
    """It matches the empty string wherever it is tried (``x*``, ``(...)?``)."""


def size_problem(pattern: str) -> str | None:
    """Why ``pattern`` is too big to read (``None``: it is not); checked before compiling it."""
    if len(pattern.encode()) > MAX_PATTERN_BYTES:
        return f"longer than {MAX_PATTERN_BYTES} bytes"
    if _nesting(pattern) > MAX_NESTING:
        return f"groups nested more than {MAX_NESTING} deep"
    return None


@lru_cache(maxsize=READ_CACHE)
def search_paths(pattern: str, length: int = LONGEST_TENSOR_NAME) -> int:
    """An upper bound on the backtracking paths of one search of a name of at most ``length`` bytes
    (saturated above ``MAX_SEARCH_PATHS``), growing with ``length``; ``pattern`` must compile and
    pass ``size_problem``."""
    return _product(length + 1, match_paths(pattern, length))


@lru_cache(maxsize=READ_CACHE)
def match_paths(pattern: str, length: int) -> int:
    """An upper bound on the backtracking paths of one match attempt at one position of a name of
    at most ``length`` bytes (``search_paths`` tries every position)."""
    return _Reader(pattern, length).alternation().ways


class Anchors(NamedTuple):
    """Literals every match of a pattern holds, which spare a search or narrow where it starts."""

    required: tuple[str, ...] = ()
    """The top-level literal runs: a name without one of them cannot match, and is not searched."""
    leading: str = ""
    """The literal every match starts with ("" when it starts otherwise): a search tries only where
    it occurs (Python's ``re`` finds those places by a literal scan)."""

    def key(self, names: Sequence[str]) -> str:
        """Of the ``KEY_CANDIDATES`` longest required literals, the one that occurs least in ``names``
        ("" when none is required)."""
        longest = sorted(self.required, key=len, reverse=True)[:KEY_CANDIDATES]
        if len(longest) < 2:
            return longest[0] if longest else ""
        joined = "\0".join(names)  # names and patterns hold no NUL: occurrences, a scan each
        return min(longest, key=joined.count)


@lru_cache(maxsize=READ_CACHE)
def anchors(pattern: str) -> Anchors:
    """The literals of ``pattern``'s top-level sequence, as Python's parser reads it (none for a
    top-level alternation or a case-insensitive pattern)."""
    parsed = re._parser.parse(pattern, re.ASCII)  # type: ignore[attr-defined]
    if parsed.state.flags & re.IGNORECASE:
        return Anchors()
    literal = re._constants.LITERAL  # type: ignore[attr-defined]
    runs: list[str] = []
    current: list[str] = []
    for op, value in [*parsed, (None, None)]:
        if op is literal:
            current.append(chr(value))
        elif current:
            runs.append("".join(current))
            current = []
    return Anchors(tuple(runs), runs[0] if len(parsed) > 0 and parsed[0][0] is literal else "")


def names_paths(pattern: str, names: Sequence[str], key: str) -> int:
    """An upper bound on the backtracking paths of one search of each of ``names`` that holds
    ``key`` (a literal every match holds; the others are not searched): their start positions (each
    occurrence of the leading literal, else every position) times ``match_paths`` at the longest."""
    searched = [name for name in names if key in name]
    if not searched:
        return 0
    longest = max(map(len, searched))
    leading = anchors(pattern).leading
    if leading:
        overlapping = any(leading[:k] == leading[-k:] for k in range(1, len(leading)))
        starts = "\0".join(searched).count(leading) * (len(leading) if overlapping else 1)
    else:
        starts = len(searched) * (longest + 1)
    return starts * match_paths(pattern, longest)


@lru_cache(maxsize=READ_CACHE)
def search_core(pattern: str) -> str:
    """The part of ``pattern`` that decides whether a search finds a match: each top-level
    alternative without its leading and trailing items that match the empty string anywhere
    (``x*``, ``(...)?``), which a search can always match empty. ``.*ffn_.*exps.*`` finds a match
    exactly where ``ffn_.*exps`` does, and ``.*.*.*x`` where ``x`` does; ``""`` (an alternative
    with nothing left) matches every name. Searching the core instead gives the same verdict,
    in fewer steps. ``pattern`` must compile and pass ``size_problem``."""
    reader = _Reader(pattern, LONGEST_TENSOR_NAME)
    reader.alternation()
    cores = []
    for items in reader.top_items:
        kept = [(start, end) for start, end, free in items if not free]
        if not kept:
            return ""
        cores.append(pattern[kept[0][0] : kept[-1][1]])
    return "|".join(cores)


def cost_problem(pattern: str) -> str | None:
    """Why a search with ``pattern`` could run unboundedly long on a tensor name (``None``: it cannot)."""
    paths = search_paths(pattern)
    if paths <= MAX_SEARCH_PATHS:
        return None
    shown = f"over {_SATURATED - 1:,}" if paths >= _SATURATED else f"{paths:,}"
    return (
        f"one search may try {shown} ways to match a {LONGEST_TENSOR_NAME}-byte tensor name, beyond "
        f"layerfit's bound of {MAX_SEARCH_PATHS:,}: nested or stacked repetitions such as (a+)+, (a|ab)* "
        "or .*.*.*.* make backtracking engines (llama.cpp's std::regex, Python's re) take exponential or "
        "very long time; repeat single characters or classes instead"
    )


def total_problem(patterns: Iterable[str]) -> str | None:
    """Why testing each tensor name against every one of ``patterns`` could take too long (``None``:
    it cannot); each pattern must pass ``cost_problem``."""
    total = sum(search_paths(pattern) for pattern in patterns)
    if total <= MAX_TOTAL_PATHS:
        return None
    return (
        f"together the patterns may try {total:,} ways to match each tensor name, beyond layerfit's bound "
        f"of {MAX_TOTAL_PATHS:,}: merge them or repeat single characters or classes instead of .*"
    )


def _nesting(pattern: str) -> int:
    depth = deepest = 0
    escaped = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth -= 1
    return deepest


def _product(a: int, b: int) -> int:
    return min(a * b, _SATURATED)


class _Reader:
    """A recursive-descent reading of a portable pattern (``expert_flags``' subset), into shapes."""

    def __init__(self, pattern: str, length: int) -> None:
        self.text = pattern
        self.length = length
        self.pos = 0
        self.depth = 0
        self.top_items: list[list[tuple[int, int, bool]]] = []
        """Per top-level alternative, each item's span in the pattern and whether it is free."""

    def _at(self, chars: str) -> bool:
        return self.pos < len(self.text) and self.text[self.pos] in chars

    def alternation(self) -> _Shape:
        shapes = [self._sequence()]
        while self._at("|"):
            self.pos += 1
            shapes.append(self._sequence())
        widths = {shape.width for shape in shapes}
        ways = min(sum(shape.ways for shape in shapes), _SATURATED)
        return _Shape(ways, widths.pop() if len(widths) == 1 else None, any(shape.free for shape in shapes))

    def _sequence(self) -> _Shape:
        ways = 1
        width: int | None = 0
        free = True
        items = []
        while self.pos < len(self.text) and not self._at("|)"):
            start = self.pos
            shape = self._quantified(self._atom())
            items.append((start, self.pos, shape.free))
            ways = _product(ways, shape.ways)
            width = None if width is None or shape.width is None else width + shape.width
            free = free and shape.free
        if self.depth == 0:
            self.top_items.append(items)
        return _Shape(ways, width, free)

    def _atom(self) -> _Shape:
        char = self.text[self.pos]
        self.pos += 1
        if char == "(":
            lookaround = self.text.startswith(("?=", "?!"), self.pos)
            if self._at("?"):
                self.pos += 2
            self.depth += 1
            inner = self.alternation()
            self.depth -= 1
            self.pos += 1  # the closing parenthesis
            return _Shape(inner.ways, 0) if lookaround else inner  # a lookaround can fail: not free
        if char == "[":
            self._skip_class()
            return _Shape(1, 1)
        if char == "\\":
            self.pos += 1
            return _Shape(1, 0 if self.text[self.pos - 1] in _ZERO_WIDTH_ESCAPES else 1)
        return _Shape(1, 0 if char in "^$" else 1)

    def _skip_class(self) -> None:
        if self._at("^"):
            self.pos += 1
        first = True
        while first or not self._at("]"):
            self.pos += 2 if self._at("\\") else 1
            first = False
        self.pos += 1

    def _quantified(self, shape: _Shape) -> _Shape:
        if self._at("*+?"):
            least, most = {"*": (0, None), "+": (1, None), "?": (0, 1)}[self.text[self.pos]]
            self.pos += 1
        elif (match := _QUANTIFIER.match(self.text, self.pos)) is not None:
            least = int(match[1])
            most = least if match[2] is None else (int(match[3]) if match[3] else None)
            self.pos = match.end()
        else:
            return shape
        if self._at("?"):
            self.pos += 1  # lazy: the same paths in another order
        return _repeat(least, most, shape, self.length)


def _repeat(least: int, most: int | None, body: _Shape, length: int) -> _Shape:
    shape = _repeat_ways(least, most, body, length)
    return shape._replace(free=least == 0 or body.free)


def _repeat_ways(least: int, most: int | None, body: _Shape, length: int) -> _Shape:
    if body.width == 0:
        return _Shape(body.ways, 0)  # an iteration that matches nothing ends the loop in both engines
    if body.ways == 1 and body.width is not None:
        limit = length // body.width
        most = limit if most is None else min(most, limit)
        if least > most:
            return _Shape(1, None)  # longer than any name: fails at once
        return _Shape(most - least + 1, body.width * least if least == most else None)  # one way per count
    if most is None:
        return _Shape(_SATURATED, None)  # unbounded, and every iteration multiplies the ways
    width = body.width * least if body.width is not None and least == most else None
    total, power = 0, 1
    for count in range(most + 1):
        if power >= _SATURATED:
            return _Shape(_SATURATED, width)
        if count >= least:
            total = min(total + power, _SATURATED)
        power = _product(power, body.ways)
    return _Shape(total, width)
