"""The search context: one deployment on one cluster, prepared once and shared by every strategy."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.plan import Reason
from layerfit.domain.profile import DeviceRole, MemoryProfile
from layerfit.heuristics.budget import SearchBudget
from layerfit.heuristics.evaluate import Evaluator, Verdict
from layerfit.heuristics.notes import Note
from layerfit.heuristics.placement import Placement
from layerfit.heuristics.views import GpuView, Selection, WorkerView, gpu_views, worker_views
from layerfit.memory import claims
from layerfit.selection import tensor_split_in_force


@dataclass(frozen=True)
class Context:
    """Cluster views, the deployment's rules and the memoised evaluator."""

    cluster: Cluster
    deployment: Deployment
    profile: MemoryProfile
    config: PlannerConfig
    evaluator: Evaluator
    workers: tuple[WorkerView, ...]
    """Workers with anything allocatable, most usable VRAM first."""
    gpus: tuple[GpuView, ...]
    """Usable GPUs of all workers, largest first."""
    gpu_layers: int | None
    """``-ngl``, capped at the model's layer count as llama.cpp does."""
    tensor_split: tuple[float, ...] | None
    selection: Selection | None
    """The manual GPU selection (``None`` when absent); never overridden."""
    budget: SearchBudget = field(default_factory=SearchBudget, compare=False)
    """What the combinatorial searches may still spend (mutable)."""
    _main_ram: dict[int, int] = field(default_factory=dict, repr=False, compare=False)
    """Memo of ``main_ram_at``."""

    @property
    def n_layers(self) -> int:
        """Blocks plus the output layer: what full offload means for ``-ngl``."""
        return self.profile.n_layers

    @cached_property
    def unified_workers(self) -> frozenset[str]:
        return frozenset(worker.name for worker in self.cluster.workers if worker.unified_memory)

    @cached_property
    def _by_name(self) -> dict[str, WorkerView]:
        return {worker.name: worker for worker in self.workers}

    def worker(self, name: str) -> WorkerView:
        return self._by_name[name]

    @cached_property
    def _smallest_block_bytes(self) -> int:
        return min(w + kv for w, kv in zip(self.profile.block_weight_bytes, self.profile.block_kv_bytes, strict=True))

    def local_floor(self, unified: bool) -> int:
        """The least VRAM a main-worker GPU needs to hold one layer (a block or the output layer)."""
        least = self.evaluator.least_overhead
        local = (DeviceRole.MAIN, DeviceRole.LOCAL)
        return min(self._smallest_block_bytes + least(local, unified, False), least(local, unified, True))

    def rpc_floor(self, unified: bool) -> int:
        """The least VRAM an RPC server's GPU needs to hold one block."""
        return self._smallest_block_bytes + self.evaluator.least_overhead((DeviceRole.RPC,), unified, False)

    def main_ram_at(self, n_gpu_layers: int) -> int:
        """The least RAM a main worker needs with ``n_gpu_layers`` layers on its devices.

        The host part depends on the layer count and on whether one or several devices share the
        layers, not on the split; the smaller of the two. Does not grow with ``n_gpu_layers``.
        """
        cached = self._main_ram.get(n_gpu_layers)
        if cached is None:
            cached = min(
                claims(self.profile, self.evaluator.shape(n_gpu_layers, shares)).workers[0].ram_bytes
                for shares in ((1.0,), (1.0, 1.0))
            )
            self._main_ram[n_gpu_layers] = cached
        return cached

    @cached_property
    def main_ram_floor(self) -> int:
        """The least RAM a main worker needs for any layer count the deployment allows on GPUs."""
        if self.gpu_layers is not None and self.gpu_layers > 0:
            return self.main_ram_at(self.gpu_layers)
        if not self.deployment.cpu_offloading:
            return self.main_ram_at(self.n_layers)
        return min(self.main_ram_at(self.n_layers), self.main_ram_at(self.n_layers - 1))

    def hopeless(self, verdict: Verdict) -> bool:
        """The main worker is short of RAM here and would be with fewer layers on GPUs too."""
        count = verdict.n_gpu_layers
        if not verdict.main_short or count >= self.n_layers or count <= 1:
            return False
        return self.main_ram_at(count - 1) > verdict.placement.main.ram_bytes

    def evaluate(self, where: Placement, n_gpu_layers: int) -> Verdict:
        return self.evaluator.evaluate(where, n_gpu_layers)


@dataclass(frozen=True)
class StrategyResult:
    """What one strategy found: fitting verdicts, typed reasons and notes for people."""

    found: tuple[Verdict, ...] = ()
    reasons: tuple[Reason, ...] = ()
    notes: tuple[Note, ...] = ()


@dataclass(frozen=True)
class Skip:
    """Why a strategy is not tried, and the note GPUStack leaves for it, if any."""

    reason: Reason
    notes: tuple[Note, ...] = field(default=())


def build_context(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    selection: Selection | None,
    budget: SearchBudget | None = None,
) -> Context:
    """Views and evaluator for one search; ``selection`` is the selection in force."""
    workers = worker_views(cluster, selection)
    params = deployment.params
    gpu_layers = None if params.n_gpu_layers is None else min(params.n_gpu_layers, profile.n_layers)
    return Context(
        cluster=cluster,
        deployment=deployment,
        profile=profile,
        config=config,
        evaluator=Evaluator(profile, config.offload_order),
        workers=workers,
        gpus=gpu_views(workers, cluster),
        gpu_layers=gpu_layers,
        tensor_split=tensor_split_in_force(deployment, config),
        selection=selection,
        budget=budget if budget is not None else SearchBudget(),
    )
