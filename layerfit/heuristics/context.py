"""The search context: one deployment on one cluster, prepared once and shared by every strategy."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from layerfit.budget.heuristic import SearchBudget
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import OffloadOrder, PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.plan import Reason
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.selection import tensor_split_in_force
from layerfit.heuristics.evaluate import Evaluator, Verdict
from layerfit.heuristics.notes import Note
from layerfit.heuristics.placement import Placement
from layerfit.heuristics.views import GpuView, Selection, WorkerView, gpu_views, worker_views
from layerfit.memory import claims, layout_from_flags


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
    _floors: dict[tuple[str, bool], int] = field(default_factory=dict, repr=False, compare=False)
    """Memo of ``local_floor`` and ``rpc_floor``."""

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

    def local_floor(self, unified: bool) -> int:
        """GPUStack's "single layer VRAM": what one device needs at ``-ngl 1``, the least VRAM a GPU
        of the main worker must have to be used at all (and a selected GPU, in the pre-check)."""
        key = ("local", unified)
        if key not in self._floors:
            layout = self.evaluator.shape(1, (1.0,))
            needed = claims(self.profile, layout, frozenset({layout.main_worker}) if unified else frozenset())
            self._floors[key] = needed.vram_bytes(layout.main_worker, 0)
        return self._floors[key]

    def rpc_floor(self, unified: bool) -> int:
        """GPUStack's RPC "single layer VRAM": what an RPC server's GPU needs holding one layer of a
        split over it and one main-worker GPU, at the fewest ``-ngl`` that gives it one."""
        key = ("rpc", unified)
        if key not in self._floors:
            self._floors[key] = _rpc_single_layer_vram(self.profile, self.config.offload_order, unified)
        return self._floors[key]

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

    def in_time(self) -> bool:
        """Whether the searches may go on (``SearchBudget.in_time`` with the evaluations so far)."""
        return self.budget.in_time(self.evaluator.evaluations)

    def spend_rpc_combination(self) -> bool:
        """Count one RPC combination (``SearchBudget.spend_rpc_combination``)."""
        return self.budget.spend_rpc_combination(self.evaluator.evaluations)


def _rpc_single_layer_vram(profile: MemoryProfile, order: OffloadOrder, unified: bool) -> int:
    """The RPC device's VRAM in GPUStack's probe layout (``-ts 1,1``: the server, then the main GPU)
    at the fewest ``-ngl`` that puts one layer on it."""
    devices = (("rpc", 0), ("main", 0))
    for layers in range(1, profile.n_layers + 1):
        layout = layout_from_flags("main", devices, profile.n_blocks, layers, (1.0, 1.0), order)
        server = next((device for device in layout.devices if device.worker == "rpc"), None)
        if server is None:
            continue
        held = server.blocks + (layout.output_offloaded and layout.devices[-1] is server)
        if held >= 1:
            return claims(profile, layout, frozenset({"rpc", "main"}) if unified else frozenset()).vram_bytes("rpc", 0)
    return 0


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
