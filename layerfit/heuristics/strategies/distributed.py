"""Strategy 3: one main worker with all its GPUs, plus single remote GPUs as llama.cpp RPC servers.

The main worker is the one with the most VRAM on GPUs that can hold a layer, among workers whose
RAM covers the main process (GPUStack looks at VRAM only, so a main worker short of RAM sinks
every combination). Its GPUs that cannot hold a layer are left out (GPUStack splits over every
main GPU with VRAM left, and one such GPU given a layer sinks every combination). RPC candidates
are the other workers' GPUs that can hold a block; with more than ``max_rpc_candidate_gpus`` of
them the strategy is skipped with a warning, as in GPUStack.
Combinations of 1 .. ``max_rpc_servers`` candidates are tried, fewest servers first; devices are
ordered RPC servers first, then the main worker's GPUs, split in proportion to allocatable VRAM.
Each combination gets the most layers it can hold; the search stops at the first server count
reaching full offload (or, with ``--gpu-layers``, any fit). The search is budgeted
(``heuristics.budget``): past ``max_rpc_combinations`` evaluated combinations, its work budget or
its safety stop it returns the best found so far (nothing, when the budget runs out while looking for full offload).
Without CPU offloading only full offload counts. A selection spanning workers is evaluated as
exactly one combination: the main worker's selected GPUs plus every selected remote GPU. A
``--tensor-split`` fixes the device count (servers + main GPUs) and its shares apply to the
devices in llama.cpp order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import combinations

from layerfit.domain.plan import Reason, ReasonKind, Severity, StrategyClass
from layerfit.heuristics import rules
from layerfit.heuristics.context import Context, StrategyResult
from layerfit.heuristics.evaluate import Verdict
from layerfit.heuristics.notes import Action, Level, Note, gib, sentences
from layerfit.heuristics.placement import Placement, placement
from layerfit.heuristics.search import largest_fitting
from layerfit.heuristics.strategies.base import (
    Strategy,
    can_hold_a_layer,
    fills_selection,
    no_candidate,
    rejection,
    room_for_layers,
)
from layerfit.heuristics.views import GpuView, WorkerView

ACTION = Action.DISTRIBUTED

Combos = dict[int, Iterable[tuple[GpuView, ...]]]


def choose_main(ctx: Context) -> WorkerView | None:
    """The worker with the most VRAM able to hold layers whose RAM covers the main process."""
    best: WorkerView | None = None
    best_vram = 0
    for worker in ctx.workers:
        if ctx.selection is not None and worker.name not in ctx.selection:
            continue
        vram = sum(gpu.vram_bytes for gpu in can_hold_a_layer(ctx, worker.gpus))
        if vram > best_vram and worker.ram_bytes >= ctx.main_ram_floor:
            best, best_vram = worker, vram
    return best


def layer_range(ctx: Context) -> tuple[int, int]:
    """The fewest and most GPU layers a candidate may have."""
    if ctx.gpu_layers is not None:
        return ctx.gpu_layers, ctx.gpu_layers
    if not ctx.deployment.cpu_offloading:
        return ctx.n_layers, ctx.n_layers
    return 1, ctx.n_layers


def search(ctx: Context) -> StrategyResult:
    main = choose_main(ctx)
    if main is None:
        return _no_main(ctx)
    main_gpus = can_hold_a_layer(ctx, main.gpus)
    remote = tuple(gpu for gpu in ctx.gpus if gpu.worker != main.name)
    pool = tuple(gpu for gpu in remote if gpu.vram_bytes >= ctx.rpc_floor(gpu.unified))
    combos, problem = _combinations(ctx, remote, pool, len(main_gpus))
    if problem is not None:
        return problem
    found = search_combinations(ctx, main, main_gpus, combos)
    if found:
        return StrategyResult(found=found)
    top = max(combos) if combos else 0
    rpc = (pool[:top] if ctx.selection is None else remote) or pool[:1]
    _, reasons = rejection(ctx, ACTION, _placement(ctx, main, rpc, main_gpus), layer_range(ctx)[1])
    message = f"no combination of main worker {main.name} and up to {top} RPC servers fits"
    return StrategyResult(reasons=(*reasons, no_candidate(ACTION, message, worker=main.name)))


def _placement(ctx: Context, main: WorkerView, rpc: tuple[GpuView, ...], main_gpus: tuple[GpuView, ...]) -> Placement:
    """RPC servers first, then the main worker's GPUs. A main GPU the VRAM split leaves without a
    layer stays idle; with a selection, whose GPUs are all used, it is given a layer instead (a
    user ``-ts`` fixes every device)."""
    idle = ctx.tensor_split is None and ctx.selection is None
    fill = fills_selection(ctx)
    return placement(main, rpc + main_gpus, ctx.tensor_split, main_gpus_may_idle=idle, fill_every_device=fill)


def _combinations(
    ctx: Context, remote: tuple[GpuView, ...], pool: tuple[GpuView, ...], main_gpu_count: int
) -> tuple[Combos, StrategyResult | None]:
    """RPC server combinations by server count, or why there are none."""
    cap = ctx.config.max_rpc_servers
    if ctx.selection is not None:
        return _selected_combination(ctx, remote, cap)
    if not pool:
        floor = ctx.rpc_floor(False)
        advice = sentences(  # GPUStack's words
            f"The model requires approximately {gib(floor)} GiB VRAM.",
            "Current GPUs lacks enough VRAM to serve as an RPC server.",
        )
        return {}, _failure(Level.INFO, ReasonKind.INSUFFICIENT_VRAM, advice, needed=floor)
    if len(pool) > ctx.config.max_rpc_candidate_gpus:
        limit = ctx.config.max_rpc_candidate_gpus
        warning = (  # GPUStack's words: one line, although two sentences (see gpustack.messages)
            f"Too many candidate RPC servers (max {limit} supported), skipping distributed deployment. "
            "Use manual scheduling to select GPUs if needed."
        )
        return {}, _failure(Level.WARNING, ReasonKind.TOO_MANY_RPC_CANDIDATES, warning)
    counts = range(1, min(len(pool), cap) + 1)
    if ctx.tensor_split is not None:
        counts = range(len(ctx.tensor_split) - main_gpu_count, len(ctx.tensor_split) - main_gpu_count + 1)
        if not 1 <= counts[0] <= min(len(pool), cap):
            message = (
                f"--tensor-split has {len(ctx.tensor_split)} shares: the main worker has {main_gpu_count} GPUs, "
                f"which leaves {counts[0]} RPC servers (1 to {min(len(pool), cap)} possible)"
            )
            return {}, _failure(Level.INFO, ReasonKind.TENSOR_SPLIT_NOT_HONOURED, message)
    return {count: _Combinations(pool, count) for count in counts}, None


@dataclass(frozen=True)
class _Combinations:
    """``itertools.combinations`` that can be iterated more than once."""

    pool: tuple[GpuView, ...]
    size: int

    def __iter__(self) -> Iterator[tuple[GpuView, ...]]:
        return combinations(self.pool, self.size)


def _selected_combination(ctx: Context, remote: tuple[GpuView, ...], cap: int) -> tuple[Combos, StrategyResult | None]:
    for gpu in remote:
        floor = ctx.rpc_floor(gpu.unified)
        if gpu.vram_bytes < floor:
            # GPUStack's words, with the GPU's id where GPUStack prints its worker and VRAM in bytes.
            message = sentences(
                f"The model in RPC requires approximately {gib(floor)} GiB VRAM.",
                f"Selected GPU {gpu.ref} lacks enough VRAM to serve as an RPC server.",
            )
            return {}, _failure(Level.ERROR, ReasonKind.INSUFFICIENT_VRAM, message, needed=floor, gpu=gpu)
    if len(remote) > cap:
        message = f"The selection needs {len(remote)} RPC servers; at most {cap} are allowed."
        return {}, _failure(Level.ERROR, ReasonKind.TOO_MANY_RPC_SERVERS, message)
    return {len(remote): (remote,)}, None


def _failure(
    level: Level, kind: ReasonKind, message: str, needed: int | None = None, gpu: GpuView | None = None
) -> StrategyResult:
    severity = {Level.ERROR: Severity.ERROR, Level.WARNING: Severity.WARNING, Level.INFO: Severity.ERROR}[level]
    reason = Reason(
        kind=kind,
        severity=severity,
        strategy=ACTION.value,
        resource="vram" if needed is not None else None,
        needed_bytes=needed,
        available_bytes=None if gpu is None else gpu.vram_bytes,
        worker=None if gpu is None else gpu.worker,
        gpu_index=None if gpu is None else gpu.index,
        message=message,
    )
    return StrategyResult(reasons=(reason,), notes=(Note(level, ACTION, message),))


def _no_main(ctx: Context) -> StrategyResult:
    """Why there is no main worker, in GPUStack's words when no GPU can hold a layer. A main worker
    short of RAM is layerfit's check (GPUStack takes the worker with the most VRAM, whose every
    combination then fails unannounced): a typed reason, no note, so the messages stay GPUStack's."""
    vram_floor = ctx.local_floor(False)
    holds_a_layer = [
        worker
        for worker in ctx.workers
        if can_hold_a_layer(ctx, worker.gpus) and (ctx.selection is None or worker.name in ctx.selection)
    ]
    if not holds_a_layer:
        if ctx.selection is not None:
            message = sentences(
                f"Selected GPUs need at least {gib(vram_floor)} GiB of VRAM.",
                "No suitable GPU found for the main server.",
            )
            return _failure(Level.ERROR, ReasonKind.NO_CANDIDATE, message)
        message = sentences(
            f"The model requires approximately {gib(vram_floor)} GiB VRAM.",
            "No suitable main server found, current GPUs lack enough VRAM to offload a single layer.",
        )
        return _failure(Level.INFO, ReasonKind.INSUFFICIENT_VRAM, message, needed=vram_floor)
    richest = max(worker.ram_bytes for worker in holds_a_layer)
    message = sentences(
        f"The main server requires approximately {gib(ctx.main_ram_floor)} GiB RAM.",
        f"The workers whose GPUs can hold a layer provide at most {gib(richest)} GiB RAM.",
    )
    result = _failure(Level.INFO, ReasonKind.INSUFFICIENT_RAM, message)
    reason = result.reasons[0].model_copy(
        update={"resource": "ram", "needed_bytes": ctx.main_ram_floor, "available_bytes": richest}
    )
    return StrategyResult(reasons=(reason,))


