"""Plan: the answer for one deployment — status, layout, claims, reasons, command lines."""

from __future__ import annotations

import shlex
from enum import StrEnum
from typing import Literal

from pydantic import Field, computed_field

from layerfit.domain.base import SCHEMA_VERSION, Frozen, Itemised, NonNegInt
from layerfit.domain.layout import Claims, Layout
from layerfit.domain.speed import SpeedPrediction, SpeedTerm


class Status(StrEnum):
    OPTIMAL = "optimal"
    """Proven best under the objective tiers."""
    FEASIBLE = "feasible"
    """Valid, not proven best (heuristic answer, or the solver stopped at its time limit)."""
    INFEASIBLE = "infeasible"
    """Nothing fits; ``reasons`` say why."""
    UNKNOWN = "unknown"
    """No answer within the time limit."""


class StrategyClass(StrEnum):
    """GPUStack's five strategy classes, which a layout falls into."""

    SINGLE_GPU = "single_gpu"
    MULTI_GPU = "multi_gpu"
    DISTRIBUTED = "distributed"
    PARTIAL_OFFLOAD = "partial_offload"
    CPU_ONLY = "cpu_only"


def strategy_class(layout: Layout) -> StrategyClass:
    """Which of GPUStack's five strategy classes a layout falls into."""
    if not layout.devices:
        return StrategyClass.CPU_ONLY
    if not layout.full_offload:
        return StrategyClass.PARTIAL_OFFLOAD
    if layout.rpc_devices:
        return StrategyClass.DISTRIBUTED
    return StrategyClass.MULTI_GPU if len(layout.devices) > 1 else StrategyClass.SINGLE_GPU


class ReasonKind(StrEnum):
    """Why a layout is rejected or a deployment does not fit."""

    INSUFFICIENT_VRAM = "insufficient_vram"
    INSUFFICIENT_RAM = "insufficient_ram"
    INSUFFICIENT_UNIFIED_MEMORY = "insufficient_unified_memory"
    UNKNOWN_WORKER = "unknown_worker"
    UNKNOWN_GPU = "unknown_gpu"
    INVALID_PARAMETER = "invalid_parameter"
    GPU_LAYERS_NOT_HONOURED = "gpu_layers_not_honoured"
    TENSOR_SPLIT_NOT_HONOURED = "tensor_split_not_honoured"
    SELECTION_IGNORED = "selection_ignored"
    CPU_OFFLOAD_NOT_ALLOWED = "cpu_offload_not_allowed"
    DISTRIBUTION_NOT_ALLOWED = "distribution_not_allowed"
    TOO_MANY_RPC_SERVERS = "too_many_rpc_servers"
    TOO_MANY_RPC_CANDIDATES = "too_many_rpc_candidates"
    TOO_MANY_DEVICES = "too_many_devices"
    """More devices (RPC servers + local GPUs) than one llama.cpp process runs (``domain.limits``)."""
    IMAGE_MODEL_SPLIT = "image_model_split"
    OFFLOAD_ORDER = "offload_order"
    EXPERTS_NOT_HONOURED = "experts_not_honoured"
    """Experts on the host where the model has none, or not where the user's tensor overrides say."""
    BLOCK_COUNT_MISMATCH = "block_count_mismatch"
    CLAIMS_MISMATCH = "claims_mismatch"
    NO_CANDIDATE = "no_candidate"
    STRATEGY_SKIPPED = "strategy_skipped"
    """A strategy was not tried; ``resource`` names the parameter or rule that ruled it out."""
    PIN_BROKEN = "pin_broken"
    TOO_SLOW = "too_slow"
    """The layout's predicted decode speed is below the deployment's ``min_decode_tokens_per_s``."""


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Reason(Frozen):
    """A typed, machine-actionable reason, with a sentence for people."""

    kind: ReasonKind
    message: str
    severity: Severity = Severity.ERROR
    strategy: str | None = None
    resource: str | None = None
    """``vram``, ``ram``, ``unified`` or a parameter name."""
    needed_bytes: NonNegInt | None = None
    available_bytes: int | None = None
    worker: str | None = None
    gpu_index: NonNegInt | None = None

    @property
    def shortfall_bytes(self) -> int | None:
        if self.needed_bytes is None or self.available_bytes is None:
            return None
        return max(0, self.needed_bytes - self.available_bytes)


