"""The heuristic's budget: a count of RPC-server combinations and a deadline.

GPUStack's distributed search tries every combination of up to ``max_rpc_servers`` candidate GPUs
(39,205 with 16 candidates and 8 servers). Here it stops after ``max_rpc_combinations`` of them
(a count, so the answer is the same on every run and every machine) or at the deadline, whichever
comes first, and returns the best layouts found so far. ``truncated`` names the limit that was
hit; the planner reports it in the heuristic's ``EngineStats``. ``max_rpc_combinations=None`` and
no deadline give the exhaustive search (the oracle the tests compare with).
"""

from __future__ import annotations

from dataclasses import dataclass

from layerfit.deadline import Deadline

RPC_COMBINATIONS = "rpc_combinations"
DEADLINE = "deadline"


@dataclass
class SearchBudget:
    """Mutable: what one heuristic run may still spend, and which limit stopped it."""

    deadline: Deadline | None = None
    max_rpc_combinations: int | None = None
    rpc_combinations: int = 0
    """RPC-server combinations evaluated so far."""
    truncated: str = ""
    """``""`` (no limit hit), ``"rpc_combinations"`` or ``"deadline"``."""

    def in_time(self) -> bool:
        """False (and the run marked truncated) once the deadline has passed."""
        if self.deadline is not None and self.deadline.expired():
            self.truncated = self.truncated or DEADLINE
            return False
        return not self.truncated

    def spend_rpc_combination(self) -> bool:
        """Count one RPC combination; False when the budget is spent (nothing more may be tried)."""
        if not self.in_time():
            return False
        if self.max_rpc_combinations is not None and self.rpc_combinations >= self.max_rpc_combinations:
            self.truncated = RPC_COMBINATIONS
            return False
        self.rpc_combinations += 1
        return True
