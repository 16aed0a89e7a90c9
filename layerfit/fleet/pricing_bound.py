"""A cheap upper bound on a pricing problem, from a relaxation in exact bytes.

Under dual prices (``pricing.Prices``: per MiB of each GPU's VRAM, per GPU and worker a layout
opens, a value per layer on GPUs) a layout is worth
``layer_value * gpu_layers`` less its priced claims. Every valid layout's claims
(``memory.claims``) satisfy, on every GPU it uses:

* the device pays its role's fixed bytes and compute buffer (at least the least over the roles,
  layer kinds and offload states the rules allow), and every block it holds at least the lightest
  block's GPU bytes (experts on the host taken out);
* the device that holds the output layer pays its weights besides, and they fit beside the fixed
  bytes;
* the device's total fits the GPU's allocatable VRAM, so a GPU holds at most
  ``(allocatable - fixed) // lightest block`` blocks.

Dropping every other claim (compute add-ons, RAM, pools: prices are never negative), each GPU's
best value for each count of blocks is known in closed form (its fixed bytes and opening price
paid once, on the least claim of that many blocks), and the counts over the GPUs are chosen by a max-plus
knapsack (at most, or exactly, the blocks the rules allow). Its optimum bounds every valid
layout's value. Without distribution the layout uses one worker's GPUs, so the bound is the best
worker's; with it, every GPU of the fleet. On more GPUs than ``EXACT_GPUS`` the knapsack is
fractional instead (each GPU's fixed and opening price paid per block: the LP relaxation of
paying it once), which bounds the exact one.

CP-SAT's own bound on the pricing model is weak on distributed deployments (its linear relaxation
of the priced claims is loose, and it is rarely proven in its time): this one takes milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from layerfit.domain.base import MiB
from layerfit.domain.cluster import Cluster, Worker
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.profile import DeviceRole, MemoryProfile
from layerfit.fleet.gpu_table import BoolArray, GpuTable, IntArray
from layerfit.fleet.pricing_ceilings import fractional_best
from layerfit.memory import block_prefix_bytes

if TYPE_CHECKING:
    from layerfit.fleet.prices import Prices

FloatArray = npt.NDArray[np.float64]

EXACT_GPUS = 64
"""Up to this many GPUs the knapsack is exact in whole blocks per GPU; beyond, fractional."""


@dataclass(frozen=True)
class _Gpu:
    """One GPU in the relaxation."""

    layer_value: float
    price: float
    """Per byte of the GPU's VRAM."""
    opening: float
    fixed: int
    """Least bytes of a device beside its blocks and the output layer."""
    block: int
    """Least bytes of a block."""
    blocks: int
    """The most blocks it holds."""
    per_block: float
    """The fractional knapsack's value per block (fixed and opening price spread over ``blocks``)."""
    output_cost: float
    """The output layer's weights at the GPU's price (its device's fixed bytes are paid with its
    blocks, or not at all); ``inf`` where they do not fit on the GPU beside those fixed bytes."""

    @cached_property
    def values(self) -> tuple[float, ...]:
        """``values[b]``: the most ``b`` blocks on it are worth (``values[0] = 0``: not used);
        only the knapsack in whole blocks reads them."""
        values = [0.0]
        for b in range(1, self.blocks + 1):
            least = self.fixed + b * self.block
            values.append(self.layer_value * b - self.price * least - self.opening)
        return tuple(values)


def lightest_block_bytes(profile: MemoryProfile) -> int:
    """The least GPU bytes any block takes (experts on the host where it has any)."""
    prefix = block_prefix_bytes(profile)
    return min(
        (prefix[i + 1] - prefix[i] - profile.expert_bytes(i) for i in range(profile.n_blocks)),
        default=0,
    )


def least_compute_bytes(profile: MemoryProfile, role: DeviceRole, unified: bool, partial: tuple[bool, ...]) -> int:
    """The least compute buffer a device of ``role`` can have (``memory.device_compute_bytes``):
    its role's buffer or, lower, that of the layer kinds it holds, in any allowed offload state and
    device count, less a recurrent scan a later device may drop; add-ons (logits, first device's
    inputs, flash-attention fallback) are never negative and left out."""
    buffers = [profile.role_costs(role, unified).compute, *(entry.device for entry in profile.kinds_compute)]
    least = min(buffer.bytes_for(state, multi) for buffer in buffers for state in partial for multi in (False, True))
    return max(0, least - profile.scan_bytes)


