"""plan(): GPUStack's strategy order over one deployment, first strategy with a candidate wins."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence

from layerfit.budget.deadline import Deadline
from layerfit.budget.heuristic import SearchBudget
from layerfit.budget.work import Work
from layerfit.check import check_layout
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import Objective, PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.plan import Candidate, EngineStats, Plan, Reason, ReasonKind, Status
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import InputError
from layerfit.heuristics import rules
from layerfit.heuristics.context import Context, build_context
from layerfit.heuristics.evaluate import Verdict
from layerfit.heuristics.notes import Action, Level, Note, requirement, sentences, shown_messages
from layerfit.heuristics.scoring import score
from layerfit.heuristics.speed_rank import fastest
from layerfit.heuristics.strategies import SPEED_STRATEGIES, STRATEGIES, Strategy
from layerfit.memory import claims

ENGINE = "heuristic"


def plan(
    cluster: Cluster,
    deployment: Deployment,
    config: PlannerConfig = PlannerConfig(),
    profile: MemoryProfile | None = None,
    *,
    deadline: Deadline | None = None,
    work: Work | None = None,
) -> Plan:
    """Place one deployment the way GPUStack's GGUF selector would, with layerfit's memory model.

    Returns a FEASIBLE plan (best candidate of the first strategy that has one, plus up to
    ``config.alternatives`` equally good ones by score; under ``objective: speed`` the fastest of
    every strategy's, ``speed_rank``) or an INFEASIBLE plan with typed reasons and GPUStack-style
    messages. ``profile`` defaults to the deployment's estimated profile.
    The searches stop after ``config.max_rpc_combinations`` RPC combinations or when their
    evaluations have spent ``work`` (default: ``Work.of(config.time_limit_s)``), which is charged
    for them, with their best so far; the stats' ``truncated`` detail then names the limit. The
    wall clock (``deadline``, or ``work``'s, whichever is sooner) is only a safety stop, named in
    ``safety_stops`` when it fires.
    """
    started = time.perf_counter()
    work = work if work is not None else Work.of(config.time_limit_s, deadline)
    gpus = sum(len(worker.gpus) for worker in cluster.workers)
    budget = SearchBudget(
        deadline=work.deadline.earlier(deadline),
        max_rpc_combinations=config.max_rpc_combinations,
        work_s=work.left(),
        gpus=gpus,
    )
    selection, reasons = rules.selection_in_force(deployment)
    ctx = build_context(cluster, deployment, resolve_profile(deployment, profile), config, selection, budget)
    resources_checked = _reached(ctx, rules.RESOURCE_RULES)
    pre = rules.precheck(ctx, resources_checked, _reached(ctx, rules.GPU_PRESENCE_RULES))
    all_reasons: list[Reason] = [*reasons, *pre.reasons]
    notes: list[Note] = list(pre.notes)
    winner: Strategy | None = None
    candidates: tuple[Candidate, ...] = ()
    found_count = 0
    by_speed = config.objective_for(deployment) is Objective.SPEED
    pooled: list[tuple[Strategy, Verdict]] = []
    if not any(note.level is Level.ERROR for note in notes):
        for strategy in SPEED_STRATEGIES if by_speed else STRATEGIES:
            skip = rules.first_skip(ctx, strategy.action, strategy.skip_rules)
            if skip is not None:
                all_reasons.append(skip.reason)
                notes.extend(skip.notes)
                continue
            result = strategy.search(ctx)
            all_reasons.extend(result.reasons)
            notes.extend(result.notes)
            if by_speed:  # every strategy's layouts, ranked together below (``speed_rank``)
                pooled.extend((strategy, verdict) for verdict in result.found)
                continue
            candidates, dropped = _candidates(ctx, strategy, result.found)
            all_reasons.extend(dropped)
            if candidates:
                winner, found_count = strategy, len(result.found)
                break
        if by_speed:
            candidates, dropped, winner = fastest(ctx, pooled)
            all_reasons.extend(dropped)
            found_count = len(pooled)
    if not candidates:
        notes.extend(_fallback(ctx, notes))
        meets = " and meets min_decode_tokens_per_s" if ctx.deployment.min_decode_tokens_per_s is not None else ""
        all_reasons.append(Reason(kind=ReasonKind.NO_CANDIDATE, message=f"no strategy found a layout that fits{meets}"))
    status = Status.FEASIBLE if candidates else Status.INFEASIBLE
    spent = budget.spent(ctx.evaluator.evaluations)
    work.spend(spent)
    stats = EngineStats(
        engine=ENGINE,
        wall_time_s=time.perf_counter() - started,
        status=status,
        details={
            "strategy": "" if winner is None else winner.action.value,
            "candidates": found_count,
            "evaluations": ctx.evaluator.evaluations,
            "claims_computed": ctx.evaluator.claims_computed,
            "rpc_combinations": budget.rpc_combinations,
            "truncated": budget.truncated,
            "work_s": round(spent, 6),
        },
        safety_stops=(budget.truncated,) if budget.stopped else (),
    )
    return Plan(
        deployment=deployment.name,
        status=status,
        best=candidates[0] if candidates else None,
        alternatives=candidates[1:],
        reasons=tuple(all_reasons),
        messages=shown_messages(notes, bool(candidates)),
        stats=(stats,),
    )


def _reached(ctx: Context, unchecked: tuple[rules.SkipRule, ...]) -> bool:
    """Some strategy passes every skip rule but ``unchecked``: GPUStack's checks up to that point."""
    return any(
        rules.first_skip(ctx, strategy.action, tuple(r for r in strategy.skip_rules if r not in unchecked)) is None
        for strategy in STRATEGIES
    )


def resolve_profile(deployment: Deployment, profile: MemoryProfile | None) -> MemoryProfile:
    """The profile to plan with: the argument, the estimator's, or the deployment's own."""
    if profile is not None:
        return profile
    estimate = _estimator()
    if estimate is not None:
        return estimate(deployment)
    if deployment.profile is not None:
        return deployment.profile
    problem = "no memory profile: give one, or a gguf_path to estimate"
    raise InputError(f"deployment[{deployment.name}].profile", problem)


def _estimator() -> Callable[[Deployment], MemoryProfile] | None:
    module = importlib.import_module("layerfit.estimators")
    estimate: Callable[[Deployment], MemoryProfile] | None = getattr(module, "profile_for", None)
    return estimate


def _candidates(
    ctx: Context, strategy: Strategy, found: Sequence[Verdict]
) -> tuple[tuple[Candidate, ...], tuple[Reason, ...]]:
    """The best-scored verdicts as candidates (best first, ties in search order), each checked."""
    policy = ctx.config.policy
    ranked = sorted(((score(verdict, policy), verdict) for verdict in found), key=lambda pair: -pair[0])
    wanted = 1 + ctx.config.alternatives
    candidates: list[Candidate] = []
    dropped: list[Reason] = []
    for value, verdict in ranked:
        if len(candidates) == wanted:
            break
        layout = ctx.evaluator.layout(verdict.placement, verdict.n_gpu_layers)
        problems = check_layout(ctx.cluster, ctx.deployment, ctx.profile, layout, ctx.config)
        if problems:
            dropped.extend(reason.model_copy(update={"strategy": strategy.action.value}) for reason in problems)
            continue
        needed = ctx.evaluator.claims(layout, ctx.unified_workers)
        candidates.append(Candidate(layout=layout, claims=needed, strategy=strategy.kind, score=value))
    return tuple(candidates), tuple(dropped)


def _fallback(ctx: Context, notes: Sequence[Note]) -> tuple[Note, ...]:
    """GPUStack's last word when nothing fits and no strategy explained why."""
    if notes:
        return ()
    full = claims(ctx.profile, ctx.evaluator.shape(ctx.n_layers, (1.0,)))
    what = (
        "Selected GPUs do not meet the requirements to run the model."
        if ctx.deployment.gpu_selection is not None
        else "Cannot find a suitable worker combination to run the model."
    )
    text = sentences(requirement(full.total_vram_bytes, full.total_ram_bytes), what)
    return (Note(Level.ERROR, Action.PRE_CHECK, text),)
