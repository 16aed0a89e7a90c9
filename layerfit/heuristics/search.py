"""The most layers a placement holds: a binary search where the claims are monotone, else a scan."""

from __future__ import annotations

from collections.abc import Callable

from layerfit.heuristics.evaluate import Verdict


def largest_fitting(
    at: Callable[[int], Verdict], lo: int, hi: int, *, monotone: bool, hopeless: Callable[[Verdict], bool]
) -> Verdict | None:
    """The verdict with the most layers in ``lo..hi`` that fits, or ``None``.

    ``monotone``: one device without unified memory, all counts partial: its VRAM grows and the
    main RAM shrinks with the layers, so a binary search finds the most layers VRAM allows and
    that count is the only one to check. Otherwise counts are scanned down from ``hi`` until one
    fits or ``hopeless`` says no smaller count can.
    """
    if hi < lo:
        return None
    if monotone:
        return _bisect(at, lo, hi)
    for count in range(hi, lo - 1, -1):
        verdict = at(count)
        if verdict.fits:
            return verdict
        if hopeless(verdict):
            return None
    return None


def _bisect(at: Callable[[int], Verdict], lo: int, hi: int) -> Verdict | None:
    best = at(lo)
    if not best.vram_ok:
        return None
    low, high = lo + 1, hi
    while low <= high:
        middle = (low + high) // 2
        verdict = at(middle)
        if verdict.vram_ok:
            best, low = verdict, middle + 1
        else:
            high = middle - 1
    return best if best.fits else None
