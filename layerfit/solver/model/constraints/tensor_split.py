"""A user ``-ts``: the layout is what llama.cpp makes of the split over the layout's devices.

The non-zero shares map, in device order, onto the devices llama.cpp gives a layer at the
layout's GPU-layer count (each count's row says how many: ``deployment_rules.tensor_split_blocks``);
a layout without devices (CPU only) is not ruled out, as llama.cpp ignores the split then. For each GPU-layer count
the instance has the blocks llama.cpp gives each device; element constraints pick the row. A
local slot's place in the device order is the number of used RPC slots plus its position.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.solver.model.instance import Instance, SlotKind
from layerfit.solver.model.variables import Variables


def post(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    split = instance.rules.tensor_split
    if split is None:
        return
    slots = variables.slots
    rows = {count: per_device for count, per_device in split.blocks_by_layers.items() if len(per_device) <= len(slots)}
    if not rows:
        model.add(variables.any_device == 0)  # no GPU-layer count gives these slots a valid split
        return
    layers = model.new_int_var_from_domain(cp_model.Domain.from_values(sorted(rows)), "split_layers")
    model.add(layers == variables.gpu_layers).only_enforce_if(variables.any_device)
    devices = model.new_int_var(0, len(slots), "split_devices")
    model.add_element(layers, [len(rows.get(count, ())) for count in range(instance.n_layers + 1)], devices)
    model.add(sum(slot.used for slot in slots) == devices).only_enforce_if(variables.any_device)
    width = len(slots)
    table = [0] * ((instance.n_layers + 1) * width)
    for count, per_device in rows.items():
        table[count * width : count * width + len(per_device)] = per_device
    rpc_used = sum(slot.used for slot in variables.rpc)
    for slot in slots:
        place = slot.position if slot.kind is SlotKind.RPC else rpc_used + slot.position
        share = model.new_int_var(0, instance.n_blocks, f"split_blocks_{slot.name}")
        model.add_element(layers * width + place, table, share)
        model.add(slot.blocks == share).only_enforce_if(slot.used)
