"""Candidates the solver returns, and the heuristic's layout as the incumbent the search must beat.

A valid hint (it passes ``check``) is an answer before any model is built: every search starts
from it, its strict tiers bound the search from below, and whatever CP-SAT does (a time limit, a
fault), the solver never returns less than this layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerfit.check import check_layout, unified_workers
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Candidate, strategy_class
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import SolverError
from layerfit.memory import claims
from layerfit.solver.model.objective import placement_score

TierKey = tuple[int, int, int]
"""``(layers, -workers, -gpus)``: higher is better on the strict tiers."""


def tier_key(layout: Layout) -> TierKey:
    return (layout.gpu_layers, -len(layout.workers), -len(layout.devices))


def candidate_of(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, layout: Layout
) -> Candidate:
    """A layout known to be valid with its claims and tie-break score."""
    needed = claims(profile, layout, unified_workers(cluster))
    return Candidate(
        layout=layout,
        claims=needed,
        strategy=strategy_class(layout),
        score=placement_score(cluster, config.policy, layout, needed),
    )


def checked_candidate(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, layout: Layout
) -> Candidate:
    """The solver's layout, checked again in bytes: a violation here is a bug (``SolverError``)."""
    violations = check_layout(cluster, deployment, profile, layout, config)
    if violations:
        details = "; ".join(reason.message for reason in violations)
        raise SolverError(f"deployment {deployment.name}: the solver's layout breaks the rules: {details}")
    return candidate_of(cluster, deployment, profile, config, layout)


@dataclass(frozen=True)
class Incumbent:
    """A valid layout known before the search, with its strict tiers."""

    candidate: Candidate

    @property
    def layout(self) -> Layout:
        return self.candidate.layout

    @property
    def key(self) -> TierKey:
        return tier_key(self.layout)

    @property
    def layers(self) -> int:
        return self.layout.gpu_layers

    @property
    def workers(self) -> int:
        return len(self.layout.workers)

    @property
    def gpus(self) -> int:
        return len(self.layout.devices)


def incumbent_of(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, hint: Layout | None
) -> Incumbent | None:
    """The hint as an incumbent when it passes ``check``; ``None`` for no hint or an invalid one."""
    if hint is None or hint.n_blocks != profile.n_blocks:
        return None
    if check_layout(cluster, deployment, profile, hint, config):
        return None
    return Incumbent(candidate=candidate_of(cluster, deployment, profile, config, hint))
