"""The explain stage's work budget, split evenly over the relaxed plans it makes."""

from __future__ import annotations

from dataclasses import dataclass

from layerfit.budget.work import Work
from layerfit.domain.plan import Status

SCAN_LAYOUT_S = 250e-6
"""Nominal cost of checking one layout of the memory-to-free scan (``layerfit.budget.work``): about
210 us on 1,024 GPUs of 128 workers."""
WORK = "work"
DEADLINE = "deadline"
SPEED_PLANS = 5
"""The plans of the speed part: the fastest layout that fits, the lowered minimum, fewer experts on
the host (two) and a faster GPU."""
MIN_CTX = 256
"""The context sizes the ctx bisection tries are multiples of this (llama.cpp pads to it)."""


@dataclass
class ExplainBudget:
    """The explain stage's work budget (``layerfit.budget.work``), split evenly over the plans it will make.

    ``next_work()`` gives the next relaxed plan its share (the work left over the plans still to
    come), or ``None`` once the work is spent or the safety stop has fired; a plan cut short
    (UNKNOWN) or a missing share marks the stage ``truncated`` (``work``, or ``deadline`` when the
    wall clock cut it: ``safety_stops``). The memory-to-free scan pays ``SCAN_LAYOUT_S`` a layout.
    """

    work: Work
    ctx_size: int
    speed_plans: int = 0
    """The plans of the speed part (a deployment with ``min_decode_tokens_per_s``: ``SPEED_PLANS``)."""
    plans: int = 0
    truncated: str = ""

    @property
    def expected_plans(self) -> int:
        """Two switches and the ctx bisection's steps, and one slice for the scan of memory to free
        (a MoE model's two plans of experts on the host share what is left), and the speed part's."""
        return 3 + max(1, (self.ctx_size // MIN_CTX).bit_length()) + self.speed_plans

    @property
    def safety_stops(self) -> tuple[str, ...]:
        return (DEADLINE,) if self.truncated == DEADLINE else ()

    def _cut(self, limit: str) -> None:
        if not self.truncated or limit == DEADLINE:
            self.truncated = limit

    def _limit_hit(self) -> bool:
        """The work spent (checked first: the same on every run) or the safety stop fired; marks the cut."""
        if self.work.left() <= 0:
            self._cut(WORK)
        elif self.work.expired():
            self._cut(DEADLINE)
        else:
            return False
        return True

    def next_work(self) -> Work | None:
        if self._limit_hit():
            return None
        self.plans += 1
        return self.work.part(self.work.left() / max(1, self.expected_plans - self.plans + 1))

    def saw(self, status: Status, *, stopped: bool = False) -> None:
        """A relaxed plan's status; ``stopped``: the wall clock cut it."""
        if stopped:
            self._cut(DEADLINE)
        elif status is Status.UNKNOWN:
            self._cut(WORK)

    def next_layout(self) -> bool:
        """Whether the scan may check one more layout (and pay for it)."""
        if self._limit_hit():
            return False
        self.work.spend(SCAN_LAYOUT_S)
        return True
