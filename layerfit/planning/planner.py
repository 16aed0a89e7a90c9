"""plan(): heuristic -> hint -> CP-SAT -> check, for one deployment; evaluate(): a given layout."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from layerfit.budget.deadline import Deadline
from layerfit.budget.work import Work
from layerfit.check import check_layout, device_cap_reasons, reference_reasons, unified_workers
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.plan import (
    BEYOND_HARDWARE,
    Candidate,
    Command,
    EngineStats,
    Plan,
    Reason,
    ReasonKind,
    Relaxation,
    Severity,
    SpeedShortfall,
    Status,
    strategy_class,
)
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import InputError, SolverError, expect
from layerfit.llamacpp.launch import check_deployment_flags, commands
from layerfit.memory import claims
from layerfit.memory.experts import (
    attach,
    expertless_blocks,
    experts_are_a_decision,
    with_host_experts,
)
from layerfit.planning.device_cap import device_cap_reason
from layerfit.planning.profiles import profile_at_ctx, resolve_profile, scaled_to_ctx
from layerfit.planning.rule_reasons import slow_reason, stranded_experts
from layerfit.planning.speed import with_speed
from layerfit.planning.usage import use_of
from layerfit.speed.deployment import deployment_speed

if TYPE_CHECKING:
    from layerfit.solver import SolveResult

HEURISTIC_SHARE = 0.25
"""Share of the work budget the heuristic may spend before the solver starts, ..."""
HEURISTIC_SAFETY_SHARE = 0.75
"""... and the share of the time limit after which its safety stop fires (on case A of
``benchmarks/time_bounds.py`` a fresh process's heuristic took 3x its nominal seconds: its
layer shapes are cached after the first plan)."""
MIN_SOLVER_WORK_S = 0.05
"""The solver is not started with less work left (nominal seconds; building its model alone can
take that long on large clusters); the heuristic's answer stands and the solver's stats say
``truncated`` (``work``)."""
MIN_SOLVER_TIME_S = 0.1
"""Nor with less time left before the safety stop (``truncated`` and ``safety_stops``: ``deadline``)."""
MIN_CTX_STEP_S = 0.03
"""The least work budget of one plan of a context search (nominal seconds)."""


def model_path(deployment: Deployment) -> str:
    """The path to put after ``-m``; a placeholder when the deployment came with a profile only."""
    return deployment.gguf_path if deployment.gguf_path is not None else f"{deployment.name}.gguf"


def deployment_commands(
    cluster: Cluster,
    layout: Layout,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    server_args: tuple[str, ...] = (),
) -> tuple[Command, ...]:
    """The launch commands that run ``deployment`` as ``layout``: its model path, flags and kind."""
    return commands(
        cluster,
        layout,
        model_path(deployment),
        deployment.params,
        config,
        expertless_blocks=expertless_blocks(profile),
        server_args=server_args,
        kind=deployment.kind,
    )


def _expect_arguments(cluster: Cluster, deployment: Deployment, config: PlannerConfig, profile: object) -> None:
    """The Python API's arguments of one plan, refused by name when of the wrong type."""
    expect(cluster, Cluster, "cluster")
    expect(deployment, Deployment, "deployment")
    expect(config, PlannerConfig, "config")
    expect(profile, (MemoryProfile, type(None)), "profile")


def evaluate(
    cluster: Cluster,
    deployment: Deployment,
    layout: Layout,
    config: PlannerConfig = PlannerConfig(),
    profile: MemoryProfile | None = None,
) -> Plan:
    """A plan for a layout chosen elsewhere: its claims, every violation, and the command lines.
    A layout that names a worker or GPU the cluster lacks, or that has more devices than llama.cpp
    runs in one process, is bad input (``InputError``)."""
    started = time.perf_counter()
    _expect_arguments(cluster, deployment, config, profile)
    expect(layout, Layout, "layout")
    check_deployment_flags(deployment, config)
    unknown = (*reference_reasons(cluster, layout), *device_cap_reasons(layout))
    if unknown:
        raise InputError("layout", "; ".join(reason.message for reason in unknown))
    profile = profile if profile is not None else resolve_profile(deployment)
    if layout.n_blocks != profile.n_blocks:
        raise InputError("layout.n_blocks", f"layout has {layout.n_blocks} blocks, the model has {profile.n_blocks}")
    reasons = check_layout(cluster, deployment, profile, layout, config)
    candidate = Candidate(
        layout=layout,
        claims=claims(profile, layout, unified_workers(cluster)),
        strategy=strategy_class(layout),
        speed=deployment_speed(cluster, deployment, profile, layout),
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
        commands=() if reasons else deployment_commands(cluster, layout, deployment, profile, config),
        **use_of(cluster, layout, candidate.claims),
    )


