"""The cluster a scheduler hands us: workers, their GPUs, free VRAM and RAM."""

from __future__ import annotations

import ipaddress
import re
from functools import cached_property
from typing import Annotated, Any, Self

from pydantic import Field, field_validator, model_validator

from layerfit.domain.base import (
    ID_NOT_A_BOOLEAN,
    NOT_A_BOOLEAN,
    Bytes,
    Frozen,
    Name,
    NonNegInt,
    PrintableName,
    exceeds,
)
from layerfit.domain.speed import PositiveFigure
from layerfit.errors import InputError

GPU_TYPES = (
    "cuda",
    "rocm",
    "musa",
    "npu",
    "metal",
    "mps",
    "vulkan",
    "sycl",
    "cann",
    "dcu",
    "dtk",
    "mlu",
    "neuware",
    "corex",
    "maca",
    "hggc",
    "unknown",
    "",
)
"""GPU runtime types as GPUStack names them in GPU ids (``worker:cuda:0``); Apple GPUs are ``mps``,
and ``""`` is GPUStack's default for a GPU whose runtime it did not detect."""


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


_GPU_REF_PATTERN = re.compile(r"^(?P<worker>[^:\s]+):(?P<type>[A-Za-z][A-Za-z0-9_]*):(?P<index>[0-9]{1,9})$")


_RPC_HOST = re.compile(r"[A-Za-z0-9_.-]{1,253}")
"""An IPv4 address or a host name (letters, digits, ``-``, ``.``; ``_`` as some resolvers take it)."""

MAX_CPU_THREADS = 4096
"""Most threads a worker is said to compute with (the largest servers have a few hundred cores)."""

MAX_GPU_INDEX = 1023
"""Largest GPU index: it names a ggml device (``CUDA3``), and ggml backends enumerate a few dozen
devices at most (CUDA: 16); a larger number is a typo or garbage, never a device."""


def _allocatable_given(data: Any, allocatable: str, total: str, of: str) -> None:
    """``allocatable`` is required, not defaulted to ``total``: what a plan may claim is the total
    less what other processes hold (a display, another model, a CUDA context), which only the
    scheduler knows; planned into the total, a deployment may not load."""
    if isinstance(data, dict) and allocatable not in data and total in data:
        raise InputError(
            allocatable,
            f"missing: give what layerfit may claim of this {of}: {total} less what other processes hold "
            "(the total if nothing else runs there); it is required, not assumed to be the total",
        )


class Gpu(Frozen):
    """One accelerator of a worker. Sizes in bytes; ``allocatable`` is what we may claim (required:
    ``_allocatable_given``)."""

    index: Annotated[int, Field(ge=0, le=MAX_GPU_INDEX), NOT_A_BOOLEAN]
    type: str = "cuda"
    name: PrintableName = ""
    total_vram_bytes: Bytes
    allocatable_vram_bytes: Bytes
    memory_bandwidth_gbps: PositiveFigure | None = None
    """Its memory bandwidth in GB/s (gigabytes), as vendors quote it; ``None``: the speed model's GPU
    table by ``name`` (``layerfit.speed.gpu_table``), or its stated default for an unknown GPU."""
    fp16_tflops: PositiveFigure | None = None
    """Its dense FP16 tensor rate in TFLOPS; ``None``: the GPU table, as for the bandwidth."""

    @model_validator(mode="before")
    @classmethod
    def _allocatable_required(cls, data: Any) -> Any:
        _allocatable_given(data, "allocatable_vram_bytes", "total_vram_bytes", "GPU's VRAM")
        return data

    @model_validator(mode="after")
    def _allocatable_within_total(self) -> Self:
        if self.allocatable_vram_bytes > self.total_vram_bytes:
            problem = exceeds(self.allocatable_vram_bytes, "total_vram_bytes", self.total_vram_bytes)
            raise InputError("allocatable_vram_bytes", problem)
        if self.type not in GPU_TYPES:
            raise InputError(
                f"gpu[{self.index}].type", f"unknown GPU type {self.type!r}; known: {', '.join(GPU_TYPES)}"
            )
        return self


