"""A first solution of the master problem: best-fit decreasing, from pins and current placements."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

from layerfit.domain.layout import Layout
from layerfit.fleet.busy import GpuKey, layout_gpus
from layerfit.fleet.master import Counts, Master


def _gpu_size(master: Master, d: int) -> int:
    """The least VRAM (bytes) any candidate of deployment ``d`` takes."""
    return min((sum(size for key, size in takes if isinstance(key, tuple)) for takes in master.loads[d]), default=0)


def gpus_used(master: Master, counts: Counts) -> int:
    return len(
        {
            key
            for d, row in enumerate(counts)
            for c, n in enumerate(row)
            if n
            for key, _ in master.loads[d][c]
            if isinstance(key, tuple)
        }
    )


def greedy(master: Master) -> Counts:
    """The better of two best-fit-decreasing passes, one taking deployments by priority then size,
    one by size alone (it packs better when all fit); a third from the seed when there is one."""
    indices = range(len(master.deployments))
    by_priority = sorted(indices, key=lambda d: (-master.weights[master.deployments[d].name], -_gpu_size(master, d)))
    by_size = sorted(indices, key=lambda d: -_gpu_size(master, d))
    passes = [best_fit(master, by_priority), best_fit(master, by_size)]
    if master.seed:
        passes.append(best_fit(master, by_priority, master.seed))
    return max(passes, key=lambda counts: (*master.tier_values(counts)[:2], -gpus_used(master, counts)))


class _Packing:
    """Free bytes per resource and replicas per candidate while packing."""

    def __init__(self, master: Master) -> None:
        self.master = master
        self.free = dict(master.capacity)
        self.counts: Counts = [[0] * len(options) for options in master.candidates]
        self.left = [deployment.replicas for deployment in master.deployments]
        self.layers = master.gpu_layers
        self.gpus = [[[(k, n) for k, n in takes if isinstance(k, tuple)] for takes in row] for row in master.loads]
        self.busy = master.busy if master.busy is not None and master.busy.has_limits else None
        self.on: Counter[GpuKey] = Counter()
        """Replicas placed per GPU, where a deployment sets a minimum speed."""
        self.limited_on: dict[GpuKey, set[tuple[int, int]]] = defaultdict(set)
        """Per GPU: the placed candidates with a minimum speed that use it."""

    def fits(self, d: int, c: int) -> bool:
        free = self.free
        return all(free[key] >= n_bytes for key, n_bytes in self.master.loads[d][c]) and self.keeps_minimums(d, c)

    def keeps_minimums(self, d: int, c: int) -> bool:
        """One more replica on candidate ``c`` keeps its own busy time and that of every placed
        replica on its GPUs within their minimums (``busy`` module)."""
        busy = self.busy
        if busy is None:
            return True
        gpus = layout_gpus(self.master.layouts[d][c])
        others = {(d, c)} if busy.limits[d] is not None else set()
        for gpu in gpus:
            others |= self.limited_on[gpu]
        for other_d, other_c in others:
            time, limit = busy.times[other_d][other_c], busy.limits[other_d]
            if time is None or limit is None:
                continue
            on = {gpu: self.on[gpu] + (gpu in gpus) for gpu, _ in time.shares_us}
            if time.time_us(on) > limit:
                return False
        return True

    def take(self, d: int, c: int) -> bool:
        if not self.fits(d, c):
            return False
        for key, n_bytes in self.master.loads[d][c]:
            self.free[key] -= n_bytes
        if self.busy is not None:
            gpus = layout_gpus(self.master.layouts[d][c])
            self.on.update(gpus)
            if self.busy.limits[d] is not None:
                for gpu in gpus:
                    self.limited_on[gpu].add((d, c))
        self.counts[d][c] += 1
        self.left[d] -= 1
        return True

    def fit_score(self, d: int, c: int) -> tuple[int, int]:
        """GPUs the candidate would open, then the VRAM it would leave free on its GPUs."""
        free, capacity = self.free, self.master.capacity
        gpus = self.gpus[d][c]
        opened = sum(1 for key, _ in gpus if free[key] == capacity[key])
        return opened, sum(free[key] - n_bytes for key, n_bytes in gpus)

    def take_wanted(self, wanted: Mapping[str, Counter[Layout]]) -> None:
        for d, deployment in enumerate(self.master.deployments):
            here = wanted.get(deployment.name)
            if not here:
                continue
            for c, (layout, _) in enumerate(self.master.candidates[d]):
                missing = here.get(layout, 0) - self.counts[d][c]
                for _ in range(min(missing, self.left[d])):
                    self.take(d, c)

    def take_best(self, d: int) -> None:
        """Replicas of ``d`` on the candidate with the most GPU layers, fewest new GPUs, tightest fit."""
        layers = self.layers[d]
        while self.left[d] > 0:
            fitting = [c for c in range(len(layers)) if self.fits(d, c)]
            if not fitting:
                break
            most = max(layers[c] for c in fitting)
            best = min((c for c in fitting if layers[c] == most), key=lambda c: self.fit_score(d, c))
            self.take(d, best)


def best_fit(master: Master, order: Sequence[int], preferred: Mapping[str, Counter[Layout]] | None = None) -> Counts:
    """Pinned replicas, then replicas kept where they run (then ``preferred`` layouts), then the
    rest in ``order``, each on the candidate with the most layers on GPUs that opens the fewest
    GPUs and fits tightest."""
    packing = _Packing(master)
    for wanted in (master.pins, master.current, preferred or {}):
        packing.take_wanted(wanted)
    for d in order:
        packing.take_best(d)
    return packing.counts
