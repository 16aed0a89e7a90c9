"""GPUStack's rules: the checks before any search, and when each strategy is skipped.

Pre-check errors end the search (GPUStack skips every strategy on them). Skip rules are small
predicates; each strategy module lists the ones that apply to it, in GPUStack's order (switches,
image models, ``-ngl``, ``-ts``, manual selection, allocatable resources).
"""

from __future__ import annotations

from collections.abc import Callable

from layerfit.domain.cluster import Cluster
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.plan import Reason, ReasonKind, Severity
from layerfit.heuristics.context import Context, Skip, StrategyResult
from layerfit.heuristics.notes import Action, Level, Note, gib
from layerfit.heuristics.views import Selection

SkipRule = Callable[[Context, Action], Skip | None]


def selection_in_force(deployment: Deployment) -> tuple[Selection | None, tuple[Reason, ...]]:
    """The manual selection grouped by worker. It is never left: a ``--tensor-split`` maps onto the
    selected GPUs (GPUStack lets it override the selection)."""
    refs = deployment.gpu_selection
    if refs is None:
        return None, ()
    grouped: dict[str, tuple[int, ...]] = {}
    for ref in refs:
        grouped[ref.worker] = (*grouped.get(ref.worker, ()), ref.index)
    return grouped, ()


def precheck(ctx: Context, resources_checked: bool = True, selection_checked: bool = True) -> StrategyResult:
    """Errors that rule out every strategy, and notes about adjusted parameters.

    In GPUStack's order: the ``-ngl`` error first, which ends the checks; nothing allocatable only
    when ``resources_checked``, i.e. when some strategy passes the switch, parameter and selection
    rules (GPUStack checks resources after those, per strategy); selected GPUs too small only when
    ``selection_checked``, i.e. when some strategy also passes the worker and GPU counts, which
    GPUStack checks before it looks at each selected GPU. A selected worker or GPU that is not in
    the cluster (GPUStack's scheduler passes only the workers it keeps) is checked as GPUStack checks
    it: a missing GPU has no VRAM, a missing worker is named, each in its turn; unchecked, it keeps
    its typed reason unshown.
    """
    reasons: list[Reason] = []
    notes: list[Note] = []
    gates = {_nothing_allocatable: resources_checked, _selection_errors: selection_checked}
    for check in (_gpu_layers_capped, _gpu_layers_need_cpu, _nothing_allocatable, _selection_errors):
        found = check(ctx)
        if check in gates and (not gates[check] or any(_shown(reason) for reason in reasons)):
            reasons.extend(reason for reason in found if reason.kind in _KEPT_UNCHECKED)
            continue
        reasons.extend(found)
        notes.extend(_error_note(reason) for reason in _first_selection_error_only(found) if _shown(reason))
    return StrategyResult(reasons=tuple(reasons), notes=tuple(notes))


_SELECTED_GPU_ERRORS = frozenset({ReasonKind.INSUFFICIENT_VRAM, ReasonKind.UNKNOWN_WORKER, ReasonKind.UNKNOWN_GPU})
"""What GPUStack's look at each selected GPU stops at, in its order."""


def _first_selection_error_only(found: list[Reason]) -> list[Reason]:
    """GPUStack's pre-check ends at the first selected GPU that is missing or too small for a layer:
    one message, although each such GPU keeps its typed reason."""
    first = next((reason for reason in found if reason.kind in _SELECTED_GPU_ERRORS), None)
    return [reason for reason in found if reason.kind not in _SELECTED_GPU_ERRORS or reason is first]


_KEPT_UNCHECKED = frozenset({ReasonKind.UNKNOWN_WORKER, ReasonKind.UNKNOWN_GPU, ReasonKind.DISTRIBUTION_NOT_ALLOWED})
"""Selection reasons kept (unshown) where GPUStack would not check them: the selection names what
is not in the cluster, or spans workers without distribution."""