class Network(Frozen):
    """A worker's link to the other workers, for the RPC traffic the speed model counts."""

    bandwidth_gbps: PositiveFigure | None = None
    """Gbit/s (gigabits), as links are quoted (1, 10, 25); ``None``: the speed model's default."""
    rtt_ms: PositiveFigure | None = None
    """Round-trip time to the other workers in milliseconds; ``None``: the speed model's default."""


class Worker(Frozen):
    """A machine that can run llama-server or rpc-server processes."""

    id: Annotated[int | str, ID_NOT_A_BOOLEAN]
    name: Name
    """What GPU ids start with (``name:cuda:0``): no ':' or white space, which would make them ambiguous."""
    address: str = ""
    """Host name or IP other workers use to reach this one's rpc-server (defaults to the name)."""
    rpc_host: str = ""
    """IPv4 address this worker's rpc-servers listen on (default: ``address`` when it is one).
    llama.cpp's rpc-server has no authentication: it binds this one interface, never 0.0.0.0."""
    labels: dict[str, str] = Field(default_factory=dict)
    unified_memory: bool = False
    """One memory pool shared by CPU and GPU (Apple silicon and similar)."""
    total_ram_bytes: Bytes
    allocatable_ram_bytes: Bytes
    """What a plan may claim of the RAM (required, as a GPU's: ``_allocatable_given``)."""
    gpus: tuple[Gpu, ...] = ()
    ram_bandwidth_gbps: PositiveFigure | None = None
    """Host RAM bandwidth in GB/s (what blocks and experts kept on the host are read at); ``None``:
    the speed model's stated default."""
    cpu_threads: Annotated[int, Field(ge=1, le=MAX_CPU_THREADS), NOT_A_BOOLEAN] | None = None
    """Threads llama.cpp computes with on this worker (``-t`` of a deployment overrides it on its
    main worker); ``None``: the speed model's stated default."""
    network: Network | None = None
    """Its link to the other workers; ``None``: the speed model's stated defaults."""

    @model_validator(mode="before")
    @classmethod
    def _allocatable_required(cls, data: Any) -> Any:
        _allocatable_given(data, "allocatable_ram_bytes", "total_ram_bytes", "worker's RAM")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.allocatable_ram_bytes > self.total_ram_bytes:
            problem = exceeds(self.allocatable_ram_bytes, "total_ram_bytes", self.total_ram_bytes)
            raise InputError("allocatable_ram_bytes", problem)
        seen: set[int] = set()
        for gpu in self.gpus:
            if gpu.index in seen:
                raise InputError(f"worker[{self.name}].gpus", f"duplicate GPU index {gpu.index}")
            seen.add(gpu.index)
        return self

    @field_validator("name")
    @classmethod
    def _one_word(cls, value: str) -> str:
        if ":" in value or any(char.isspace() for char in value):
            shown = value if len(value) <= 40 else f"{value[:40]}..."
            raise ValueError(f"{shown!r} cannot start a GPU id (worker:type:index): give a name without ':' or spaces")
        return value

    @field_validator("rpc_host")
    @classmethod
    def _one_interface(cls, value: str) -> str:
        if value and not _is_ipv4(value):
            raise InputError("rpc_host", f"{value!r} is not an IPv4 address (rpc-server binds an IPv4 literal)")
        if value and ipaddress.IPv4Address(value).is_unspecified:
            raise InputError("rpc_host", "0.0.0.0 listens on every interface; give the worker's own address")
        return value

    @property
    def rpc_bind_host(self) -> str | None:
        """The address its rpc-servers bind to; ``None`` when neither ``rpc_host`` nor ``address`` gives one."""
        if self.rpc_host:
            return self.rpc_host
        if _is_ipv4(self.address) and not ipaddress.IPv4Address(self.address).is_unspecified:
            return self.address
        return None

    @property
    def host(self) -> str:
        """Address to reach this worker's rpc-servers, as llama.cpp's ``--rpc HOST:PORT,...`` can
        carry it: it splits the list at commas and each endpoint at its first colon, so an IPv6
        address, an address with a port, or a name with a comma or white space would reach
        another host or port, or none; ``InputError`` for those."""
        host = self.address or self.name
        if not _RPC_HOST.fullmatch(host):
            field = "address" if self.address else "name (it has no address)"
            raise InputError(
                f"worker[{self.name}].{field.split()[0]}",
                f"{host[:80]!r} cannot be an RPC server's host in llama.cpp's --rpc HOST:PORT list (its {field}): "
                "give an IPv4 address or a host name, without ':', ',' or spaces",
            )
        return host

    def gpu(self, index: int) -> Gpu:
        """The GPU with this index; ``InputError`` if there is none."""
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        raise InputError(f"worker[{self.name}].gpus", f"no GPU with index {index}")

    def has_gpu(self, index: int) -> bool:
        return any(gpu.index == index for gpu in self.gpus)


