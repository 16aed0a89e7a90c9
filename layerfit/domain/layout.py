"""Layout (where every layer goes) and Claims (what that costs on every device and worker)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from typing import Self

from pydantic import Field, computed_field, model_validator

from layerfit.domain.base import Bytes, Frozen, Itemised, NonNegInt, strictly_ascending
from layerfit.domain.profile import DeviceRole
from layerfit.errors import InputError


class DeviceAssignment(Frozen):
    """One GPU in a layout and how many transformer blocks it holds."""

    worker: str
    gpu_index: NonNegInt
    blocks: NonNegInt


class Layout(Frozen):
    """Where the layers go, in llama.cpp's device order.

    ``devices`` lists RPC servers first (GPUs of other workers, in ``--rpc`` order), then the main
    worker's own GPUs (in ``--device`` order). Blocks ``0 .. cpu_blocks-1`` stay on the host; the
    rest fill the devices contiguously in order. The output layer, when offloaded, sits on the last
    device; the token embedding always stays on the host. ``host_expert_blocks`` names GPU-resident
    blocks of a MoE model whose expert tensors stay in host RAM (``--n-cpu-moe``, ``-ot ...=CPU``).
    """

    main_worker: str
    n_blocks: NonNegInt
    devices: tuple[DeviceAssignment, ...] = ()
    output_offloaded: bool = False
    host_expert_blocks: tuple[NonNegInt, ...] = ()
    """Blocks on GPUs whose experts stay on the host, ascending (blocks on the host keep theirs there)."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        seen: set[tuple[str, int]] = set()
        local_seen = False
        for position, device in enumerate(self.devices):
            key = (device.worker, device.gpu_index)
            if key in seen:
                raise InputError("layout.devices", f"GPU {device.worker}:{device.gpu_index} appears twice")
            seen.add(key)
            if device.worker == self.main_worker:
                local_seen = True
            elif local_seen:
                raise InputError("layout.devices", "RPC servers must come before the main worker's GPUs")
            is_last = position == len(self.devices) - 1
            if device.blocks == 0 and not (is_last and self.output_offloaded):
                raise InputError("layout.devices", f"GPU {device.worker}:{device.gpu_index} holds no layer")
        if self.gpu_blocks > self.n_blocks:
            raise InputError("layout.devices", f"{self.gpu_blocks} blocks placed but the model has {self.n_blocks}")
        if self.output_offloaded and not self.devices:
            raise InputError("layout.output_offloaded", "the output layer cannot be offloaded without a GPU")
        experts = self.host_expert_blocks
        if not strictly_ascending(experts):
            raise InputError("layout.host_expert_blocks", f"must be ascending without repeats, got {list(experts)}")
        if experts and (experts[0] < self.cpu_blocks or experts[-1] >= self.n_blocks):
            raise InputError(
                "layout.host_expert_blocks",
                f"names blocks {list(experts)}; only blocks {self.cpu_blocks}..{self.n_blocks - 1} are on GPUs",
            )
        return self

    @property
    def gpu_blocks(self) -> int:
        return sum(device.blocks for device in self.devices)

    @property
    def cpu_blocks(self) -> int:
        return self.n_blocks - self.gpu_blocks

    @property
    def gpu_layers(self) -> int:
        """Layers on GPUs, output layer included: the objective's first tier."""
        return self.gpu_blocks + int(self.output_offloaded)

    @property
    def full_offload(self) -> bool:
        return self.cpu_blocks == 0 and self.output_offloaded

    @property
    def experts_on_host(self) -> tuple[int, ...]:
        """Every block whose experts sit in host RAM: the blocks kept on the host, then
        ``host_expert_blocks`` (what ``--n-cpu-moe``/``-ot`` must say)."""
        return (*range(self.cpu_blocks), *self.host_expert_blocks)

    def block_range(self, position: int) -> range:
        """Blocks the device at ``position`` holds."""
        first = self.cpu_blocks + sum(device.blocks for device in self.devices[:position])
        return range(first, first + self.devices[position].blocks)

    @property
    def rpc_devices(self) -> tuple[DeviceAssignment, ...]:
        return tuple(device for device in self.devices if device.worker != self.main_worker)

    @property
    def local_devices(self) -> tuple[DeviceAssignment, ...]:
        return tuple(device for device in self.devices if device.worker == self.main_worker)

    @property
    def workers(self) -> tuple[str, ...]:
        """Main worker first, then each worker running an rpc-server."""
        return tuple(dict.fromkeys([self.main_worker, *(device.worker for device in self.devices)]))

    def with_host_experts(self, blocks: Iterable[int]) -> Layout:
        """This layout with the experts of those of ``blocks`` that sit on GPUs kept on the host."""
        on_gpus = tuple(sorted(block for block in set(blocks) if block >= self.cpu_blocks))
        if on_gpus == self.host_expert_blocks:
            return self
        return Layout.model_validate(self.model_dump() | {"host_expert_blocks": on_gpus})

    def role(self, position: int) -> DeviceRole:
        """Role of the device at ``position``: RPC, the main (last local) GPU, or another local GPU."""
        device = self.devices[position]
        if device.worker != self.main_worker:
            return DeviceRole.RPC
        return DeviceRole.MAIN if position == len(self.devices) - 1 else DeviceRole.LOCAL


