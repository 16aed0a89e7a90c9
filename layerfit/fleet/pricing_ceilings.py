"""Per worker, the pricing relaxation with the fractional knapsack, for every worker at once.

``pricing_bound`` takes, for a deployment that runs on one worker, the best worker's relaxation in
whole blocks per GPU (a max-plus knapsack per worker: about a millisecond each, seconds over the
3,000 workers of a large fleet, for every pricing problem). The fractional knapsack (each GPU's
fixed bytes and opening price spread over the blocks it can hold) bounds it from above, and over
arrays it takes a few operations for all workers together: the workers are then looked at best
ceiling first, and those whose ceiling cannot beat the best value found are passed over.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def _fractional(
    worker: IntArray,
    usable: BoolArray,
    per_block: FloatArray,
    blocks: IntArray,
    n_workers: int,
    wanted: int,
    forced: bool,
) -> FloatArray:
    """Per worker, ``pricing_bound._fractional`` over its usable GPUs: the best value of at most
    ``wanted`` blocks (exactly, when ``forced``, a forced block past every GPU's room counted at
    the best value per block)."""
    order = np.lexsort((-per_block, ~usable, worker))  # by worker, usable first, best per block first
    w, ok, value, room = worker[order], usable[order], per_block[order], np.where(usable, blocks, 0)[order]
    taken = ok if forced else ok & (value > 0)  # without a count, the GPUs worth nothing end the greedy pass
    room = np.where(taken, room, 0)
    before = np.cumsum(room) - room
    first = np.searchsorted(w, np.arange(n_workers))
    start = np.where(first < len(w), before[np.minimum(first, max(0, len(w) - 1))], 0) if len(w) else first
    take = np.clip(wanted - (before - start[w]), 0, room)
    total = np.bincount(w, weights=take * value, minlength=n_workers) if len(w) else np.zeros(n_workers)
    if forced:
        left = wanted - np.bincount(w, weights=take, minlength=n_workers) if len(w) else np.full(n_workers, wanted)
        best = np.full(n_workers, -np.inf)
        np.maximum.at(best, w[ok], value[ok])
        total = total + np.maximum(left, 0) * np.where(np.isfinite(best), best, 0.0)
    result: FloatArray = total.astype(np.float64)
    return result


def fractional_best(
    worker: IntArray,
    usable: BoolArray,
    per_block: FloatArray,
    blocks: IntArray,
    output_cost: FloatArray,
    n_workers: int,
    n_blocks: int,
    layer_value: float,
    target: int | None,
    full: bool,
) -> FloatArray:
    """Per worker, ``pricing_bound._best`` over its usable GPUs with the fractional knapsack (at
    least the one in whole blocks): ``worker``, ``usable`` (the GPU holds a device of the model),
    ``per_block``, ``blocks`` and ``output_cost`` per GPU."""
    cheapest = np.full(n_workers, np.inf)
    np.minimum.at(cheapest, worker[usable], output_cost[usable])
    output = layer_value - cheapest

    def knapsack(wanted: int, forced: bool) -> FloatArray:
        return _fractional(worker, usable, per_block, blocks, n_workers, wanted, forced)

    if full or target == n_blocks + 1:
        result: FloatArray = knapsack(n_blocks, True) + output
        return result
    if target is not None:
        options = [knapsack(target, True)] if target <= n_blocks else []
        options += [knapsack(target - 1, True) + output] if target >= 1 else []
        return np.maximum.reduce(options) if options else np.full(n_workers, -math.inf)
    result = knapsack(n_blocks, False) + np.maximum(0.0, output)
    return result
