"""The model's variables, in one container, created before any constraint is posted.

A layout is a sequence of device slots: RPC slots first (one remote GPU each, in ``--rpc`` order),
then local slots (the main worker's GPUs, in ``--device`` order). Used slots form a prefix of each
group, so a slot's place in the device order is fixed by its group and position. Each used slot
holds one GPU of one class, a contiguous run of blocks, and, when it is the last device, the
output layer. Blocks ``0 .. cpu_blocks-1`` stay on the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from layerfit.domain.profile import DeviceRole
from layerfit.solver.model.costs import DeviceKind, HostKind
from layerfit.solver.model.instance import Instance, SlotKind

IntVar = cp_model.IntVar
Expr = cp_model.LinearExpr | int
"""A linear expression as the constraint modules build them."""


@dataclass(frozen=True, eq=False)
class SlotVars:
    """One device slot."""

    kind: SlotKind
    position: int
    assign: dict[int, IntVar]
    """Class id -> the slot holds a GPU of that class."""
    on_worker: dict[int, IntVar]
    """Worker id -> the slot's GPU belongs to that worker."""
    used: IntVar
    blocks: IntVar
    start: IntVar
    """First block on this device (blocks before it are on the host or on earlier devices)."""
    last: IntVar
    """The last device of the layout (the one that gets the output layer when it is offloaded)."""
    holds_output: IntVar
    device_kind: dict[DeviceKind, IntVar]
    """Exactly one is true when the slot is used: its role, memory type and offload mode."""
    first_full: IntVar | None
    """The first device of a full offload over several devices (extra compute); ``None`` for slots
    that can never be first."""
    need: IntVar
    """VRAM the device needs (scaled); meaningful only when the slot is used."""
    pool_share: dict[int, IntVar]
    """Unified-memory worker -> what this slot takes from that worker's pool."""

    @property
    def name(self) -> str:
        return f"{self.kind}{self.position}"


@dataclass(frozen=True, eq=False)
class Variables:
    """All decision and auxiliary variables of one deployment's model."""

    main: dict[int, IntVar]
    """Worker id -> it runs llama-server (exactly one)."""
    worker_used: dict[int, IntVar]
    rpc: tuple[SlotVars, ...]
    local: tuple[SlotVars, ...]
    cpu_blocks: IntVar
    gpu_layers: IntVar
    output_offloaded: IntVar
    partial: IntVar
    """Some block or the output layer stays on the host (compute buffers grow)."""
    any_local: IntVar
    """The main worker uses at least one of its GPUs (so a MAIN device exists)."""
    any_device: IntVar
    multi: IntVar
    """More than one device."""
    host_kind: dict[HostKind, IntVar]
    """Exactly one is true: what the main worker's RAM besides kept blocks depends on."""
    host_experts: dict[int, IntVar] = field(default_factory=dict)
    """Expert block -> its experts stay in host RAM (empty unless ``Instance.experts``)."""
    decode_us: IntVar | None = None
    """The decode time per token in microseconds (``constraints.speed``), when time is modelled."""

    @property
    def slots(self) -> tuple[SlotVars, ...]:
        """All slots in device order."""
        return (*self.rpc, *self.local)


def _device_kinds(instance: Instance, kind: SlotKind) -> list[DeviceKind]:
    """The device kinds a slot can take, per the cost table (switches it does not depend on are
    ``None``) and the memory types of the GPUs that can fill it."""
    roles = (DeviceRole.RPC,) if kind is SlotKind.RPC else (DeviceRole.LOCAL, DeviceRole.MAIN)
    memory_types = {instance.workers[instance.classes[c].worker].unified for c in instance.classes_for(kind)}
    return [
        device_kind
        for device_kind in instance.costs.device
        if device_kind.role in roles
        and (device_kind.unified is None or device_kind.unified in memory_types)
        and device_kind.partial in instance.rules.partial_values
    ]


def _slot(model: cp_model.CpModel, instance: Instance, kind: SlotKind, position: int) -> SlotVars:
    tag = f"{kind}{position}"
    n = instance.n_blocks
    classes = instance.classes_for(kind)
    workers = sorted({instance.classes[c].worker for c in classes})
    unified_workers = [w for w in workers if instance.workers[w].unified]
    max_need = max((instance.classes[c].capacity for c in classes), default=0)
    return SlotVars(
        kind=kind,
        position=position,
        assign={c: model.new_bool_var(f"{tag}_class{c}") for c in classes},
        on_worker={w: model.new_bool_var(f"{tag}_worker{w}") for w in workers},
        used=model.new_bool_var(f"{tag}_used"),
        blocks=model.new_int_var(0, n, f"{tag}_blocks"),
        start=model.new_int_var(0, n, f"{tag}_start"),
        last=model.new_bool_var(f"{tag}_last"),
        holds_output=model.new_bool_var(f"{tag}_output"),
        device_kind={
            dk: model.new_bool_var(f"{tag}_{dk.role}_{dk.unified}_{dk.partial}_{dk.multi}")
            for dk in _device_kinds(instance, kind)
        },
        first_full=model.new_bool_var(f"{tag}_first_full") if position == 0 else None,
        need=model.new_int_var(0, _need_upper_bound(instance), f"{tag}_need"),
        pool_share={w: model.new_int_var(0, max_need, f"{tag}_pool{w}") for w in unified_workers},
    )


def _need_upper_bound(instance: Instance) -> int:
    costs = instance.costs
    return costs.block_prefix_up[-1] + max(costs.device.values(), default=0) + costs.output + costs.first_device


def make_variables(model: cp_model.CpModel, instance: Instance) -> Variables:
    """Create every variable of the model (no constraints)."""
    n = instance.n_blocks
    main_workers = [w for w, view in enumerate(instance.workers) if view.main_ok]
    return Variables(
        main={w: model.new_bool_var(f"main{w}") for w in main_workers},
        worker_used={w: model.new_bool_var(f"worker_used{w}") for w in range(len(instance.workers))},
        rpc=tuple(_slot(model, instance, SlotKind.RPC, r) for r in range(instance.rpc_slots)),
        local=tuple(_slot(model, instance, SlotKind.LOCAL, r) for r in range(instance.local_slots)),
        cpu_blocks=model.new_int_var(0, n, "cpu_blocks"),
        gpu_layers=model.new_int_var(0, n + 1, "gpu_layers"),
        output_offloaded=model.new_bool_var("output_offloaded"),
        partial=model.new_bool_var("partial"),
        any_local=model.new_bool_var("any_local"),
        any_device=model.new_bool_var("any_device"),
        multi=model.new_bool_var("multi_device"),
        host_kind={
            hk: model.new_bool_var(f"host_{int(hk.partial)}{int(hk.output_offloaded)}{int(hk.main_gpu)}{hk.multi}")
            for hk in instance.costs.host
            if hk.partial in instance.rules.partial_values
        },
        host_experts={}
        if instance.experts is None
        else {block: model.new_bool_var(f"host_experts{block}") for block in instance.experts.blocks},
        decode_us=None if instance.speed is None else model.new_int_var(0, _time_bound(instance), "decode_us"),
    )


def _time_bound(instance: Instance) -> int:
    assert instance.speed is not None
    return instance.speed.time_upper_bound(instance.rpc_slots + instance.local_slots)
