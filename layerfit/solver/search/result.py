"""What a solve returns."""

from __future__ import annotations

from pydantic import Field

from layerfit.domain.base import Frozen, NonNegInt
from layerfit.domain.plan import Candidate, EngineStats, Status


class TierValues(Frozen):
    """The objective tiers of the best layout, in the order of ``docs/design.md``."""

    gpu_layers: NonNegInt
    expert_blocks_on_gpus: NonNegInt | None = None
    """Blocks whose experts are on GPUs, when the solver placed experts (``expert_search``)."""
    workers: NonNegInt
    gpus: NonNegInt
    tie_break: float
    """The policy's tie-break in MiB, higher is better (see ``objective.placement_score``)."""
    decode_us: NonNegInt | None = None
    """Under ``objective: speed``: the decode time per token in the model's units (whole
    microseconds, ``solver.model.speed_costs``), the first tier."""


class SolveResult(Frozen):
    """The solver's answer for one deployment.

    ``status`` is OPTIMAL when every tier, tie-break included, is proven best; FEASIBLE when a time
    limit stopped a stage (``bound`` then says how far the strict tiers could still improve);
    INFEASIBLE when no layout satisfies the rules; UNKNOWN when no layout was found in time.
    """

    deployment: str
    status: Status
    best: Candidate | None = None
    alternatives: tuple[Candidate, ...] = ()
    """Other layouts as good on the strict tiers (layers, workers, GPUs), best tie-break first."""
    tiers: TierValues | None = None
    strict_optimal: bool = False
    """The strict tiers (layers, workers, GPUs) are proven best, even if the tie-break is not."""
    objective: float | None = None
    """Weighted strict tiers of the best layout (see ``objective.strict_tiers``)."""
    bound: float | None = None
    """Best proven bound on ``objective``."""
    wall_time_s: float = Field(ge=0)
    stats: EngineStats