def _shown(reason: Reason) -> bool:
    """Errors GPUStack reports before any search. A selection across workers without distribution
    is not one: GPUStack skips every strategy and says the selected GPUs do not meet the
    requirements (the typed reason keeps the cause)."""
    return reason.severity is Severity.ERROR and reason.kind is not ReasonKind.DISTRIBUTION_NOT_ALLOWED


def _error_note(reason: Reason) -> Note:
    return Note(Level.ERROR, Action.PRE_CHECK, reason.message)


def _gpu_layers_capped(ctx: Context) -> list[Reason]:
    asked = ctx.deployment.params.n_gpu_layers
    if asked is None or asked <= ctx.n_layers:
        return []
    message = f"--gpu-layers {asked} exceeds the model's {ctx.n_layers} layers; all layers go to GPUs"
    return [Reason(kind=ReasonKind.INVALID_PARAMETER, severity=Severity.INFO, resource="n_gpu_layers", message=message)]


def _gpu_layers_need_cpu(ctx: Context) -> list[Reason]:
    """GPUStack's pre-check error, in its words. ``-ngl 0`` without CPU offloading is no error there:
    every strategy is skipped and the plan ends with GPUStack's last word."""
    layers = ctx.gpu_layers
    if layers is None or not 0 < layers < ctx.n_layers or ctx.deployment.cpu_offloading:
        return []
    message = (
        f"The parameter --gpu-layers {layers} requires CPU offloading. "
        "Please allow CPU offloading in the model configuration."
    )
    return [Reason(kind=ReasonKind.CPU_OFFLOAD_NOT_ALLOWED, resource="n_gpu_layers", message=message)]


def _nothing_allocatable(ctx: Context) -> list[Reason]:
    """No worker has anything allocatable: what GPUStack says then, in its words.

    A selection gets its no-allocatable-VRAM error, GPUs its no-available-resources note (shown as
    the pre-check error here), no worker at all its insufficient-resources error. A cluster without
    GPUs is searched on, as GPUStack searches it: its CPU or partial strategy gives the advice, or
    nothing runs and its last word is shown. A selection none of whose GPUs has allocatable VRAM
    gets the selection's error too, whatever RAM is left (GPUStack counts GPUs with VRAM, before
    it looks at each selected GPU).
    """
    if ctx.workers and (ctx.selection is None or ctx.gpus):
        return []
    if ctx.selection is not None:
        message = f"Selected GPUs need at least {gib(ctx.local_floor(False))} GiB of available VRAM."
    elif any(worker.gpus for worker in ctx.cluster.workers):
        message = "No available resources for workers. Please check workers's available VRAM."
    elif not ctx.cluster.workers:
        message = "Insufficient resources for the model. Please check the available VRAM and RAM for the workers."
    else:
        return []
    return [Reason(kind=ReasonKind.NO_CANDIDATE, resource="workers", message=message)]


def _selection_errors(ctx: Context) -> list[Reason]:
    refs = ctx.deployment.gpu_selection
    if ctx.selection is None or refs is None or not ctx.workers:
        return []
    # GPUStack's order: grouped by worker in order of appearance, each worker's ids sorted as text
    workers = list(dict.fromkeys(ref.worker for ref in refs))
    grouped = sorted(refs, key=lambda ref: (workers.index(ref.worker), str(ref)))
    found = (_selected_gpu_error(ctx, ctx.cluster, ref.worker, ref.type, ref.index) for ref in grouped)
    reasons = [reason for reason in found if reason is not None]
    if len(ctx.selection) > 1 and not ctx.deployment.distributed_inference_across_workers:
        message = (
            f"The selected GPUs span {len(ctx.selection)} workers, which needs distributed inference across "
            "workers; it is disabled for this model."
        )
        resource = "distributed_inference_across_workers"
        reasons.append(Reason(kind=ReasonKind.DISTRIBUTION_NOT_ALLOWED, resource=resource, message=message))
    return reasons