class Cluster(Frozen):
    """All workers a deployment may use, with what is still allocatable on each."""

    workers: tuple[Worker, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> Self:
        ids: set[str] = set()
        names: set[str] = set()
        for worker in self.workers:
            if str(worker.id) in ids:
                raise InputError("cluster.workers", f"duplicate worker id {worker.id!r}")
            if worker.name in names:
                raise InputError("cluster.workers", f"duplicate worker name {worker.name!r}")
            ids.add(str(worker.id))
            names.add(worker.name)
        return self

    @cached_property
    def _by_name(self) -> dict[str, Worker]:
        return {worker.name: worker for worker in self.workers}

    @cached_property
    def unified_names(self) -> frozenset[str]:
        """Names of the workers with one CPU/GPU memory pool (computed once: checks ask per layout)."""
        return frozenset(worker.name for worker in self.workers if worker.unified_memory)

    def worker(self, name: str) -> Worker:
        """The worker with this name; ``InputError`` if there is none."""
        try:
            return self._by_name[name]
        except KeyError:
            raise InputError("worker", f"no worker named {name!r} in the cluster") from None

    def has_worker(self, name: str) -> bool:
        return name in self._by_name

    def gpu_id(self, worker: str, index: int) -> str:
        """The one name of a GPU everywhere in layerfit's output: ``worker:type:index``."""
        known = self.has_worker(worker) and self.worker(worker).has_gpu(index)
        return f"{worker}:{self.worker(worker).gpu(index).type if known else 'unknown'}:{index}"

    def gpu(self, ref: GpuRef) -> Gpu:
        """The GPU a reference points at; ``InputError`` naming the reference if it is unknown."""
        worker = self.worker(ref.worker)
        if not worker.has_gpu(ref.index):
            raise InputError("gpu", f"{ref} does not exist: worker {ref.worker!r} has no GPU {ref.index}")
        gpu = worker.gpu(ref.index)
        if gpu.type != ref.type:
            raise InputError("gpu", f"{ref} does not exist: GPU {ref.index} of {ref.worker!r} is {gpu.type}")
        return gpu


class GpuRef(Frozen):
    """A GPU named the way GPUStack names it: ``worker_name:type:index``."""

    worker: str = Field(min_length=1)
    type: str = "cuda"
    index: NonNegInt

    @classmethod
    def parse(cls, text: str) -> GpuRef:
        """Parse ``worker:cuda:0``; ``InputError`` naming the text when it is malformed."""
        match = _GPU_REF_PATTERN.match(text.strip())
        if match is None:
            shown = text if len(text) <= 80 else f"{text[:80]}..."
            raise InputError("gpu_selection", f"malformed GPU id {shown!r}; expected worker_name:type:index")
        return cls(worker=match["worker"], type=match["type"], index=int(match["index"]))

    def __str__(self) -> str:
        return f"{self.worker}:{self.type}:{self.index}"
