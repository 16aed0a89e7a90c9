"""Alternatives: more layouts as good on the strict tiers, on other GPU sets, best tie-break first.

Each re-solve of the final model excludes the GPU sets (with their main worker) already returned,
until ``config.alternatives`` are found or no other exists: a count, within a work budget, so the
set is reproducible (``truncated`` in the stats when the budget cut it; ``safety_stops`` too when
the wall clock did).

**Twin swaps first** (shortcut ``twin-swap``): a worker of the best layout traded for an unused
worker with the same memory type, allocatable RAM and GPUs (type and allocatable VRAM; where time
is modelled, also the same CPU, network and GPU speeds) changes no memory figure, no time and no
tie-break score, so when ``check`` accepts the result it is as good as the
best on every tier, tie-break included, and on another GPU set: an alternative found without
CP-SAT. (The model's symmetry breaking keeps such swaps out of its own re-solves.) The re-solves
then exclude those GPU sets too, and come after them: best tie-break first still holds.

The re-solves run on the tie-break's model, so they are skipped when its tie-break was not proven
(``no-re-solve:tie-break-unproven``): it was cut by its budget or too large to search, and so would
they be. Together they spend at most a quarter of the work the solve spent before them (at least
0.2 nominal seconds, ``layerfit.budget.work``): the same share on every run, where a share of the elapsed
time cut three re-solves of 5-11 ms each on a loaded machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ortools.sat.python import cp_model

from layerfit.check import check_layout
from layerfit.domain.cluster import Cluster, Gpu, Worker
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.domain.plan import Candidate
from layerfit.domain.profile import MemoryProfile
from layerfit.solver.model.build import BuiltModel, build_model
from layerfit.solver.model.candidates import candidate_of, checked_candidate
from layerfit.solver.model.instance import Instance, models_time
from layerfit.solver.model.objective import strict_tiers, tie_break
from layerfit.solver.model.progress import tie_break_measure
from layerfit.solver.model.runner import Run, run
from layerfit.solver.model.variables import IntVar, Variables
from layerfit.solver.search.trace import Clock, SearchOutcome, Trace, stage_name
from layerfit.speed.deployment import speed_key, worker_speed_key

TWIN_SWAP = "twin-swap"
"""Shortcut name: alternatives found by trading a worker for an identical unused one."""
NO_OTHER_GPU_SET = "no-other-gpu-set"
"""Shortcut name: the model has one main worker and no more GPUs than the layout uses, so the
best layout's GPU set is the only one: no re-solve can find an alternative."""
NO_RE_SOLVE = "no-re-solve:tie-break-unproven"
"""Shortcut name: the tie-break was not proven (cut by its time share, or not searched on a model
too large), so re-solves of that model would be cut too: only twin swaps are returned."""
ALTERNATIVES_SHARE = 0.25
"""The re-solves together may spend this share of the work the solve spent before them, ..."""
MIN_ALTERNATIVES_S = 0.2
"""... at least this many nominal seconds (within the budget; about 0.1 s of wall time, the share
before work budgets); past it the set is cut (``truncated``)."""


def alternatives(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    outcome: SearchOutcome,
    clock: Clock,
    trace: Trace,
    *,
    shortcuts: bool = True,
) -> tuple[Candidate, ...]:
    """Up to ``config.alternatives`` more layouts as good on the strict tiers, on other GPU sets,
    best tie-break first (the final model keeps the strict tiers fixed). The final model is built
    only when twin swaps do not already give them all (``outcome.wider``)."""

    def final_model() -> BuiltModel:
        built = outcome.built if outcome.wider is None else build_model(outcome.wider)
        tiers = strict_tiers(built.instance, built.variables)
        for expression, value in (
            (tiers.layers, outcome.layers),
            (tiers.workers, outcome.workers),
            (tiers.gpus, outcome.gpus),
        ):
            built.model.add(expression == value)
        if not outcome.ranks_tie_break or outcome.wider is not None:
            uses_gpus = outcome.gpus > 0
            built.model.minimize(tie_break(built.model, built.instance, built.variables, uses_gpus=uses_gpus))
        return built

    best = outcome.best.layout(outcome.built)
    re_solve = outcome.tie_break_proven or not shortcuts
    return _alternatives(
        cluster, deployment, profile, config, final_model, best, clock, trace, shortcuts=shortcuts, re_solve=re_solve
    )


def alternatives_after(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    built: BuiltModel,
    previous: Run,
    clock: Clock,
    trace: Trace,
    *,
    shortcuts: bool = True,
) -> tuple[Candidate, ...]:
    """Twin swaps of the best layout (``previous``), then re-solves of a model whose strict tiers
    are fixed, each excluding the GPU sets found so far, until ``config.alternatives`` are found or
    no other exists."""
    best = previous.layout(built)
    return _alternatives(cluster, deployment, profile, config, lambda: built, best, clock, trace, shortcuts=shortcuts)