def _selected_gpu_error(ctx: Context, cluster: Cluster, worker_name: str, gpu_type: str, index: int) -> Reason | None:
    ref = f"{worker_name}:{gpu_type}:{index}"
    if not cluster.has_worker(worker_name):
        message = f"Selected GPUs's worker {worker_name} not found in the workers list."  # GPUStack's words
        return Reason(kind=ReasonKind.UNKNOWN_WORKER, resource="gpu_selection", worker=worker_name, message=message)
    worker = cluster.worker(worker_name)
    needed = ctx.local_floor(worker.unified_memory)
    message = f"Selected GPU {ref} lacks enough VRAM. At least {gib(needed)} GiB is required."
    if not worker.has_gpu(index) or worker.gpu(index).type != gpu_type:  # GPUStack: no VRAM on a missing GPU
        return Reason(
            kind=ReasonKind.UNKNOWN_GPU,
            resource="gpu_selection",
            needed_bytes=needed,
            available_bytes=0,
            worker=worker_name,
            gpu_index=index,
            message=message,
        )
    available = worker.gpu(index).allocatable_vram_bytes
    if available >= needed:
        return None
    return Reason(
        kind=ReasonKind.INSUFFICIENT_VRAM,
        resource="vram",
        needed_bytes=needed,
        available_bytes=available,
        worker=worker_name,
        gpu_index=index,
        message=message,
    )


# ---------------------------------------------------------------------------------------------
# Skip rules: each returns None when the strategy may run.
# ---------------------------------------------------------------------------------------------


def _skip(action: Action, kind: ReasonKind, resource: str, message: str) -> Skip:
    return Skip(Reason(kind=kind, severity=Severity.INFO, strategy=action.value, resource=resource, message=message))


def cpu_offloading_allowed(ctx: Context, action: Action) -> Skip | None:
    if ctx.deployment.cpu_offloading:
        return None
    return _skip(action, ReasonKind.CPU_OFFLOAD_NOT_ALLOWED, "cpu_offloading", "CPU offloading is not allowed")


def distribution_allowed(ctx: Context, action: Action) -> Skip | None:
    if ctx.deployment.distributed_inference_across_workers:
        return None
    return _skip(
        action,
        ReasonKind.DISTRIBUTION_NOT_ALLOWED,
        "distributed_inference_across_workers",
        "distributed inference across workers is not allowed",
    )


def not_image(ctx: Context, action: Action) -> Skip | None:
    if ctx.deployment.kind is not ModelKind.IMAGE:
        return None
    return _skip(action, ReasonKind.IMAGE_MODEL_SPLIT, "kind", "image models run fully offloaded on a single GPU only")


def offload_asked(layers: int, total: int) -> str:
    """What ``-ngl`` asks for, in words: ``no offload``, ``partial offload (30 of 49 layers)`` or
    ``full offload``."""
    if layers == 0:
        return "no offload"
    return "full offload" if layers >= total else f"partial offload ({layers} of {total} layers)"


def _gpu_layers_rule(allowed: Callable[[int, int], bool]) -> SkipRule:
    """A strategy ruled out by what ``-ngl`` asks for; the reason says what it asks for, so that
    the strategies it rules out give one reason."""

    def rule(ctx: Context, action: Action) -> Skip | None:
        layers = ctx.gpu_layers
        if layers is None or allowed(layers, ctx.n_layers):
            return None
        asked = offload_asked(layers, ctx.n_layers)
        return _skip(action, ReasonKind.STRATEGY_SKIPPED, "n_gpu_layers", f"--gpu-layers {layers} asks for {asked}")

    return rule


gpu_layers_full = _gpu_layers_rule(lambda layers, total: layers == total)
gpu_layers_some = _gpu_layers_rule(lambda layers, total: layers > 0)
gpu_layers_partial = _gpu_layers_rule(lambda layers, total: 0 < layers < total)
gpu_layers_none = _gpu_layers_rule(lambda layers, total: layers == 0)


