"""Layout -> the shortest exact llama.cpp flags for the experts it keeps on the host.

``--n-cpu-moe N`` when the blocks whose experts sit in host RAM (those kept on the host and
``Layout.host_expert_blocks``), together with blocks that have no expert tensors, are exactly
blocks ``0 .. N-1``; otherwise one ``-ot`` override whose pattern names the blocks with digit
ranges (``blk\\.(1[0-9]|2[0-3])\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU``). Nothing when no
GPU block keeps its experts on the host (no override: llama.cpp may then use pipeline parallelism).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from layerfit.domain.layout import Layout
from layerfit.llamacpp.expert_flags import CPU_BUFFER, EXPERTS_PATTERN


def expert_args(layout: Layout, expertless_blocks: Collection[int] = ()) -> tuple[str, ...]:
    """The flags that keep the layout's experts on the host (``expertless_blocks``: blocks without
    expert tensors, which a flag may name or not)."""
    if not layout.host_expert_blocks:
        return ()
    host = set(layout.experts_on_host)
    free = set(expertless_blocks) - host
    prefix = _longest_prefix(host | free, layout.n_blocks)
    if host <= set(range(prefix)):
        count = max(host) + 1
        return ("--n-cpu-moe", str(count))
    blocks = sorted(layout.host_expert_blocks)
    return ("-ot", rf"blk\.{numbers_pattern(blocks)}{EXPERTS_PATTERN}={CPU_BUFFER}")


def _longest_prefix(blocks: set[int], n_blocks: int) -> int:
    count = 0
    while count < n_blocks and count in blocks:
        count += 1
    return count


def numbers_pattern(numbers: Collection[int]) -> str:
    """A regex matching exactly these non-negative integers (no leading zeros), as a group."""
    alternatives = [part for low, high in _runs(sorted(set(numbers))) for part in _range_parts(low, high)]
    return alternatives[0] if len(alternatives) == 1 and alternatives[0].isdigit() else f"({'|'.join(alternatives)})"


def _runs(numbers: list[int]) -> Iterator[tuple[int, int]]:
    start = previous = numbers[0]
    for number in numbers[1:]:
        if number != previous + 1:
            yield start, previous
            start = number
        previous = number
    yield start, previous


def _range_parts(low: int, high: int) -> list[str]:
    """Alternatives matching ``low .. high``: per digit count, aligned blocks of ``10**k`` merged
    on their last leading digit (``10..39`` -> ``[1-3][0-9]``)."""
    parts: list[str] = []
    while low <= high:
        width = len(str(low))
        top = min(high, 10**width - 1)
        parts += _same_width(low, top)
        low = top + 1
    return parts


def _same_width(low: int, high: int) -> list[str]:
    segments: list[tuple[str, int, int]] = []  # (leading digits but the last, last digit, free digits)
    while low <= high:
        free = 0
        while low % 10 ** (free + 1) == 0 and low + 10 ** (free + 1) - 1 <= high and len(str(low)) > free + 1:
            free += 1
        lead = str(low // 10**free)
        segments.append((lead[:-1], int(lead[-1]), free))
        low += 10**free
    parts: list[str] = []
    i = 0
    while i < len(segments):
        stem, first, free = segments[i]
        last = first
        while i + 1 < len(segments) and segments[i + 1] == (stem, last + 1, free):
            i, last = i + 1, last + 1
        digit = str(first) if first == last else f"[{first}-{last}]"
        parts.append(stem + digit + "[0-9]" * free)
        i += 1
    return parts
