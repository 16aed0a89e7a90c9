"""plan(): heuristic -> hint -> CP-SAT -> check, for one deployment; evaluate(): a given layout."""

from __future__ import annotations

import time

from layerfit.check import check_layout, unified_workers
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Candidate, EngineStats, Plan, Relaxation, Severity, Status, strategy_class
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import InputError, SolverError
from layerfit.experts import attach, engine_blocks, profile_with_host_experts
from layerfit.launch import commands
from layerfit.memory import claims


def resolve_profile(deployment: Deployment) -> MemoryProfile:
    """The deployment's memory profile: given explicitly, or estimated from its GGUF file."""
    if deployment.profile is not None:
        return deployment.profile
    from layerfit.estimators import profile_for

    return profile_for(deployment)


def model_path(deployment: Deployment) -> str:
    """The path to put after ``-m``; a placeholder when the deployment came with a profile only."""
    return deployment.gguf_path if deployment.gguf_path is not None else f"{deployment.name}.gguf"


def evaluate(
    cluster: Cluster,
    deployment: Deployment,
    layout: Layout,
    config: PlannerConfig = PlannerConfig(),
    profile: MemoryProfile | None = None,
) -> Plan:
    """A plan for a layout chosen elsewhere: its claims, every violation, and the command lines."""
    started = time.perf_counter()
    profile = profile if profile is not None else resolve_profile(deployment)
    if layout.n_blocks != profile.n_blocks:
        raise InputError("layout.n_blocks", f"layout has {layout.n_blocks} blocks, the model has {profile.n_blocks}")
    reasons = check_layout(cluster, deployment, profile, layout, config)
    candidate = Candidate(
        layout=layout,
        claims=claims(profile, layout, unified_workers(cluster)),
        strategy=strategy_class(layout),
    )
    status = Status.INFEASIBLE if reasons else Status.FEASIBLE
    stats = EngineStats(engine="evaluate", wall_time_s=time.perf_counter() - started, status=status)
    return Plan(
        deployment=deployment.name,
        status=status,
        best=candidate,
        reasons=reasons,
        messages=tuple(reason.message for reason in reasons),
        stats=(stats,),
        commands=commands(cluster, layout, model_path(deployment), deployment.params, config),
    )


def plan(
    cluster: Cluster,
    deployment: Deployment,
    config: PlannerConfig = PlannerConfig(),
    profile: MemoryProfile | None = None,
    *,
    explain: bool = True,
) -> Plan:
    """The best layout for one deployment: heuristic -> hint -> CP-SAT -> check.

    The heuristic (GPUStack's strategy order) answers first and hints the solver. The solver's answer
    wins when it has one; on UNKNOWN (time limit without a solution) the heuristic's plan is kept.
    Every returned candidate passes ``check``; a violation here is a bug and raises ``SolverError``.
    When nothing fits, the reasons say what is short and where, and (with ``explain``) the
    relaxations list the smallest changes that would make it fit.
    """
    from layerfit import heuristics, solver

    profile = profile if profile is not None else resolve_profile(deployment)
    fixed = engine_blocks(profile)
    engine_profile = profile_with_host_experts(profile, fixed)
    quick = heuristics.plan(cluster, deployment, config, engine_profile)
    result = solver.solve(cluster, deployment, engine_profile, config, hint=quick.layout)
    stats = (*quick.stats, result.stats)
    if result.best is not None:
        best, alternatives, status = result.best, result.alternatives, result.status
    elif quick.best is not None:
        best, alternatives, status = quick.best, quick.alternatives, Status.FEASIBLE
    else:
        status = Status.INFEASIBLE if result.status is Status.INFEASIBLE else Status.UNKNOWN
        found = relaxations(cluster, deployment, profile, config, explain=explain)
        return Plan(
            deployment=deployment.name,
            status=status,
            reasons=quick.reasons,
            messages=quick.messages,
            stats=stats,
            relaxations=found,
        )
    if fixed:
        unified = unified_workers(cluster)
        attached = [with_experts(profile, candidate, fixed, unified) for candidate in (best, *alternatives)]
        best, alternatives = attached[0], tuple(attached[1:])
    _assert_valid(cluster, deployment, profile, config, (best, *alternatives))
    return Plan(
        deployment=deployment.name,
        status=status,
        best=best,
        alternatives=tuple(alternatives),
        reasons=tuple(reason for reason in quick.reasons if reason.severity is not Severity.ERROR),
        stats=stats,
        commands=commands(cluster, best.layout, model_path(deployment), deployment.params, config),
    )


def with_experts(
    profile: MemoryProfile, candidate: Candidate, blocks: tuple[int, ...], unified: frozenset[str]
) -> Candidate:
    """A candidate planned with these blocks' experts on the host, named and priced for real."""
    layout, needed = attach(profile, candidate.layout, blocks, unified)
    return candidate.model_copy(update={"layout": layout, "claims": needed})


def _assert_valid(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    candidates: tuple[Candidate, ...],
) -> None:
    for candidate in candidates:
        violations = check_layout(cluster, deployment, profile, candidate.layout, config)
        if violations:
            details = "; ".join(reason.message for reason in violations)
            raise SolverError(f"deployment {deployment.name}: an engine returned an invalid layout: {details}")


def profile_at_ctx(deployment: Deployment, ctx_size: int) -> MemoryProfile:
    """The deployment's profile at another context size.

    Exact (re-estimated) for a GGUF file; for an explicit profile the KV cache is scaled linearly
    with ctx, which is right for full-attention layers and conservative for sliding-window ones.
    """
    params = deployment.params.model_copy(update={"ctx_size": ctx_size})
    if deployment.gguf_path is not None:
        return resolve_profile(deployment.model_copy(update={"params": params}))
    if deployment.profile is None:
        raise InputError(f"deployment[{deployment.name}]", "has neither gguf_path nor profile")
    base = deployment.params.effective_ctx_size
    kv = tuple(-(-size * ctx_size // base) for size in deployment.profile.block_kv_bytes)
    return deployment.profile.model_copy(update={"block_kv_bytes": kv})


def relaxations(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, *, explain: bool
) -> tuple[Relaxation, ...]:
    """The smallest changes that would make an unplaceable deployment fit (empty unless ``explain``)."""
    if not explain:
        return ()
    from layerfit.explain import relaxations as find

    def quiet_plan(c: Cluster, d: Deployment, cfg: PlannerConfig, p: MemoryProfile) -> Plan:
        return plan(c, d, cfg, p, explain=False)

    return find(cluster, deployment, profile, config, quiet_plan, lambda ctx: profile_at_ctx(deployment, ctx))