def search_combinations(
    ctx: Context, main: WorkerView, main_gpus: tuple[GpuView, ...], combos: Combos
) -> tuple[Verdict, ...]:
    """GPUStack's result, found in two passes.

    GPUStack grows the server count until a count reaches full offload (or, with
    ``--gpu-layers``, any fit) and keeps the candidates with the most layers. So: first the
    fewest servers whose combinations reach the most layers the deployment allows; only when no
    count does (CPU offloading on) the most layers any combination holds, which does not depend
    on the order the counts are visited in, so the largest counts go first and set a high bar.
    """
    lo, hi = layer_range(ctx)
    for count in sorted(combos):
        if not _count_may_reach(ctx, main_gpus, combos[count], hi):
            continue
        reached = tuple(_fits(ctx, main, main_gpus, combos[count], hi, hi, rising=False))
        if reached:
            return reached
    if lo == hi or ctx.budget.truncated:
        return ()
    best = lo
    found: list[Verdict] = []
    for count in sorted(combos, reverse=True):
        for verdict in _fits(ctx, main, main_gpus, combos[count], best, hi - 1, rising=True):
            found.append(verdict)
            best = verdict.n_gpu_layers
    return tuple(verdict for verdict in found if verdict.n_gpu_layers == best)


def _count_may_reach(
    ctx: Context, main_gpus: tuple[GpuView, ...], group: Iterable[tuple[GpuView, ...]], layers: int
) -> bool:
    """Whether any combination of this size can have room for ``layers``. Candidates come largest
    first, so the first combination has the most VRAM; when every candidate costs the same besides
    its layers (one memory type, no ``-ts``) no other combination has more room."""
    first = next(iter(group), None)
    if first is None or ctx.tensor_split is not None or len({gpu.unified for gpu in first}) > 1:
        return True
    if any(gpu.unified != first[0].unified for gpu in ctx.gpus):
        return True
    return ctx.evaluator.layers_within(room_for_layers(ctx, first + main_gpus), layers, layers) >= layers