def least_device_bytes(profile: MemoryProfile, unified: bool, partial: tuple[bool, ...]) -> int:
    """The least any device takes besides its blocks and the output layer: fixed and compute."""
    return min(
        profile.role_costs(role, unified).fixed_bytes + least_compute_bytes(profile, role, unified, partial)
        for role in DeviceRole
    )


def _gpus(worker: Worker, profile: MemoryProfile, prices: Prices, partial: tuple[bool, ...]) -> list[_Gpu]:
    block = max(0, lightest_block_bytes(profile))
    fixed = least_device_bytes(profile, worker.unified_memory, partial)
    found = []
    for gpu in worker.gpus:
        key = (worker.name, gpu.index)
        capacity = gpu.allocatable_vram_bytes
        room = capacity - fixed
        if room < 0:
            continue  # no device of this model fits on it
        price = prices.gpu.get(key, 0.0) / MiB
        opening = prices.gpu_open.get(key, 0.0)
        blocks = profile.n_blocks if block == 0 else min(profile.n_blocks, room // block)
        paid_once = price * fixed + opening
        per_block = prices.layer_value - price * block - (paid_once / blocks if blocks else 0.0)
        fits_output = room >= profile.output_weight_bytes
        output_cost = price * profile.output_weight_bytes if fits_output else math.inf
        found.append(_Gpu(prices.layer_value, price, opening, fixed, block, blocks, per_block, output_cost))
    return found


def _fractional(gpus: Sequence[_Gpu], n_blocks: int, exactly: int | None) -> float:
    """The best value of at most ``n_blocks`` blocks (exactly ``exactly`` when given) over these
    GPUs, each taking at most its blocks, fractions allowed; past every GPU's room a forced block
    counts at the best value per block (still an upper bound: no layout places it)."""
    ranked = sorted(gpus, key=lambda gpu: gpu.per_block, reverse=True)
    wanted = n_blocks if exactly is None else exactly
    total = 0.0
    for gpu in ranked:
        if wanted <= 0 or (exactly is None and gpu.per_block <= 0):
            break
        take = min(wanted, gpu.blocks)
        total += take * gpu.per_block
        wanted -= take
    if exactly is not None and wanted > 0:
        total += wanted * (ranked[0].per_block if ranked else 0.0)
    return total


def _exact(gpus: Sequence[_Gpu], n_blocks: int, exactly: int | None) -> float:
    """The same in whole blocks per GPU, each GPU at its own value per count (a max-plus knapsack)."""
    best = np.full(n_blocks + 1, -np.inf)
    best[0] = 0.0
    for gpu in gpus:
        values = np.asarray(gpu.values)
        after = best.copy()
        for b in range(1, min(gpu.blocks, n_blocks) + 1):
            np.maximum(after[b:], best[: n_blocks + 1 - b] + values[b], out=after[b:])
        best = after
    return float(best[exactly] if exactly is not None else best.max())


def _knapsack(gpus: Sequence[_Gpu], n_blocks: int, exactly: int | None) -> float:
    return _exact(gpus, n_blocks, exactly) if len(gpus) <= EXACT_GPUS else _fractional(gpus, n_blocks, exactly)


def _best(gpus: Sequence[_Gpu], profile: MemoryProfile, prices: Prices, target: int | None, full: bool) -> float:
    """The relaxation's optimum on one set of GPUs, under the rules on GPU layers."""
    n = profile.n_blocks
    output = prices.layer_value - min((gpu.output_cost for gpu in gpus), default=math.inf)
    if full or target == n + 1:
        return _knapsack(gpus, n, n) + output  # every block and the output layer on GPUs
    if target is not None:
        # ``target`` layers: that many blocks, or one fewer and the output layer
        options = [_knapsack(gpus, n, target)] if target <= n else []
        options += [_knapsack(gpus, n, target - 1) + output] if target >= 1 else []
        return max(options, default=-math.inf)
    return _knapsack(gpus, n, None) + max(0.0, output)


def relaxed_bound(cluster: Cluster, deployment: Deployment, profile: MemoryProfile, prices: Prices) -> float:
    """No valid layout of ``deployment`` is worth more under ``prices`` (see the module docstring)."""
    params = deployment.params
    target = None if params.n_gpu_layers is None else min(params.n_gpu_layers, profile.n_layers)
    full = deployment.kind is ModelKind.IMAGE or not deployment.cpu_offloading
    # a layout with every layer on GPUs runs no partial offload (its experts may stay on the host)
    partial = (False,) if full or (target == profile.n_layers and not profile.is_moe) else (False, True)
    workers = cluster.workers
    if deployment.distributed_inference_across_workers:
        opened = min((prices.worker_open.get(w.name, 0.0) for w in workers), default=0.0)
        table = GpuTable.cached(cluster)
        arrays = _arrays(table, profile, prices, partial)
        if int(arrays.usable.sum()) > EXACT_GPUS:  # the fractional knapsack, from arrays
            one = _Arrays(
                np.zeros_like(arrays.worker), arrays.usable, arrays.per_block, arrays.blocks, arrays.output_cost
            )
            return float(_fractional_best(one, 1, profile, prices, target, full)[0]) - opened
        gpus = [gpu for worker in workers for gpu in _gpus(worker, profile, prices, partial)]
        return _best(gpus, profile, prices, target, full) - opened

    def value(w: int) -> float:
        worker = workers[w]
        best = _best(_gpus(worker, profile, prices, partial), profile, prices, target, full)
        return best - prices.worker_open.get(worker.name, 0.0)

    return best_worker(value, worker_ceilings(cluster, profile, prices, partial, target, full))


def best_worker(value: Callable[[int], float], ceilings: FloatArray) -> float:
    """The largest ``value(w)`` over the workers, where ``ceilings[w]`` is at least each: they are
    looked at in order of ceilings until no ceiling left is above the best value found (a worker
    whose ceiling only ties it, as many alike workers do, adds nothing but rounding)."""
    best = -math.inf
    for w in np.argsort(-ceilings, kind="stable"):
        if float(ceilings[w]) <= best:
            break
        best = max(best, value(int(w)))
    return best


@dataclass(frozen=True)
class _Arrays:
    """Every GPU of the fleet in the relaxation, as arrays (``_gpus`` for all workers at once)."""

    worker: IntArray
    usable: BoolArray
    """The GPU holds a device of the model (its fixed bytes)."""
    per_block: FloatArray
    blocks: IntArray
    output_cost: FloatArray


def _arrays(table: GpuTable, profile: MemoryProfile, prices: Prices, partial: tuple[bool, ...]) -> _Arrays:
    block = max(0, lightest_block_bytes(profile))
    fixed_of = {unified: least_device_bytes(profile, unified, partial) for unified in (False, True)}
    fixed = np.where(table.worker_unified[table.gpu_worker], fixed_of[True], fixed_of[False])
    room = table.gpu_vram - fixed
    price = table.row_values(prices.gpu) / MiB
    opening = table.row_values(prices.gpu_open)
    usable = room >= 0
    most = np.full(len(room), profile.n_blocks) if block == 0 else np.minimum(profile.n_blocks, room // max(1, block))
    blocks = np.where(usable, most, 0).astype(np.int64)
    paid_once = price * fixed + opening
    spread = np.divide(paid_once, blocks, out=np.zeros(len(room)), where=blocks > 0)
    per_block = prices.layer_value - price * block - spread
    fits_output = usable & (room >= profile.output_weight_bytes)
    output_cost = np.where(fits_output, price * profile.output_weight_bytes, np.inf)
    return _Arrays(table.gpu_worker, usable, per_block, blocks, output_cost)


def _fractional_best(
    arrays: _Arrays, n_workers: int, profile: MemoryProfile, prices: Prices, target: int | None, full: bool
) -> FloatArray:
    return fractional_best(
        arrays.worker,
        arrays.usable,
        arrays.per_block,
        arrays.blocks,
        arrays.output_cost,
        n_workers,
        profile.n_blocks,
        prices.layer_value,
        target,
        full,
    )


def worker_ceilings(
    cluster: Cluster, profile: MemoryProfile, prices: Prices, partial: tuple[bool, ...], target: int | None, full: bool
) -> FloatArray:
    """Per worker, at least its relaxation's optimum less its opening price: the relaxation with
    the fractional knapsack, for every worker at once (``pricing_ceilings``)."""
    table = GpuTable.cached(cluster)
    arrays = _arrays(table, profile, prices, partial)
    best = _fractional_best(arrays, len(table.workers), profile, prices, target, full)
    worker_open = np.array([prices.worker_open.get(w.name, 0.0) for w in table.workers], dtype=np.float64)
    ceilings: FloatArray = best - worker_open
    return ceilings
