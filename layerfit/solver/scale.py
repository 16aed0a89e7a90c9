"""Byte sizes as CP-SAT integers.

CP-SAT works on 64-bit integers. Sizes are divided by a common unit: the greatest common divisor of
every size in the model, which keeps the model exact. Only when that would leave numbers above
``MAX_SCALED`` does the unit grow, and then rounding can only make the solver more conservative:
claims round up, capacities round down. Every decoded layout is checked again in bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from math import gcd

MAX_SCALED = 1 << 30
"""Largest scaled size. CP-SAT 9.15's presolve proves some feasible models of ours infeasible when
sizes reach ~2**33 (a 1-byte unit on 10 GB GPUs; presolve off, or every size under 2**32, finds the
solution): with sizes under 2**30 the product of two stays under 2**60."""


@dataclass(frozen=True)
class Scale:
    """A size unit in bytes and the two rounding directions."""

    unit_bytes: int
    exact: bool

    def claim(self, n_bytes: int) -> int:
        """A claim in units, rounded up."""
        return -(-n_bytes // self.unit_bytes)

    def capacity(self, n_bytes: int) -> int:
        """A capacity in units, rounded down."""
        return n_bytes // self.unit_bytes


def choose_scale(sizes: Iterable[int]) -> Scale:
    """The largest unit that divides every size, grown (inexactly) only if numbers stay too large."""
    values = [size for size in sizes if size > 0]
    if not values:
        return Scale(unit_bytes=1, exact=True)
    unit = 0
    for value in values:
        unit = gcd(unit, value)
    largest = max(values)
    if largest // unit <= MAX_SCALED:
        return Scale(unit_bytes=unit, exact=True)
    coarse = 1 << (largest // MAX_SCALED).bit_length()
    return Scale(unit_bytes=coarse, exact=False)


TIE_BREAK_RESOLUTION = 1 << 10
"""Distinct values a tie-break coefficient may take: capacities are divided to stay below it."""


def tie_break_unit(capacities: Iterable[int]) -> int:
    """A divisor that brings the largest capacity under ``TIE_BREAK_RESOLUTION`` (1 if it is)."""
    return max(1, max(capacities, default=0) // TIE_BREAK_RESOLUTION)