class Candidate(Frozen):
    """One valid layout with its claims."""

    layout: Layout
    claims: Claims
    strategy: StrategyClass
    score: float = 0.0
    """Placement score (higher is better under the configured policy)."""
    speed: SpeedPrediction | None = None
    """Its predicted decode and prompt speed (``layerfit.speed.predict``); ``None`` only inside the
    engines, before the planner adds it."""


class EngineStats(Frozen):
    """What one engine did: timings and, for the solver, bound and gap."""

    engine: str
    wall_time_s: float = Field(ge=0)
    status: Status
    objective: float | None = None
    bound: float | None = None
    details: dict[str, float | int | str] = Field(default_factory=dict)
    safety_stops: tuple[str, ...] = ()
    """The stages of this engine the wall clock (the time limit's safety stop) cut short, not their
    work budget: only then may the same input give another answer on another run."""


class Command(Frozen):
    """One process to start: ``llama-server`` on the main worker or an ``rpc-server``."""

    worker: str
    program: str
    argv: tuple[str, ...]
    env: dict[str, str] = Field(default_factory=dict)
    """Environment the process needs (only the GPUs it may see, on a worker with more than its
    backend takes: ``CUDA_VISIBLE_DEVICES``; CUDA's numbering in PCI order on a worker of mixed
    CUDA GPUs: ``CUDA_DEVICE_ORDER``); empty for most."""

    @property
    def line(self) -> str:
        """The command as a POSIX shell runs it: ``VAR=value`` assignments, then the program."""
        assignments = [f"{name}={shlex.quote(value)}" for name, value in self.env.items()]
        return " ".join([*assignments, shlex.join((self.program, *self.argv))])


class MemoryNeed(Frozen):
    """Allocatable memory one GPU, or one worker's RAM (``gpu_index`` ``None``), lacks for a layout."""

    worker: str
    gpu_index: NonNegInt | None = None
    resource: Literal["vram", "ram", "unified"]
    short_bytes: NonNegInt
    """How much more would have to be allocatable."""
    needed_bytes: NonNegInt
    """What would have to be allocatable: what is now, plus ``short_bytes``."""
    total_bytes: NonNegInt
    """What the hardware has in all (``total_vram_bytes``, ``total_ram_bytes``)."""

    @property
    def within_hardware(self) -> bool:
        """Whether freeing memory that other processes hold can give it: the need is within the total."""
        return self.needed_bytes <= self.total_bytes


class Relaxation(Frozen):
    """A change to the request or the cluster that places the deployment: re-planned with the change
    (``layerfit.planning.explain.applied``), the model is placed. ``more_hardware`` and ``faster_gpu``
    (``BEYOND_HARDWARE``) are not changes to make here: what the hardware lacks, beyond what it has."""

    kind: str
    """``allow_cpu_offloading``, ``allow_distribution``, ``experts_on_host``, ``experts_on_gpus``,
    ``ctx_size``, ``min_decode_tokens_per_s``, ``free_vram``, ``free_ram``, ``more_hardware``,
    ``faster_gpu``."""
    message: str
    value: int | None = None
    """The new ctx size, the bytes to free (or lacking), the blocks whose experts would stay on the
    host, or (``faster_gpu``) the memory bandwidth in GB/s the GPU would need."""
    tokens_per_s: float | None = None
    """For ``min_decode_tokens_per_s``: the minimum to set (rounded down from what the fastest layout
    that fits is predicted at, so that it meets it)."""
    worker: str | None = None
    gpu_index: NonNegInt | None = None
    gpu_layers: NonNegInt | None = None
    """Layers on GPUs the relaxed request would reach."""
    layout: Layout | None = None
    """For ``free_vram``/``free_ram``/``more_hardware``: the full offload that fits once the memory is there."""
    memory: tuple[MemoryNeed, ...] = ()
    """For ``free_vram``/``free_ram``/``more_hardware``: each GPU or worker short, and by how much."""
    host_expert_blocks: tuple[NonNegInt, ...] = ()
    """For ``experts_on_host``: the blocks whose experts stay in host RAM."""
    parameters: tuple[str, ...] = ()
    """For ``experts_on_host`` and ``experts_on_gpus`` of a GGUF file: the llama.cpp flags that keep
    the experts on the host, to add to the backend parameters."""
    removed_parameters: tuple[str, ...] = ()
    """For ``experts_on_gpus`` of a GGUF file: the deployment's expert flags to take out of its
    backend parameters (``parameters`` go in their place)."""
    cpu_offloading: bool = False
    """For ``experts_on_host``: CPU offloading is turned on too (experts in host RAM need it)."""