def plan(
    cluster: Cluster,
    deployment: Deployment,
    config: PlannerConfig = PlannerConfig(),
    profile: MemoryProfile | None = None,
    *,
    explain: bool = True,
    deadline: Deadline | None = None,
    work: Work | None = None,
) -> Plan:
    """The best layout for one deployment: heuristic -> hint -> CP-SAT -> check.

    The heuristic (GPUStack's strategy order) answers first and hints the solver. The solver's answer
    wins when it has one; on UNKNOWN (time limit without a solution) the heuristic's plan is kept.
    Every returned candidate passes ``check``; a violation here is a bug and raises ``SolverError``.
    When nothing fits, the reasons say what is short and where, and (with ``explain``) the
    relaxations list the smallest changes that would make it fit.

    Time: every stage that can be cut short stops on a work budget (``layerfit.budget.work``), the same on
    every run: ``WORK_SHARE`` x ``config.time_limit_s`` nominal seconds (or ``work``, for a plan
    inside another). The heuristic may spend ``HEURISTIC_SHARE`` of it, the solver (alternatives
    included) what is left (it is not started with less than ``MIN_SOLVER_WORK_S``), the
    relaxations of ``explain`` what the solver left; each relaxed plan gets its share of what is
    left. The wall clock (``config.time_limit_s``, or ``deadline`` when sooner) is only a safety
    stop: a stage it cuts says so in ``safety_stops`` (``time_cuts``), and only then may the same
    input give another plan. Beyond the budget come only steps that are not interrupted: building
    one worker's part of the solver instance or a CP-SAT model, checking the returned layouts, one
    heuristic step (the heuristic's views of the cluster: about 0.1 s on 1,024 GPUs) and, for
    ``explain``, one layout of the memory-to-free scan; and before the clock starts, loading
    OR-Tools on a process's first plan (about 0.5 s). ``benchmarks/time_bounds.py`` measures the
    total against the limit; it allows 0.75 s beyond it. A stage that hit a limit says so in its
    ``EngineStats`` (``truncated`` in its details).
    """
    from layerfit.io.files import reading_once

    _expect_arguments(cluster, deployment, config, profile)
    expect(deadline, (Deadline, type(None)), "deadline")
    if work is None:
        check_deployment_flags(deployment, config)  # refused before OR-Tools loads
        from layerfit import solver  # noqa: F401  OR-Tools, ~0.5 s on first use: before the clock starts

        work = Work.of(config.time_limit_s, deadline)
    elif deadline is not None:
        work = work.part(work.left(), deadline)
    with reading_once():  # the context search and explain's relaxed plans estimate one model many times
        return _plan(cluster, deployment, config, profile, explain=explain, work=work)


