"""Solution values -> Layout, and Layout -> the values of the model's decision variables."""

from __future__ import annotations

from collections.abc import Callable

from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.variables import IntVar, SlotVars, Variables

ValueOf = Callable[[IntVar], int]


def decode(instance: Instance, variables: Variables, value: ValueOf) -> Layout:
    """The layout a solution describes; GPUs of a class are taken in index order."""
    main = next(w for w, chosen in variables.main.items() if value(chosen))
    taken: dict[int, int] = {}
    devices: list[DeviceAssignment] = []
    for slot in variables.slots:
        if not value(slot.used):
            continue
        c = next(c for c, assigned in slot.assign.items() if value(assigned))
        cls = instance.classes[c]
        nth = taken.get(c, 0)
        taken[c] = nth + 1
        devices.append(
            DeviceAssignment(
                worker=instance.workers[cls.worker].name, gpu_index=cls.gpu_indexes[nth], blocks=value(slot.blocks)
            )
        )
    return Layout(
        main_worker=instance.workers[main].name,
        n_blocks=instance.n_blocks,
        devices=tuple(devices),
        output_offloaded=bool(value(variables.output_offloaded)),
        host_expert_blocks=tuple(block for block, chosen in variables.host_experts.items() if value(chosen)),
    )


def decision_values(instance: Instance, variables: Variables, layout: Layout) -> dict[IntVar, int] | None:
    """The main worker, slot assignments, block counts and output flag that encode ``layout``;
    ``None`` when the model has no room for it (a GPU that is no candidate, too many devices)."""
    if layout.n_blocks != instance.n_blocks:
        return None
    main = instance.worker_index(layout.main_worker)
    if main is None or main not in variables.main:
        return None
    values: dict[IntVar, int] = {chosen: int(w == main) for w, chosen in variables.main.items()}
    values[variables.output_offloaded] = int(layout.output_offloaded)
    if not set(layout.host_expert_blocks) <= variables.host_experts.keys():
        return None
    for block, chosen in variables.host_experts.items():
        values[chosen] = int(block in layout.host_expert_blocks)
    for slots, devices in ((variables.rpc, layout.rpc_devices), (variables.local, layout.local_devices)):
        if len(devices) > len(slots):
            return None
        for position, slot in enumerate(slots):
            device = devices[position] if position < len(devices) else None
            if not _slot_values(instance, slot, device, values):
                return None
    return values


def _slot_values(
    instance: Instance, slot: SlotVars, device: DeviceAssignment | None, values: dict[IntVar, int]
) -> bool:
    chosen = None if device is None else instance.class_of(device.worker, device.gpu_index)
    if device is not None and (chosen is None or chosen not in slot.assign):
        return False
    for c, assigned in slot.assign.items():
        values[assigned] = int(c == chosen)
    values[slot.used] = int(device is not None)
    values[slot.blocks] = 0 if device is None else device.blocks
    return True
