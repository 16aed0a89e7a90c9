"""A user ``-ts``: the layout is what llama.cpp makes of the split over the layout's devices.

The non-zero shares map, in device order, onto exactly that many devices; a layout without devices
(CPU only) is not ruled out, as llama.cpp ignores the split then. For each GPU-layer count
the instance has the blocks llama.cpp gives each device; element constraints pick the row. A
local slot's place in the device order is the number of used RPC slots plus its position.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.solver.instance import Instance, SlotKind
from layerfit.solver.variables import Variables


def post(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    split = instance.rules.tensor_split
    if split is None:
        return
    slots = variables.slots
    if not split.blocks_by_layers or split.n_devices > len(slots):
        model.add(variables.any_device == 0)  # no GPU-layer count gives every device a valid share
        return
    model.add(sum(slot.used for slot in slots) == split.n_devices).only_enforce_if(variables.any_device)
    layers = model.new_int_var_from_domain(cp_model.Domain.from_values(sorted(split.blocks_by_layers)), "split_layers")
    model.add(layers == variables.gpu_layers).only_enforce_if(variables.any_device)
    width = len(slots)
    table = [0] * ((instance.n_layers + 1) * width)
    for count, per_device in split.blocks_by_layers.items():
        table[count * width : count * width + len(per_device)] = per_device
    rpc_used = sum(slot.used for slot in variables.rpc)
    for slot in slots:
        place = slot.position if slot.kind is SlotKind.RPC else rpc_used + slot.position
        share = model.new_int_var(0, instance.n_blocks, f"split_blocks_{slot.name}")
        model.add_element(layers * width + place, table, share)
        model.add(slot.blocks == share).only_enforce_if(slot.used)