def _plan(
    cluster: Cluster,
    deployment: Deployment,
    config: PlannerConfig,
    profile: MemoryProfile | None,
    *,
    explain: bool,
    work: Work,
) -> Plan:
    check_deployment_flags(deployment, config)  # a flag the build cannot take: refused before the search
    if deployment.has_ctx_range:
        return _plan_ctx_range(cluster, deployment, config, profile, explain=explain, work=work)
    from layerfit.heuristics.moe import plan_with_experts, stand_in

    profile = profile if profile is not None else resolve_profile(deployment)
    heuristic = work.part(work.left() * HEURISTIC_SHARE, work.deadline.share(HEURISTIC_SAFETY_SHARE))
    quick, fixed = plan_with_experts(cluster, deployment, config, profile, work=heuristic)
    # The solver places experts itself when that is a decision; otherwise it plans over the
    # heuristic's (or the user's) choice, as a dense stand-in profile.
    decided = experts_are_a_decision(deployment, profile, config)
    engine_profile = profile if decided else stand_in(deployment, profile, fixed)
    hint = quick.layout if quick.layout is None or not decided else with_host_experts(quick.layout, fixed)
    # experts the user keeps in host RAM need CPU offloading: with it off no layout keeps the rules
    # (the stand-in profile cannot say so to the solver)
    stranded = stranded_experts(deployment, fixed)
    result = None if stranded else _solve(cluster, deployment, engine_profile, config, hint, work)
    stats = (*quick.stats, *(() if result is None else (result.stats,)))
    attach_fixed = bool(fixed)
    if result is not None and result.best is not None:
        best, alternatives, status = result.best, result.alternatives, result.status
        attach_fixed = attach_fixed and not decided
    elif quick.best is not None and not stranded:
        best, alternatives, status = quick.best, quick.alternatives, Status.FEASIBLE
    else:
        status = Status.INFEASIBLE if result is None or result.status is Status.INFEASIBLE else Status.UNKNOWN
        found, slow, explained = relaxations(cluster, deployment, profile, config, explain=explain, work=work)
        reasons = with_device_cap(cluster, deployment, config, profile, (*stranded, *quick.reasons))
        return Plan(
            deployment=deployment.name,
            status=status,
            reasons=reasons if slow is None else (slow_reason(slow), *reasons),
            # GPUStack's advice names the memory the model needs: not the problem when it is too slow
            messages=quick.messages if slow is None else (),
            stats=(*stats, *explained),
            relaxations=found,
            too_slow=slow,
        )
    if attach_fixed:
        unified = unified_workers(cluster)
        attached = [with_experts(profile, candidate, fixed, unified) for candidate in (best, *alternatives)]
        best, alternatives = attached[0], tuple(attached[1:])
    _assert_valid(cluster, deployment, profile, config, (best, *alternatives))
    best, *rest = with_speed(cluster, deployment, profile, (best, *alternatives))
    return Plan(
        deployment=deployment.name,
        status=status,
        best=best,
        alternatives=tuple(rest),
        reasons=tuple(reason for reason in quick.reasons if reason.severity is not Severity.ERROR),
        stats=stats,
        commands=deployment_commands(cluster, best.layout, deployment, profile, config),
        **use_of(cluster, best.layout, best.claims),
    )


def _solve(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    hint: Layout | None,
    work: Work,
) -> SolveResult:
    """The solver's answer with the work left, or ``not_run`` when too little work or time is left."""
    from layerfit import solver
    from layerfit.solver.search.trace import WORK

    if work.left() < MIN_SOLVER_WORK_S:
        return solver.not_run(deployment, limit=WORK)
    if work.deadline.remaining() < MIN_SOLVER_TIME_S:
        return solver.not_run(deployment)
    return solver.solve(cluster, deployment, profile, config, hint=hint, work=work.part(work.left()))


def with_device_cap(
    cluster: Cluster, deployment: Deployment, config: PlannerConfig, profile: MemoryProfile, reasons: tuple[Reason, ...]
) -> tuple[Reason, ...]:
    """A failed plan's reasons, with llama.cpp's device limit named when it cut the search and no
    dropped layout already names it (``layerfit.planning.device_cap``)."""
    if any(reason.kind is ReasonKind.TOO_MANY_DEVICES for reason in reasons):
        return reasons
    capped = device_cap_reason(cluster, deployment, config, profile.n_layers)
    return reasons if capped is None else (*reasons, capped)