def no_tensor_split(ctx: Context, action: Action) -> Skip | None:
    """A split over several GPUs rules the strategy out (one non-zero share means one device)."""
    if ctx.tensor_split is None or sum(1 for share in ctx.tensor_split if share > 0) == 1:
        return None
    return _skip(action, ReasonKind.STRATEGY_SKIPPED, "tensor_split", "--tensor-split asks for a split over GPUs")


def _selection_rule(allowed: Callable[[Selection], bool], what: str) -> SkipRule:
    def rule(ctx: Context, action: Action) -> Skip | None:
        if ctx.selection is None or allowed(ctx.selection):
            return None
        return _skip(action, ReasonKind.STRATEGY_SKIPPED, "gpu_selection", f"the manual GPU selection {what}")

    return rule


def _selected_gpu_count(selection: Selection) -> int:
    return sum(len(indexes) for indexes in selection.values())


selection_one_gpu = _selection_rule(lambda s: len(s) == 1 and _selected_gpu_count(s) == 1, "is not a single GPU")
selection_several_gpus_one_worker = _selection_rule(
    lambda s: len(s) == 1 and _selected_gpu_count(s) > 1, "is not several GPUs of one worker"
)
selection_across_workers = _selection_rule(lambda s: len(s) > 1, "is on one worker")
selection_one_worker = _selection_rule(lambda s: len(s) == 1, "spans several workers")
no_selection = _selection_rule(lambda s: False, "asks for GPUs")


def has_usable_gpu(ctx: Context, action: Action) -> Skip | None:
    if ctx.gpus:
        return None
    skip = _skip(action, ReasonKind.STRATEGY_SKIPPED, "vram", "no GPU has allocatable VRAM")
    if any(worker.gpus for worker in ctx.cluster.workers):
        text = "No available resources for workers. Please check workers's available VRAM."  # GPUStack's words
        note = Note(Level.INFO, Action.PRE_CHECK, text)
        return Skip(skip.reason, (note,))
    return skip


def has_usable_gpu_or_none_at_all(ctx: Context, action: Action) -> Skip | None:
    """``has_usable_gpu``, except on a cluster where no worker has a GPU at all: GPUStack's
    allocatable checks skip a strategy only when GPUs exist and none has VRAM left, so its partial
    offload runs there, finds nothing and, with ``-ngl``, advises on one device."""
    if not any(worker.gpus for worker in ctx.cluster.workers):
        return None
    return has_usable_gpu(ctx, action)


def two_workers(ctx: Context, action: Action) -> Skip | None:
    """GPUStack counts every worker here, with or without a GPU or anything allocatable: with one
    worker of GPUs beside CPU-only ones its distributed search runs, and says no GPU can serve RPC."""
    if len(ctx.cluster.workers) >= 2:
        return None
    return _skip(action, ReasonKind.STRATEGY_SKIPPED, "workers", "fewer than two workers")


def two_usable_gpus(ctx: Context, action: Action) -> Skip | None:
    if len(ctx.gpus) >= 2:
        return None
    return _skip(action, ReasonKind.STRATEGY_SKIPPED, "vram", "fewer than two GPUs have allocatable VRAM")


RESOURCE_RULES: tuple[SkipRule, ...] = (
    has_usable_gpu,
    has_usable_gpu_or_none_at_all,
    two_workers,
    two_usable_gpus,
)
"""The rules GPUStack applies after the switch, parameter and selection rules (its allocatable checks)."""

GPU_PRESENCE_RULES: tuple[SkipRule, ...] = (has_usable_gpu, has_usable_gpu_or_none_at_all)
"""The allocatable checks before the worker and GPU counts (nothing allocatable is its own pre-check)."""


def first_skip(ctx: Context, action: Action, rules: tuple[SkipRule, ...]) -> Skip | None:
    """The first rule that rules the strategy out, or ``None``."""
    for rule in rules:
        skip = rule(ctx, action)
        if skip is not None:
            return skip
    return None
