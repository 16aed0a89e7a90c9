"""MemoryProfile: everything the memory model needs to know about one model at one setting.

A profile is produced by the estimators from a GGUF header, or written by hand (tests, benchmarks,
other schedulers' own estimates). All sizes are bytes.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, Self

from pydantic import Field, field_validator, model_validator

from layerfit.domain.base import Bytes, Frozen, NonNegInt, strictly_ascending
from layerfit.domain.speed import SpeedShape
from layerfit.errors import InputError

_RUN = re.compile(r"^\s*(?P<size>.+?)\s*[x×*]\s*(?P<count>\d+)\s*$")

MAX_BLOCKS = 1024
"""Most transformer blocks a profile may have. Real models have at most a few hundred (405B-class
models 126); the engines' cost grows with the block count, so larger profiles are refused."""


def _too_many_blocks(what: str) -> str:
    return f"{what}; at most {MAX_BLOCKS} blocks are planned for (real models have a few hundred at most)"


class DeviceRole(StrEnum):
    """What a GPU does in a llama.cpp layout; fixed and compute costs differ by role."""

    MAIN = "main"
    """The main process's last local GPU: it holds the output layer and computes the logits."""
    LOCAL = "local"
    """Another local GPU of the main worker."""
    RPC = "rpc"
    """A GPU behind an ``rpc-server`` process on another worker."""


class ComputeBuffer(Frozen):
    """Compute (graph) buffer of one device: larger when any layer stays on the host."""

    full_offload_bytes: Bytes = 0
    partial_offload_bytes: Bytes = 0
    multi_device_bytes: Bytes | None = None
    """Full offload over several devices (llama.cpp's pipeline parallelism keeps copies of the
    inputs); ``None``: the same as ``full_offload_bytes``."""

    def bytes_for(self, partial: bool, multi_device: bool | None = None) -> int:
        """The buffer in one offload state; ``multi_device=None`` (device count unknown) takes the
        larger of the two full-offload sizes."""
        if partial:
            return self.partial_offload_bytes
        multi = self.full_offload_bytes if self.multi_device_bytes is None else self.multi_device_bytes
        if multi_device is None:
            return max(self.full_offload_bytes, multi)
        return multi if multi_device else self.full_offload_bytes


class RoleCosts(Frozen):
    """Per-device costs that do not depend on how many blocks the device holds."""

    fixed_bytes: Bytes = 0
    """Per-process runtime cost on the device (CUDA context, cuBLAS, pools)."""
    compute: ComputeBuffer = ComputeBuffer()


class FlashAttnFallback(Frozen):
    """Flash attention ``auto`` that llama.cpp turns off for one layer split.

    With the host's last block an attention block and the first offloaded block a recurrent one,
    llama.cpp's scheduler puts the host block's flash-attention op on the device (it sits between
    the device's recurrent-state nodes in graph order), finds the op off its layer's device and
    disables flash attention for the whole context: attention scores and F32 masks everywhere.
    """

    host_blocks: tuple[NonNegInt, ...]
    """Blocks kept on the host (``Layout.cpu_blocks``) that turn flash attention off."""
    device_extra_bytes: Bytes = 0
    """Added to the partial-offload compute buffer of a device without the output layer then
    (attention scores, F32 masks)."""
    output_device_extra_bytes: Bytes = 0
    """The same for the device holding the output layer."""
    host_extra_bytes: Bytes = 0
    """Added to the host compute buffer then (its masks in F32; the scores run on the device)."""

    def applies(self, host_blocks: int | None) -> bool:
        """Whether a split with ``host_blocks`` on the host is one; ``None`` (split not modelled): yes."""
        return host_blocks is None or host_blocks in self.host_blocks

    def device_bytes(self, host_blocks: int | None, holds_output: bool) -> int:
        """A device's add-on; with the split not modelled, the larger one whatever the device holds
        (a constant add-on, as the solver's encoding needs)."""
        if host_blocks is None:
            return max(self.device_extra_bytes, self.output_device_extra_bytes)
        if host_blocks not in self.host_blocks:
            return 0
        return self.output_device_extra_bytes if holds_output else self.device_extra_bytes


