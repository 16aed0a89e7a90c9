"""The heuristic's budget: a count of RPC-server combinations, a work budget and a safety stop.

GPUStack's distributed search tries every combination of up to ``max_rpc_servers`` candidate GPUs
(39,205 with 16 candidates and 8 servers). Here it stops after ``max_rpc_combinations`` of them, and
every search of the heuristic stops when its evaluations of a placement, the steps of its loops and
its views of the cluster have spent its work budget (``layerfit.budget.work``: a fixed cost each).
Both are counts, so the answer is the same on every run and every machine. The deadline is only a
safety stop: it stops the search when the machine is slower than the budget allows for, and the plan
says so. Each returns the best layouts found so far; ``truncated`` names the limit that was hit, and
the planner reports it in the heuristic's ``EngineStats``. ``max_rpc_combinations=None``, no work
budget and no deadline give the exhaustive search (the oracle the tests compare with).
"""

from __future__ import annotations

from dataclasses import dataclass

from layerfit.budget.deadline import Deadline
from layerfit.budget.work import heuristic_cost

RPC_COMBINATIONS = "rpc_combinations"
WORK = "work"
DEADLINE = "deadline"


@dataclass
class SearchBudget:
    """Mutable: what one heuristic run may still spend, and which limit stopped it."""

    deadline: Deadline | None = None
    """The safety stop."""
    max_rpc_combinations: int | None = None
    work_s: float | None = None
    """Nominal seconds the run may spend (``layerfit.budget.work.evaluations_cost``); ``None``: no limit."""
    gpus: int = 0
    """GPUs of the cluster, whose views the run pays for."""
    rpc_combinations: int = 0
    """RPC-server combinations evaluated so far."""
    steps: int = 0
    """Steps of the searches' loops so far (each checks the budget)."""
    truncated: str = ""
    """``""`` (no limit hit), ``"rpc_combinations"``, ``"work"`` or ``"deadline"`` (the safety stop)."""

    def in_time(self, evaluations: int) -> bool:
        """False (and the run marked truncated) once ``evaluations`` have spent the work budget or
        the deadline has passed; the work budget is checked first, so a run the clock did not
        stop earlier stops where it does on an idle machine."""
        if self.truncated:
            return False
        self.steps += 1
        if self.work_s is not None and self.spent(evaluations) > self.work_s:
            self.truncated = WORK
        elif self.deadline is not None and self.deadline.expired():
            self.truncated = DEADLINE
        return not self.truncated

    def spent(self, evaluations: int) -> float:
        """Nominal seconds the run has spent, having made ``evaluations``."""
        return heuristic_cost(evaluations, self.steps, self.gpus)

    def spend_rpc_combination(self, evaluations: int) -> bool:
        """Count one RPC combination; False when the budget is spent (nothing more may be tried)."""
        if not self.in_time(evaluations):
            return False
        if self.max_rpc_combinations is not None and self.rpc_combinations >= self.max_rpc_combinations:
            self.truncated = RPC_COMBINATIONS
            return False
        self.rpc_combinations += 1
        return True

    @property
    def stopped(self) -> bool:
        """The safety stop, not a count, ended the run."""
        return self.truncated == DEADLINE