def _plan_ctx_range(
    cluster: Cluster,
    deployment: Deployment,
    config: PlannerConfig,
    profile: MemoryProfile | None,
    *,
    explain: bool,
    work: Work,
) -> Plan:
    """``plan`` for a deployment whose context is a range (``layerfit.planning.context_range``): each plan of its
    search gets an equal share of ``work`` (at least ``MIN_CTX_STEP_S``), charged to it."""
    from layerfit.planning.context_range import ctx_bounds, ctx_candidates, plan_context

    training = None
    if deployment.gguf_path is not None:
        from layerfit.estimators.shape import read_gguf

        training = read_gguf(deployment.gguf_path).context_length
    bounds = ctx_bounds(deployment, training)
    if bounds is None:
        raise InputError(f"deployment[{deployment.name}]", "has no context range")
    values = ctx_candidates(*bounds)
    steps = 2 + max(1, len(values)).bit_length()
    fixed_base = deployment.model_copy(update={"ctx_auto": False, "ctx_min": None, "ctx_max": None})
    step_s = max(work.left() / steps, MIN_CTX_STEP_S)

    def plan_at(_: Deployment, ctx: int, with_explain: bool) -> Plan:
        params = deployment.params.model_copy(update={"ctx_size": ctx})
        at_ctx = profile_at_ctx(deployment, ctx) if profile is None else scaled_to_ctx(profile, deployment, ctx)
        # an explicit profile at this context: explain's smaller contexts scale it from here
        given = {} if deployment.profile is None else {"profile": at_ctx}
        fixed = fixed_base.model_copy(update={"params": params, **given})
        step = Work(step_s, work.deadline, parent=work)  # its own share, whatever the others spent
        return plan(cluster, fixed, config, at_ctx, explain=explain and with_explain, work=step)

    reference = profile if profile is not None else profile_at_ctx(deployment, values[0])
    return plan_context(deployment, values, plan_at, reference)


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


def relaxations(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    *,
    explain: bool,
    work: Work | None = None,
) -> tuple[tuple[Relaxation, ...], SpeedShortfall | None, tuple[EngineStats, ...]]:
    """The smallest single changes that place an unplaceable deployment (empty unless ``explain``;
    each re-planned with the change: ``layerfit.planning.explain``), what the fastest layout that
    fits reaches when only the minimum speed stops it (``SpeedShortfall``), found within ``work`` (default
    ``Work.of(config.time_limit_s)``), and the explain stage's stats: ``feasible`` when a change
    places it, ``infeasible`` when none does (what the hardware lacks, ``BEYOND_HARDWARE``, is no
    change), ``unknown`` and ``truncated`` when a limit cut it (a change found may then not be the
    smallest, and some may be missing; ``safety_stops`` when that limit was the wall clock);
    ``changes`` counts them."""
    if not explain:
        return (), None, ()
    from layerfit.planning.explain import SPEED_PLANS, ExplainBudget, explanation

    started = time.perf_counter()
    work = work if work is not None else Work.of(config.time_limit_s)
    speed_plans = 0 if deployment.min_decode_tokens_per_s is None else SPEED_PLANS
    budget = ExplainBudget(work.part(work.left()), deployment.params.effective_ctx_size, speed_plans)

    def quiet_plan(c: Cluster, d: Deployment, cfg: PlannerConfig, p: MemoryProfile) -> Plan:
        share = budget.next_work()
        if share is None:
            return Plan(deployment=d.name, status=Status.UNKNOWN)
        answer = plan(c, d, cfg, p, explain=False, work=share)
        budget.saw(answer.status, stopped=bool(answer.time_cuts))
        return answer

    found, slow = explanation(cluster, deployment, profile, config, quiet_plan, resolve_profile, budget=budget)
    changes = sum(relaxation.kind not in BEYOND_HARDWARE for relaxation in found)
    stats = EngineStats(
        engine="explain",
        wall_time_s=time.perf_counter() - started,
        status=Status.UNKNOWN if budget.truncated else Status.FEASIBLE if changes else Status.INFEASIBLE,
        details={"plans": budget.plans, "changes": changes, "truncated": budget.truncated},
        safety_stops=budget.safety_stops,
    )
    return found, slow, (stats,)
