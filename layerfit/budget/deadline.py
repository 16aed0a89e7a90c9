"""One wall-clock budget shared by every stage of ``plan()``: heuristic, solver, alternatives, explain.

A ``Deadline`` is a point on ``time.perf_counter``'s clock. Stages that loop check it between
steps and stop with their best so far (saying so in their ``EngineStats``); stages that call
CP-SAT pass the remaining seconds on as its time limit. Set-up loops with nothing to return half
way (the solver's instance) call ``check()``, which raises ``DeadlinePassed`` for the stage to catch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


class DeadlinePassed(Exception):
    """Raised by ``Deadline.check()``: the stage has no time left and gives up."""


@dataclass(frozen=True)
class Deadline:
    """A moment after which a stage stops and returns what it has."""

    at: float
    """``time.perf_counter()`` value of the deadline."""

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.perf_counter() + max(0.0, seconds))

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at - time.perf_counter())

    def expired(self) -> bool:
        return time.perf_counter() >= self.at

    def check(self) -> None:
        """``DeadlinePassed`` once the deadline has passed."""
        if self.expired():
            raise DeadlinePassed

    def share(self, fraction: float) -> Deadline:
        """A deadline ``fraction`` of the remaining time from now (never later than this one)."""
        return Deadline(time.perf_counter() + self.remaining() * min(1.0, max(0.0, fraction)))

    def earlier(self, other: Deadline | None) -> Deadline:
        """The sooner of two deadlines (``None``: this one)."""
        return self if other is None or self.at <= other.at else other
