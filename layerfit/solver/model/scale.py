"""Byte sizes as CP-SAT integers.

CP-SAT works on 64-bit integers. Sizes are divided by a common unit: the greatest common divisor of
every size in the model, which keeps the model exact. Only when that would leave numbers above
``MAX_SCALED`` does the unit grow, and then rounding can only make the solver more conservative:
claims round up, capacities round down. Every decoded layout is checked again in bytes.

A model that must stay exact whatever the sizes (the fleet's master) writes each capacity row with
every size split in two numbers under ``MAX_SCALED`` instead (``add_at_most``); ``largest_number``
checks a built model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from math import gcd

from ortools.sat.python import cp_model

MAX_SCALED = 1 << 30
"""Largest scaled size. CP-SAT 9.15's presolve proves some feasible models of ours infeasible when
sizes reach ~2**33 (a 1-byte unit on 10 GB GPUs; presolve off, or every size under 2**32, finds the
solution): with sizes under 2**30 the product of two stays under 2**60."""
RADIX = 1 << 20
"""An exact size in bytes is written as ``high * RADIX + low`` (``radix_parts``): both parts of a
size up to ``domain.base.MAX_BYTES`` (2**50, the largest size an input may carry) stay within
``MAX_SCALED``."""
UNBOUNDED = 1 << 62
"""A constraint bound at least this large stands for no bound (CP-SAT writes one side as +-2**63)."""


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


def radix_parts(n_bytes: int) -> tuple[int, int]:
    """``n_bytes`` as ``(high, low)``: ``high * RADIX + low``, ``0 <= low < RADIX``."""
    return divmod(n_bytes, RADIX)


Term = tuple[int, cp_model.IntVar, int]
"""A size in bytes, the variable counting it, and that variable's upper bound."""


def add_at_most(model: cp_model.CpModel, terms: Sequence[Term], capacity_bytes: int, name: str) -> None:
    """``sum(size * var) <= capacity_bytes``, exact in bytes, with every number under ``MAX_SCALED``.

    Sizes and the capacity are split (``radix_parts``; ``capacity = q * RADIX + r``). The lows'
    total is carried into whole ``RADIX`` units by ``carry >= (lows - r) / RADIX``, and
    ``highs + carry <= q``: an integer carry exists exactly when the row holds in bytes (and the LP
    relaxation is at least as tight as the row's in bytes)."""
    q, r = radix_parts(capacity_bytes)
    highs = sum(radix_parts(size)[0] * var for size, var, _ in terms)
    lows = [(radix_parts(size)[1], var, most) for size, var, most in terms if size % RADIX]
    if not lows:
        model.add(highs <= q)  # r < RADIX: whole highs fit in q + r / RADIX exactly when in q
        return
    most = sum(low * upper for low, _, upper in lows)
    carry = model.new_int_var(0, max(0, min(q, -(-(most - r) // RADIX))), f"carry_{name}")
    model.add(RADIX * carry >= sum(low * var for low, var, _ in lows) - r)
    model.add(highs + carry <= q)


def largest_number(model: cp_model.CpModel) -> int:
    """The largest magnitude among the model's variable bounds and its constraints' coefficients,
    offsets and finite bounds (the objective aside): under ``MAX_SCALED`` in a model whose sizes are
    scaled or split as above."""
    numbers = [bound for var in model.proto.variables for bound in var.domain]
    for constraint in model.proto.constraints:
        if constraint.has_linear():
            numbers += [*constraint.linear.coeffs, *constraint.linear.domain]
        exprs = []
        if constraint.has_element():
            element = constraint.element
            exprs = [*element.exprs, element.linear_index, element.linear_target]
        elif constraint.has_lin_max():
            exprs = [*constraint.lin_max.exprs, constraint.lin_max.target]
        numbers += [n for expr in exprs for n in (*expr.coeffs, expr.offset)]
    return max((abs(n) for n in numbers if abs(n) < UNBOUNDED), default=0)