BEYOND_HARDWARE = frozenset({"more_hardware", "faster_gpu"})
"""The relaxations that are not a change to make here: what the hardware lacks."""


class SpeedShortfall(Frozen):
    """Why a deployment whose layouts fit in memory does not place: the fastest of them is predicted
    slower than its ``min_decode_tokens_per_s`` (the deployment planned without the minimum, under
    ``objective: speed``)."""

    minimum_tokens_per_s: float
    fastest: Candidate
    """The fastest layout that fits, with its predicted speed."""
    proven: bool
    """The solver proved it the fastest; else it is the fastest one found within the work budget."""
    dominant: SpeedTerm
    """The term of its decode time that takes the most."""
    message: str


class DeviceUse(Itemised):
    """One GPU of a layout under its two names, against what it has free."""

    gpu_id: str
    """``worker:type:index``: the name layerfit uses for this GPU everywhere."""
    llama_device: str
    """What llama.cpp's ``--device`` calls it on the main worker: ``CUDA0``, ``MTL0``, ``RPC0``..."""
    gpu_name: str = ""
    """The model name the cluster gives (``RTX 4090``), if any."""
    allocatable_bytes: int
    needed_bytes: NonNegInt

    @computed_field  # type: ignore[prop-decorator]
    @property
    def free_after_bytes(self) -> int:
        """Allocatable minus needed: negative when the layout does not fit on this GPU."""
        return self.allocatable_bytes - self.needed_bytes


class WorkerUse(Itemised):
    """One worker's RAM (or, with unified memory, its single pool) against what it has free."""

    worker: str
    unified_memory: bool = False
    allocatable_bytes: int
    needed_bytes: NonNegInt
    """RAM claims; for a unified-memory worker, RAM and VRAM claims together (one pool)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def free_after_bytes(self) -> int:
        """Allocatable minus needed: negative when the layout does not fit on this worker."""
        return self.allocatable_bytes - self.needed_bytes


class Plan(Frozen):
    """The answer for one deployment."""

    schema_version: Literal[1] = SCHEMA_VERSION
    """Version of this JSON shape (``layerfit schema plan``)."""
    deployment: str
    status: Status
    best: Candidate | None = None
    alternatives: tuple[Candidate, ...] = ()
    reasons: tuple[Reason, ...] = ()
    messages: tuple[str, ...] = ()
    """Sentences for people (GPUStack-style advice when nothing fits)."""
    stats: tuple[EngineStats, ...] = ()
    commands: tuple[Command, ...] = ()
    relaxations: tuple[Relaxation, ...] = ()
    """When nothing fits: the smallest changes that would make it fit, most useful first."""
    too_slow: SpeedShortfall | None = None
    """When layouts fit in memory but every one is predicted slower than the deployment's
    ``min_decode_tokens_per_s``: the fastest of them, and what dominates its time (with ``explain``)."""
    device_use: tuple[DeviceUse, ...] = ()
    """The best layout's GPUs, in llama.cpp device order: names and free memory after the plan."""
    worker_use: tuple[WorkerUse, ...] = ()
    """The best layout's workers, main first: RAM (or unified pool) free after the plan."""

    @property
    def layout(self) -> Layout | None:
        return None if self.best is None else self.best.layout

    @property
    def claims(self) -> Claims | None:
        return None if self.best is None else self.best.claims

    @property
    def strategy(self) -> StrategyClass | None:
        return None if self.best is None else self.best.strategy

    @property
    def time_cuts(self) -> tuple[str, ...]:
        """The engines the wall clock cut short (their ``safety_stops``): only then may the same input
        give another plan on another run. (A work budget cuts a stage, ``truncated``, at the same
        point on every run.)"""
        return tuple(stats.engine for stats in self.stats if stats.safety_stops)
