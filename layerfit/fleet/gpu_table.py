"""The cluster's GPUs and workers as arrays, built once per fleet plan.

Candidate generation asks, per group of identical deployments, which GPUs a single-GPU full
offload fits on and which workers' GPUs together can hold the model. A pass over every GPU and
worker in Python per group made that groups x GPUs steps (8,192 groups on 30,000 GPUs: minutes);
here each question is a few array operations over presorted columns.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from layerfit.domain.cluster import Cluster, Worker

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

KEPT_TABLES = 2
"""Clusters (and price mappings per table) whose arrays are kept for the next question."""
SMALL_MAPPING = 64
"""Mappings up to this size are read again rather than remembered."""


@dataclass(frozen=True, eq=False)
class GpuTable:
    """Every GPU (rows in cluster order: workers in order, each worker's GPUs as listed) and every
    worker of a cluster, as columns."""

    workers: tuple[Worker, ...]
    gpu_worker: IntArray
    """Per GPU: its worker's position."""
    gpu_index: IntArray
    gpu_vram: IntArray
    """Per GPU: allocatable VRAM."""
    by_room: IntArray
    """GPU rows by (allocatable VRAM, worker name, index)."""
    worker_ram: IntArray
    worker_unified: BoolArray
    worker_gpus: IntArray
    worker_vram: IntArray
    """Per worker: allocatable VRAM of all its GPUs."""
    by_vram: IntArray
    """Worker positions by (allocatable VRAM of all GPUs, name)."""

    @classmethod
    def of(cls, cluster: Cluster) -> GpuTable:
        workers = cluster.workers
        rows = [(w, gpu.index, gpu.allocatable_vram_bytes) for w, worker in enumerate(workers) for gpu in worker.gpus]
        gpu_worker = np.array([row[0] for row in rows], dtype=np.int64)
        gpu_index = np.array([row[1] for row in rows], dtype=np.int64)
        gpu_vram = np.array([row[2] for row in rows], dtype=np.int64)
        names = np.array([worker.name for worker in workers], dtype=object)
        rank = _name_rank(names)
        by_room = np.lexsort((gpu_index, rank[gpu_worker], gpu_vram)) if rows else np.zeros(0, dtype=np.int64)
        worker_vram = np.array([sum(g.allocatable_vram_bytes for g in w.gpus) for w in workers], dtype=np.int64)
        return cls(
            workers=workers,
            gpu_worker=gpu_worker,
            gpu_index=gpu_index,
            gpu_vram=gpu_vram,
            by_room=by_room.astype(np.int64),
            worker_ram=np.array([w.allocatable_ram_bytes for w in workers], dtype=np.int64),
            worker_unified=np.array([w.unified_memory for w in workers], dtype=np.bool_),
            worker_gpus=np.array([len(w.gpus) for w in workers], dtype=np.int64),
            worker_vram=worker_vram,
            by_vram=np.lexsort((rank, worker_vram)).astype(np.int64),
        )

    @classmethod
    def cached(cls, cluster: Cluster) -> GpuTable:
        """The table of this cluster object, built once while it is among the last few asked for."""
        for known, table in _TABLES:
            if known is cluster:
                return table
        table = cls.of(cluster)
        _TABLES.insert(0, (cluster, table))
        del _TABLES[KEPT_TABLES:]
        return table

    def row_values(self, values: Mapping[tuple[str, int], float]) -> FloatArray:
        """Per GPU row, its value in ``values`` (0 where it has none); the last few mappings
        asked for are remembered (every pricing problem of one LP shares its GPU prices)."""
        for known, array in self._rows_of_values:
            if known is values:
                return array
        array = np.zeros(len(self.gpu_vram), dtype=np.float64)
        for key, value in values.items():
            row = self._row_of.get(key)
            if row is not None:
                array[row] = value
        if len(values) > SMALL_MAPPING:
            self._rows_of_values.insert(0, (values, array))
            del self._rows_of_values[KEPT_TABLES:]
        return array

    @cached_property
    def _rows_of_values(self) -> list[tuple[Mapping[tuple[str, int], float], FloatArray]]:
        return []

    @cached_property
    def _row_of(self) -> dict[tuple[str, int], int]:
        pairs = zip(self.gpu_worker, self.gpu_index, strict=True)
        return {(self.workers[w].name, int(i)): r for r, (w, i) in enumerate(pairs)}

    def selected(self, gpus: Collection[tuple[str, int]] | None) -> BoolArray:
        """The GPU rows a manual selection names (every row without one)."""
        mask = np.ones(len(self.gpu_vram), dtype=np.bool_)
        if gpus is None:
            return mask
        mask[:] = False
        for key in gpus:
            row = self._row_of.get(key)
            if row is not None:
                mask[row] = True
        return mask

    def first_of_kind(self, mask: BoolArray, unified: bool) -> int | None:
        """The first GPU row in ``mask`` on a worker of this memory kind, in cluster order."""
        rows = np.flatnonzero(mask & (self.worker_unified[self.gpu_worker] == unified))
        return int(rows[0]) if len(rows) else None

    def fitting(self, mask: BoolArray, unified: bool, vram: int, ram: int) -> BoolArray:
        """The GPU rows in ``mask`` of this memory kind with ``vram`` allocatable and ``ram`` on their worker."""
        kind = self.worker_unified[self.gpu_worker] == unified
        fits: BoolArray = mask & kind & (self.gpu_vram >= vram) & (self.worker_ram[self.gpu_worker] >= ram)
        return fits

    def gpu(self, row: int) -> tuple[Worker, int]:
        return self.workers[int(self.gpu_worker[row])], int(self.gpu_index[row])

    def hosts(self, needed: int, named: Collection[str] | None) -> list[Worker]:
        """Workers with several GPUs whose allocatable VRAM together is at least ``needed``, by
        that VRAM then name (only those ``named``, when given)."""
        order = self.by_vram
        keep = (self.worker_gpus[order] > 1) & (self.worker_vram[order] >= needed)
        chosen = [self.workers[int(w)] for w in order[keep]]
        return chosen if named is None else [worker for worker in chosen if worker.name in named]


def _name_rank(names: npt.NDArray[np.object_]) -> IntArray:
    """Each name's place in sorted order (Python's string order)."""
    order = sorted(range(len(names)), key=lambda i: str(names[i]))
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names), dtype=np.int64)
    return rank


_TABLES: list[tuple[Cluster, GpuTable]] = []