def _alternatives(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    final_model: Callable[[], BuiltModel],
    best: Layout,
    clock: Clock,
    trace: Trace,
    *,
    shortcuts: bool,
    re_solve: bool = True,
) -> tuple[Candidate, ...]:
    """Twin swaps, then (``re_solve``) re-solves of ``final_model()``, built only when needed."""
    found: list[Candidate] = []
    if shortcuts:
        found = twin_alternatives(cluster, deployment, profile, config, best, config.alternatives)
        if found:
            trace.shortcuts.append(f"{TWIN_SWAP}:{len(found)}")
    if len(found) >= config.alternatives:
        return tuple(found)
    if not re_solve:
        trace.shortcuts.append(NO_RE_SOLVE)
        return tuple(found)
    built = final_model()
    for layout in (best, *(candidate.layout for candidate in found)):
        exclude(built.model, built.instance, built.variables, layout)
    if shortcuts and only_gpu_set(built, best):
        trace.shortcuts.append(NO_OTHER_GPU_SET)
        return tuple(found)
    uses_gpus = bool(best.devices)
    measure = tie_break_measure(stage_name(built.instance, "alternative"), built.instance, uses_gpus=uses_gpus)
    share = clock.work.part(max(MIN_ALTERNATIVES_S, ALTERNATIVES_SHARE * clock.spent()))
    while len(found) < config.alternatives:
        if share.left() <= 0:
            trace.cut("alternative")
            break
        built.model.proto.clear_solution_hint()
        result = trace.record("alternative", run(built, config, share, measure))
        if not result.found:
            break
        layout = result.layout(built)
        found.append(checked_candidate(cluster, deployment, profile, config, layout))
        exclude(built.model, built.instance, built.variables, layout)
    return tuple(found)


def only_gpu_set(built: BuiltModel, best: Layout) -> bool:
    """Whether ``best``'s main worker and GPU set are the only ones the model can choose: it has one
    candidate main worker and, over the classes its slots can hold, no more GPUs than ``best``
    uses (every layout as good on the strict tiers has as many devices, so it uses them all)."""
    classes = {c for slot in built.variables.slots for c in slot.assign}
    gpus = sum(built.instance.classes[c].count for c in classes)
    return len(built.variables.main) == 1 and gpus <= len(best.devices)


def twin_alternatives(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    best: Layout,
    count: int,
) -> list[Candidate]:
    """Up to ``count`` layouts as good as ``best`` on every tier, each on another GPU set: ``best``
    with one worker traded for an identical unused one (``twin_layouts``), kept when ``check``
    accepts it and its score equals ``best``'s."""
    score = candidate_of(cluster, deployment, profile, config, best).score
    found: list[Candidate] = []
    for layout in twin_layouts(cluster, best, timed=models_time(deployment, config)):
        if len(found) >= count:
            break
        if check_layout(cluster, deployment, profile, layout, config):
            continue
        candidate = candidate_of(cluster, deployment, profile, config, layout)
        if candidate.score == score:
            found.append(candidate)
    return found


def _gpu_order(worker: Worker, gpu: Gpu, timed: bool) -> tuple[object, ...]:
    """What the memory model and the tie-break (and, where time is modelled, the speed model) see
    of a GPU."""
    return (gpu.type, gpu.allocatable_vram_bytes, *((repr(speed_key(worker, gpu)),) if timed else ()))


def _signature(worker: Worker, timed: bool) -> tuple[object, ...]:
    """What the memory model and the tie-break see of a worker; where time is modelled, also its
    CPU, its network and its GPUs' speeds (a twin is then as fast)."""
    gpus = tuple(sorted(_gpu_order(worker, gpu, timed) for gpu in worker.gpus))
    speed = repr(worker_speed_key(worker)) if timed else ""
    return (worker.unified_memory, worker.allocatable_ram_bytes, gpus, speed)


def _gpu_map(original: Worker, twin: Worker, timed: bool) -> dict[int, int]:
    """Each GPU index of ``original`` -> the index of the GPU of ``twin`` in the same place when
    both are sorted by what ``_signature`` sees, then index (same signature: same GPUs)."""

    def order(worker: Worker) -> list[int]:
        ranked = sorted(worker.gpus, key=lambda gpu: (_gpu_order(worker, gpu, timed), gpu.index))
        return [gpu.index for gpu in ranked]

    return dict(zip(order(original), order(twin), strict=True))


def twin_layouts(cluster: Cluster, layout: Layout, *, timed: bool = False) -> Iterator[Layout]:
    """``layout`` with one of its workers (in ``layout.workers`` order) traded for an unused worker
    of the same signature (in cluster order), its GPUs mapped one to one by type and size (and,
    ``timed``, speed)."""
    used = set(layout.workers)
    for name in layout.workers:
        original = cluster.worker(name)
        signature = _signature(original, timed)
        for twin in cluster.workers:
            if twin.name in used or _signature(twin, timed) != signature:
                continue
            gpu_map = _gpu_map(original, twin, timed)
            devices = tuple(
                device
                if device.worker != name
                else DeviceAssignment(worker=twin.name, gpu_index=gpu_map[device.gpu_index], blocks=device.blocks)
                for device in layout.devices
            )
            main = twin.name if layout.main_worker == name else layout.main_worker
            yield layout.model_copy(update={"main_worker": main, "devices": devices})


def exclude(model: cp_model.CpModel, instance: Instance, variables: Variables, layout: Layout) -> None:
    """No-good cut: another main worker, or another multiset of GPU classes, than ``layout``'s
    (nothing when the model cannot hold ``layout``: it excludes no layout of the model)."""
    main = instance.worker_index(layout.main_worker)
    if main is None or main not in variables.main:
        return
    by_class: dict[int, list[IntVar]] = {}
    for slot in variables.slots:
        for c, assigned in slot.assign.items():
            by_class.setdefault(c, []).append(assigned)
    counts: dict[int, int] = dict.fromkeys(by_class, 0)
    for device in layout.devices:
        held = instance.class_of(device.worker, device.gpu_index)
        if held is None or held not in by_class:
            return
        counts[held] += 1
    escapes: list[cp_model.LiteralT] = [~variables.main[main]]
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
