"""Alternatives: more layouts as good on the strict tiers, on other GPU sets, best tie-break first.

Each re-solve of the final model excludes the GPU sets (with their main worker) already returned,
until ``config.alternatives`` are found or no other exists: a count, not a share of the time, so
the set is reproducible (``truncated`` in the stats when the time limit cut it).
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.plan import Candidate
from layerfit.domain.profile import MemoryProfile
from layerfit.solver.build import BuiltModel
from layerfit.solver.candidates import checked_candidate
from layerfit.solver.objective import strict_tiers, tie_break
from layerfit.solver.progress import tie_break_measure
from layerfit.solver.runner import Run, run
from layerfit.solver.trace import Clock, SearchOutcome, Trace, stage_name
from layerfit.solver.variables import IntVar, Variables


def alternatives(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    outcome: SearchOutcome,
    clock: Clock,
    trace: Trace,
) -> tuple[Candidate, ...]:
    """Up to ``config.alternatives`` more layouts as good on the strict tiers, on other GPU sets,
    best tie-break first (the final model keeps the strict tiers fixed)."""
    built = outcome.built
    tiers = strict_tiers(built.instance, built.variables)
    for expression, value in (
        (tiers.layers, outcome.layers),
        (tiers.workers, outcome.workers),
        (tiers.gpus, outcome.gpus),
    ):
        built.model.add(expression == value)
    if not outcome.ranks_tie_break:
        built.model.minimize(tie_break(built.model, built.instance, built.variables, uses_gpus=outcome.gpus > 0))
    return alternatives_after(cluster, deployment, profile, config, built, outcome.best, clock, trace)


def alternatives_after(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    built: BuiltModel,
    previous: Run,
    clock: Clock,
    trace: Trace,
) -> tuple[Candidate, ...]:
    """Re-solves of a model whose strict tiers are fixed, each excluding the GPU sets found so far
    (``previous`` first), until ``config.alternatives`` are found or no other exists."""
    uses_gpus = any(previous.value(slot.used) for slot in built.variables.slots)
    measure = tie_break_measure(stage_name(built.instance, "alternative"), built.instance, uses_gpus=uses_gpus)
    found: list[Candidate] = []
    while len(found) < config.alternatives:
        if clock.remaining() <= 0:
            trace.truncated = "alternatives"
            break
        exclude(built.model, built.variables, previous)
        built.model.proto.clear_solution_hint()
        result = trace.record("alternative", run(built, config, clock.remaining(), measure))
        if not result.proven:
            trace.truncated = "alternatives"  # the time limit cut this solve: the set may differ next time
        if not result.found:
            break
        found.append(checked_candidate(cluster, deployment, profile, config, result.layout(built)))
        previous = result
    return tuple(found)


def exclude(model: cp_model.CpModel, variables: Variables, result: Run) -> None:
    """No-good cut: another main worker, or another multiset of GPU classes."""
    by_class: dict[int, list[IntVar]] = {}
    for slot in variables.slots:
        for c, assigned in slot.assign.items():
            by_class.setdefault(c, []).append(assigned)
    counts = {c: sum(result.value(lit) for lit in lits) for c, lits in by_class.items()}
    escapes: list[cp_model.LiteralT] = [~main for main in variables.main.values() if result.value(main)]
    unused = [lit for c, lits in by_class.items() if not counts[c] for lit in lits]
    if unused:
        other_class = model.new_bool_var("")
        model.add(sum(unused) >= 1).only_enforce_if(other_class)
        escapes.append(other_class)
    for c, n in counts.items():
        if n:
            fewer = model.new_bool_var("")
            model.add(sum(by_class[c]) <= n - 1).only_enforce_if(fewer)
            escapes.append(fewer)
    model.add_bool_or(escapes)