class DeviceClaim(Itemised):
    """VRAM one GPU needs for a layout, itemised."""

    worker: str
    gpu_index: NonNegInt
    role: DeviceRole
    blocks: NonNegInt
    first_block: NonNegInt
    holds_output: bool
    weight_bytes: Bytes
    kv_bytes: Bytes
    output_bytes: Bytes
    compute_bytes: Bytes
    fixed_bytes: Bytes
    extra_bytes: Bytes = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_bytes(self) -> int:
        return (
            self.weight_bytes
            + self.kv_bytes
            + self.output_bytes
            + self.compute_bytes
            + self.fixed_bytes
            + self.extra_bytes
        )


class WorkerClaim(Itemised):
    """Host RAM one worker needs for a layout (and its GPUs' VRAM, for unified-memory pools)."""

    worker: str
    is_main: bool
    unified_memory: bool = False
    fixed_bytes: Bytes = 0
    weight_bytes: Bytes = 0
    kv_bytes: Bytes = 0
    embedding_bytes: Bytes = 0
    output_bytes: Bytes = 0
    compute_bytes: Bytes = 0
    expert_bytes: Bytes = 0
    """Experts of GPU-resident blocks kept in host RAM."""
    vram_bytes: Bytes = 0
    """Sum of this worker's device claims."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ram_bytes(self) -> int:
        return (
            self.fixed_bytes
            + self.weight_bytes
            + self.kv_bytes
            + self.embedding_bytes
            + self.output_bytes
            + self.compute_bytes
            + self.expert_bytes
        )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pool_bytes(self) -> int:
        """What a unified-memory worker's single pool must hold: RAM and VRAM claims together."""
        return self.ram_bytes + self.vram_bytes


class Claims(Itemised):
    """The memory a layout needs, per device and per worker: the output of ``memory.claims``."""

    devices: tuple[DeviceClaim, ...] = ()
    workers: tuple[WorkerClaim, ...] = Field(min_length=1)

    @cached_property
    def _device_index(self) -> dict[tuple[str, int], DeviceClaim]:
        return {(claim.worker, claim.gpu_index): claim for claim in self.devices}

    def vram_bytes(self, worker: str, gpu_index: int) -> int:
        claim = self._device_index.get((worker, gpu_index))
        return 0 if claim is None else claim.total_bytes

    def worker(self, name: str) -> WorkerClaim | None:
        return next((claim for claim in self.workers if claim.worker == name), None)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_vram_bytes(self) -> int:
        return sum(claim.total_bytes for claim in self.devices)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_ram_bytes(self) -> int:
        return sum(claim.ram_bytes for claim in self.workers)
