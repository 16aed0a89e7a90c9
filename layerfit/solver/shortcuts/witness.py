"""A layout built greedily for a multi-worker step, to hint its model (a witness for its bound).

The t-worker step asks CP-SAT for the fewest GPUs of a layout with every layer on GPUs; its lower
bound (``gpu_count.fewest_gpus``) is usually exact, but with blocks of different sizes CP-SAT can
take seconds to find any layout at all. ``multi_worker_witness`` builds one of a given GPU count:
a main worker with its ``j`` largest GPUs, rpc-server workers chosen by a knapsack on their GPUs'
rooms, and blocks given from the last device backwards, each device taking the longest run that
fits. ``check`` in bytes decides; a witness only ever seeds CP-SAT as a complete hint, so a greedy
miss costs time, never an answer. When it meets the bound, CP-SAT's proof is immediate.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass

from layerfit.budget.work import Work
from layerfit.domain.config import OffloadOrder, PlannerConfig
from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.domain.profile import DeviceRole
from layerfit.solver.model.build import BuiltModel
from layerfit.solver.model.capacity import gpu_room
from layerfit.solver.model.costs import device_fixed
from layerfit.solver.model.instance import Instance, SlotKind
from layerfit.solver.model.runner import complete_hint

Valid = Callable[[Layout], bool]
"""Whether a layout passes ``check`` (in bytes, with the deployment's rules)."""
MAX_TRIALS = 16
"""Layouts tried (each checked in bytes) per GPU count before giving up."""
EXTRA_GPUS = 2
"""A witness may have this many GPUs more than the step's bound (CP-SAT then proves the rest)."""


def witness_solution(
    built: BuiltModel,
    workers: int,
    counts: range,
    valid: Valid,
    config: PlannerConfig,
    work: Work,
    layers: int | None = None,
) -> tuple[str, tuple[int, ...]]:
    """Hint a multi-worker step's model with the witness of the fewest GPUs among ``counts`` (from
    the step's lower bound), trying at most ``EXTRA_GPUS + 1`` counts: ``none``, or its GPU count
    and how the model took it (``8:accepted``); and the model's complete solution when it took it.
    ``layers``: the step's GPU layers (default every layer); the completion spends ``work``."""
    for gpus in counts[: EXTRA_GPUS + 1]:
        layout = multi_worker_witness(built.instance, workers, gpus, valid, layers)
        if layout is not None:
            how, solution = complete_hint(built, layout, config, work, work.left())
            return f"{gpus}:{how}", solution
    return "none", ()


@dataclass(frozen=True)
class _Gpu:
    cls: int
    worker: int
    room: int
    """``gpu_room``: what the GPU can give its device."""


def multi_worker_witness(
    instance: Instance, workers: int, gpus: int, valid: Valid, layers: int | None = None
) -> Layout | None:
    """A valid layout with ``workers`` workers, ``gpus`` GPUs and ``layers`` GPU layers (default
    every layer; fewer: a partial offload, the host keeping the first blocks), or ``None`` when the
    greedy construction finds none (or the rules fix the layout's shape: ``-ngl``, ``-ts``, a
    selection used whole, experts placed apart)."""
    rules = instance.rules
    layers = instance.n_layers if layers is None else layers
    fixed_shape = rules.tensor_split is not None or rules.device_count is not None or instance.experts is not None
    if workers < 2 or fixed_shape or rules.layer_target not in (None, layers):
        return None
    shape = _shape(instance, layers)
    if shape is None:
        return None
    servers = workers - 1
    remote = {w: _gpus(instance, w, SlotKind.RPC) for w, view in enumerate(instance.workers) if view.rpc_ok}
    remote = {w: found for w, found in remote.items() if found}
    local = {w: _gpus(instance, w, SlotKind.LOCAL) for w, view in enumerate(instance.workers) if view.main_ok}
    overhead = device_fixed(instance.costs, DeviceRole.RPC, None, multi=gpus > 1, partial=shape.partial)
    pool = _pool(remote, servers, overhead)
    shared = _best_servers(remote, pool, servers, overhead)
    trials: list[tuple[int, int, int]] = []
    for m, own in local.items():
        best = shared if m not in pool else _best_servers(remote, pool - {m}, servers, overhead)
        for j in range(min(len(own), instance.local_slots, gpus - servers) + 1):
            rest = gpus - j
            if rest > instance.rpc_slots or rest >= len(best) or best[rest] is None:
                continue
            room = sum(gpu.room for gpu in own[:j]) + (best[rest] or (0, ()))[0]
            trials.append((room, m, j))
    for _room, m, j in sorted(trials, reverse=True)[:MAX_TRIALS]:
        best = shared if m not in pool else _best_servers(remote, pool - {m}, servers, overhead)
        choice = best[gpus - j]
        if choice is None:
            continue
        chosen = [gpu for w, count in choice[1] for gpu in remote[w][:count]]
        layout = _place(instance, m, local[m][:j], chosen, shape)
        if layout is not None and valid(layout):
            return layout
    return None


def _gpus(instance: Instance, worker: int, kind: SlotKind) -> list[_Gpu]:
    """The worker's GPUs that may fill a slot of ``kind``, largest room first, at most the slots."""
    found = [
        _Gpu(cls=c, worker=worker, room=gpu_room(instance, instance.classes[c], kind))
        for c in instance.classes_for(kind)
        if instance.classes[c].worker == worker
        for _ in range(instance.classes[c].count)
    ]
    return sorted(found, key=lambda gpu: gpu.room, reverse=True)[: instance.slots(kind)]


def _pool(remote: dict[int, list[_Gpu]], servers: int, overhead: int) -> frozenset[int]:
    """The workers that can matter to the knapsack: for each GPU count, the ``servers + 1`` with
    the most room on that many GPUs (one more, so that any main worker can be left out)."""
    chosen: set[int] = set()
    most = max((len(found) for found in remote.values()), default=0)
    for i in range(1, most + 1):
        ranked = sorted(remote, key=lambda w: _room(remote[w], i, overhead))
        chosen.update(ranked[-(servers + 1) :])
    return frozenset(chosen)


def _room(found: list[_Gpu], count: int, overhead: int) -> int:
    return sum(max(0, gpu.room - overhead) for gpu in found[:count])


Choice = tuple[int, tuple[tuple[int, int], ...]]
"""Room in total, and ``(worker, GPUs)`` per rpc-server worker."""


def _best_servers(
    remote: dict[int, list[_Gpu]], pool: frozenset[int], servers: int, overhead: int
) -> list[Choice | None]:
    """``best[g]``: exactly ``servers`` workers of ``pool`` with ``g`` GPUs in all (at least one
    each) and the most room (a knapsack over the workers, each giving its ``i`` best GPUs)."""
    most = sum(len(remote[w]) for w in pool)
    best: list[list[Choice | None]] = [[None] * (most + 1) for _ in range(servers + 1)]
    best[0][0] = (0, ())
    for w in sorted(pool):
        found = remote[w]
        for k in range(servers, 0, -1):
            row, fewer = best[k], best[k - 1]
            for g in range(most, 0, -1):
                for i in range(1, min(g, len(found)) + 1):
                    before = fewer[g - i]
                    if before is None:
                        continue
                    room = before[0] + _room(found, i, overhead)
                    current = row[g]
                    if current is None or room > current[0]:
                        row[g] = (room, (*before[1], (w, i)))
    return best[servers]


@dataclass(frozen=True)
class _Shape:
    """What a layout of some GPU-layer count puts on GPUs."""

    blocks: int
    output: bool
    partial: bool


def _shape(instance: Instance, layers: int) -> _Shape | None:
    """Blocks and output layer on GPUs for ``layers`` GPU layers: every layer, or a partial offload
    (the output layer on the last device with ``OUTPUT_FIRST``, on the host with ``OUTPUT_LAST``);
    ``None`` when the rules allow no such layout."""
    if layers == instance.n_layers:
        return _Shape(blocks=instance.n_blocks, output=True, partial=False)
    if True not in instance.rules.partial_values or layers < 1:
        return None
    output = instance.rules.offload_order is OffloadOrder.OUTPUT_FIRST
    return _Shape(blocks=layers - 1 if output else layers, output=output, partial=True)


def _place(instance: Instance, main: int, own: list[_Gpu], remote: list[_Gpu], shape: _Shape) -> Layout | None:
    """The last ``shape.blocks`` blocks (and the output layer when it is on a GPU) on ``remote``
    then ``own`` (its largest GPU last, as the main GPU), each device from the last one taking the
    longest run of blocks that fits."""
    ordered = [*remote, *own[1:], *own[:1]]
    multi = len(ordered) > 1
    costs = instance.costs
    end = instance.n_blocks
    floor = instance.n_blocks - shape.blocks
    blocks = [0] * len(ordered)
    for position in range(len(ordered) - 1, -1, -1):
        gpu = ordered[position]
        if position >= len(remote):
            role = DeviceRole.MAIN if position == len(ordered) - 1 else DeviceRole.LOCAL
        else:
            role = DeviceRole.RPC
        unified = instance.workers[gpu.worker].unified
        room = gpu.room - device_fixed(instance.costs, role, unified, multi=multi, partial=shape.partial)
        room -= costs.output if position == len(ordered) - 1 and shape.output else 0
        room -= costs.first_device if position == 0 and multi and not shape.partial else 0
        # the earliest start whose run up to ``end`` fits, leaving a block for each earlier device
        start = bisect_left(costs.block_prefix_down, costs.block_prefix_up[end] - room, 0, end + 1)
        start = max(start, floor + position)
        if start >= end:
            return None
        blocks[position] = end - start
        end = start
    if end > floor:
        return None
    taken: dict[int, int] = {}
    devices = []
    for gpu, count in zip(ordered, blocks, strict=True):
        index = instance.classes[gpu.cls].gpu_indexes[taken.get(gpu.cls, 0)]
        taken[gpu.cls] = taken.get(gpu.cls, 0) + 1
        devices.append(DeviceAssignment(worker=instance.workers[gpu.worker].name, gpu_index=index, blocks=count))
    return Layout(
        main_worker=instance.workers[main].name,
        n_blocks=instance.n_blocks,
        devices=tuple(devices),
        output_offloaded=shape.output,
    )