def _fits(
    ctx: Context,
    main: WorkerView,
    main_gpus: tuple[GpuView, ...],
    group: Iterable[tuple[GpuView, ...]],
    lo: int,
    hi: int,
    *,
    rising: bool,
) -> Iterator[Verdict]:
    """Each combination's most layers within ``lo..hi`` (``rising``: ``lo`` follows the best so far)."""
    for rpc in group:
        if not ctx.in_time():
            return
        if ctx.tensor_split is not None and len(ctx.tensor_split) != len(rpc + main_gpus):
            continue  # a split over another number of devices than this combination has
        most = ctx.evaluator.layers_within(room_for_layers(ctx, rpc + main_gpus), lo, hi)
        if most < lo:
            continue
        if not ctx.spend_rpc_combination():
            return
        where = _placement(ctx, main, rpc, main_gpus)
        verdict = largest_fitting(partial(ctx.evaluate, where), lo, most, monotone=False, hopeless=ctx.hopeless)
        if verdict is not None:
            if rising:
                lo = verdict.n_gpu_layers
            yield verdict


STRATEGY = Strategy(
    action=ACTION,
    kind=StrategyClass.DISTRIBUTED,
    skip_rules=(
        rules.distribution_allowed,
        rules.not_image,
        rules.gpu_layers_some,
        rules.selection_across_workers,
        rules.has_usable_gpu,
        rules.two_workers,
        rules.two_usable_gpus,
    ),
    search=search,
)