class KindsCompute(Frozen):
    """Compute of a device whose blocks hold only some of the model's layer kinds.

    ``kinds`` is a union of ``MemoryProfile.block_kinds`` bits: the figures are those of a device
    holding any blocks whose kinds lie within it (no mask of an attention kind it lacks, no
    recurrent scan without recurrent layers, no experts' activations without MoE layers). The role
    costs stay the upper bound; the memory model takes the smaller of the two.
    """

    kinds: NonNegInt
    device: ComputeBuffer
    output_bytes: Bytes = 0
    """Beyond ``device`` when the device holds the output layer (as ``output_compute_bytes``)."""
    first_device_bytes: Bytes = 0
    """Beyond ``device`` on the first device of a full offload over several devices."""
    scan_bytes: Bytes = 0
    """The recurrent scan within ``device.multi_device_bytes`` (as ``MemoryProfile.scan_bytes``)."""


class MemoryProfile(Frozen):
    """Per-block and per-role memory of one model under one set of runtime options."""

    block_weight_bytes: tuple[Bytes, ...] = Field(min_length=1)
    """Weights of each transformer block, in block order."""
    block_kv_bytes: tuple[Bytes, ...]
    """KV cache (or recurrent state) of each block at the chosen ctx, cache types and slots, where
    the block goes (0 when the cache stays on the host whatever the layout: ``host_kv_bytes``)."""
    host_kv_bytes: Bytes = 0
    """KV cache held in host RAM whatever the layout (``-nkvo``: every block's cache)."""
    block_host_weight_bytes: tuple[Bytes, ...] | None = None
    """RAM a block costs when kept on the host (mmap/repack policy); default: its weights."""
    block_expert_bytes: tuple[Bytes, ...] | None = None
    """The part of each block's weights that its routed-expert tensors (``ffn_{gate,up,down,gate_up}_
    {exps,chexps}``) take: what stays in host RAM when the block's experts are kept there while the
    rest of the block sits on a GPU. ``None``: a dense model."""
    block_host_expert_bytes: tuple[Bytes, ...] | None = None
    """RAM those expert tensors cost in host RAM (mmap/repack policy); default: their weights."""
    fixed_host_experts: tuple[NonNegInt, ...] | None = None
    """Blocks whose experts the user's tensor overrides (``-ot``, ``--n-cpu-moe``, ``--cpu-moe``)
    keep on the host, ascending; ``None``: no override, the engines decide."""
    stand_in_host_experts: tuple[NonNegInt, ...] | None = None
    """This profile is the dense stand-in of a MoE profile with these blocks' experts in host RAM
    (``memory.experts.profile_with_host_experts``): the memory figures already count them there,
    and the speed model must too (``speed.deployment.deployment_speed``); ``None``: not a stand-in."""
    output_weight_bytes: Bytes = 0
    """The output layer (output norm + output projection, or the tied embedding copy)."""
    token_embedding_bytes: Bytes = 0
    """The token embedding: always in host RAM."""
    main: RoleCosts = RoleCosts()
    local: RoleCosts = RoleCosts()
    rpc: RoleCosts = RoleCosts()
    unified: RoleCosts | None = None
    """Costs of a GPU on a unified-memory worker, when they differ (e.g. no CUDA context)."""
    host_fixed_bytes: Bytes = 0
    """RAM of the main process beyond weights, KV and compute (metadata, output buffer, runtime)."""
    host_compute: ComputeBuffer = ComputeBuffer()
    """Host compute buffer of the main process (CPU or pinned staging)."""
    rpc_host_fixed_bytes: Bytes = 0
    """RAM one rpc-server process costs its worker."""
    extra_main_gpu_bytes: Bytes = 0
    """Extras on the main GPU (a multimodal projector, ``--mmproj``)."""
    output_compute_bytes: Bytes = 0
    """Compute the device holding the output layer needs beyond its role's (the logits)."""
    output_compute: ComputeBuffer | None = None
    """The same per offload state, each at most ``output_compute_bytes`` (a device's logits peak need
    not sit on top of its largest buffer: gemma3n); ``None``: ``output_compute_bytes`` in every state."""
    first_device_compute_bytes: Bytes = 0
    """Extra compute on the first device when a full offload spans several devices (input copies)."""
    pipeline_parallel: bool = True
    """Whether llama.cpp runs a full offload over several devices with pipeline parallelism (the
    multi-device figures, the first device's input copies). ``False`` when the options turn it off:
    any tensor override (``-ot``, ``--cpu-moe``, ``--n-cpu-moe N>0``), even one matching no tensor
    (measured). Each device then reserves its buffer once, as in a partial offload, and the host its
    single-device figure."""
    host_output_weight_bytes: Bytes | None = None
    """RAM of the output layer when it stays on the host; default ``output_weight_bytes`` (a tied
    embedding costs nothing more there: the host reuses the token embedding)."""
    host_output_compute_bytes: Bytes = 0
    """Host compute added when the output layer stays on the host (the CPU computes the logits)."""
    op_offload_compute_bytes: Bytes = 0
    """A GPU build with every layer on the host (``-ngl 0`` without ``--device none``): the compute
    buffer llama.cpp still reserves on its first GPU, which runs the large-batch operations (a
    copy of the output layer's weights, the logits, hidden states). 0: not modelled."""
    op_offload_host_compute_bytes: Bytes = 0
    """The host compute buffer in that case (the GPU took the large operations)."""
    host_experts_compute_bytes: Bytes | None = None
    """The host compute buffer when the host keeps only the experts of GPU-resident blocks (no
    block, the output layer offloaded): it computes only their products. ``None``: the host's
    partial-offload figure."""
    flash_attn_fallback: FlashAttnFallback | None = None
    """Layer splits for which llama.cpp turns flash attention ``auto`` off (recurrent hybrids)."""
    block_kinds: tuple[NonNegInt, ...] | None = None
    """Layer kinds of each block (bits: attention full or windowed, recurrent, experts, feed-forward,
    see ``estimators.layer_kinds``); ``None``: compute does not depend on them."""
    kinds_compute: tuple[KindsCompute, ...] = ()
    """Compute figures of devices that hold only some layer kinds (``memory.kinds``)."""
    scan_bytes: Bytes = 0
    """A recurrent layer's scan within the multi-device compute figures: a device after the first
    keeps it only at a boundary in ``scan_crossings`` (``memory.kinds.keeps_scan``)."""
    scan_crossings: tuple[NonNegInt, ...] = ()
    """Blocks ``b`` whose block ``b-1`` is recurrent too, neither attending: a device boundary
    before ``b`` runs part of a scan on both devices, with its 4 pipeline copies."""
    speed: SpeedShape | None = None
    """What one token reads and computes per block (``layerfit.speed``); ``None``: a profile given as
    numbers, whose speed figures the speed model derives from its bytes and states as assumptions."""
    warnings: tuple[str, ...] = ()
    """What the estimator could not model exactly."""

    @field_validator(
        "block_weight_bytes",
        "block_kv_bytes",
        "block_host_weight_bytes",
        "block_expert_bytes",
        "block_host_expert_bytes",
        mode="before",
    )
    @classmethod
    def _expand_runs(cls, value: Any) -> Any:
        """Accept ``"465 MiB x 80"`` in block lists: 80 blocks of 465 MiB."""
        if not isinstance(value, list | tuple):
            return value
        expanded: list[Any] = []
        for item in value:
            match = _RUN.match(item) if isinstance(item, str) else None
            if match is None:
                expanded.append(item)
            elif len(match["count"]) > 6 or len(expanded) + int(match["count"]) > MAX_BLOCKS:
                raise InputError("block_weight_bytes", _too_many_blocks(f"the run {item!r} makes too many blocks"))
            else:
                expanded += [match["size"]] * int(match["count"])
        return expanded

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        n_blocks = len(self.block_weight_bytes)
        if n_blocks > MAX_BLOCKS:
            raise InputError("block_weight_bytes", _too_many_blocks(f"{n_blocks} blocks"))
        if len(self.block_kv_bytes) != n_blocks:
            raise InputError(
                "block_kv_bytes", f"has {len(self.block_kv_bytes)} entries, block_weight_bytes has {n_blocks}"
            )
        for name in ("block_host_weight_bytes", "block_expert_bytes", "block_host_expert_bytes", "block_kinds"):
            values = getattr(self, name)
            if values is not None and len(values) != n_blocks:
                raise InputError(name, f"has {len(values)} entries, block_weight_bytes has {n_blocks}")
        if self.block_expert_bytes is not None:
            pairs = zip(self.block_expert_bytes, self.block_weight_bytes, strict=True)
            for block, (experts, weights) in enumerate(pairs):
                if experts > weights:
                    raise InputError(f"block_expert_bytes[{block}]", f"{experts} exceeds the block's weights {weights}")
            for block in range(n_blocks):
                host_experts, host_weights = self.host_expert_bytes(block), self.host_weight_bytes(block)
                if host_experts > host_weights:
                    raise InputError(
                        f"block_host_expert_bytes[{block}]",
                        f"{host_experts} exceeds the block's host weights {host_weights}",
                    )
        elif self.block_host_expert_bytes is not None:
            raise InputError("block_host_expert_bytes", "given without block_expert_bytes")
        if self.speed is not None and self.speed.n_blocks != n_blocks:
            raise InputError(
                "speed.block_dense_bytes", f"has {self.speed.n_blocks} entries, the profile has {n_blocks}"
            )
        stand_in = self.stand_in_host_experts or ()
        if not strictly_ascending(stand_in) or any(block >= n_blocks for block in stand_in):
            raise InputError("stand_in_host_experts", f"{list(stand_in)}: ascending blocks below {n_blocks}")
        fixed = self.fixed_host_experts or ()
        if not strictly_ascending(fixed) or any(block >= n_blocks or self.expert_bytes(block) == 0 for block in fixed):
            raise InputError(
                "fixed_host_experts", f"{list(fixed)}: ascending blocks with expert tensors, below {n_blocks}"
            )
        return self

    @property
    def n_blocks(self) -> int:
        return len(self.block_weight_bytes)

    @property
    def n_layers(self) -> int:
        """Blocks plus the output layer: the count ``-ngl`` refers to for full offload."""
        return self.n_blocks + 1

    @property
    def host_output_bytes(self) -> int:
        """RAM of the output layer when it is not offloaded."""
        return self.output_weight_bytes if self.host_output_weight_bytes is None else self.host_output_weight_bytes

    def host_weight_bytes(self, block: int) -> int:
        weights = self.block_host_weight_bytes or self.block_weight_bytes
        return weights[block]

    @property
    def is_moe(self) -> bool:
        """Some block has expert tensors that can stay in host RAM apart from the rest of it."""
        return self.block_expert_bytes is not None and any(self.block_expert_bytes)

    @property
    def expert_blocks(self) -> tuple[int, ...]:
        """Blocks that have expert tensors (a MoE model's leading dense blocks have none)."""
        experts = self.block_expert_bytes or ()
        return tuple(block for block, size in enumerate(experts) if size > 0)

    def expert_bytes(self, block: int) -> int:
        """VRAM a GPU-resident block saves when its experts stay in host RAM."""
        return self.block_expert_bytes[block] if self.block_expert_bytes is not None else 0

    def host_expert_bytes(self, block: int) -> int:
        """RAM the experts of a GPU-resident block cost when they stay on the host."""
        if self.block_host_expert_bytes is not None:
            return self.block_host_expert_bytes[block]
        return self.expert_bytes(block)

    def role_costs(self, role: DeviceRole, unified_worker: bool) -> RoleCosts:
        if unified_worker and self.unified is not None:
            return self.unified
        return {DeviceRole.MAIN: self.main, DeviceRole.LOCAL: self.local, DeviceRole.RPC: self.rpc}[role]

    @classmethod
    def uniform(
        cls,
        n_blocks: int,
        block_weight_bytes: int,
        block_kv_bytes: int,
        *,
        output_weight_bytes: int = 0,
        token_embedding_bytes: int = 0,
        gpu_fixed_bytes: int = 0,
        compute: ComputeBuffer = ComputeBuffer(),
        host_fixed_bytes: int = 0,
        host_compute: ComputeBuffer = ComputeBuffer(),
        rpc_host_fixed_bytes: int = 0,
    ) -> MemoryProfile:
        """A profile whose blocks are all alike and whose roles all cost the same."""
        role = RoleCosts(fixed_bytes=gpu_fixed_bytes, compute=compute)
        return cls(
            block_weight_bytes=(block_weight_bytes,) * n_blocks,
            block_kv_bytes=(block_kv_bytes,) * n_blocks,
            output_weight_bytes=output_weight_bytes,
            token_embedding_bytes=token_embedding_bytes,
            main=role,
            local=role,
            rpc=role,
            host_fixed_bytes=host_fixed_bytes,
            host_compute=host_compute,
            rpc_host_fixed_bytes=rpc_host_fixed_bytes,
        )
