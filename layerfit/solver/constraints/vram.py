"""Per-device VRAM: what each used slot needs fits its GPU's allocatable VRAM.

A device needs its blocks' weights and KV (a prefix-sum difference: element constraints when
blocks differ in size, a product when they are all alike), the fixed and compute cost of its
device kind, and the output layer when it holds it. All figures come from ``layerfit.memory``.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.solver.instance import Instance
from layerfit.solver.variables import SlotVars, Variables


def post(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    for slot in variables.slots:
        blocks_cost = _blocks_cost(model, instance, slot)
        fixed = sum(instance.costs.device[kind] * chosen for kind, chosen in slot.device_kind.items())
        model.add(slot.need == blocks_cost + fixed + instance.costs.output * slot.holds_output)
        capacity = sum(instance.classes[c].capacity * assigned for c, assigned in slot.assign.items())
        model.add(slot.need <= capacity).only_enforce_if(slot.used)


def _blocks_cost(model: cp_model.CpModel, instance: Instance, slot: SlotVars) -> cp_model.LinearExprT:
    costs = instance.costs
    if costs.uniform_block is not None:
        return costs.uniform_block * slot.blocks
    n = instance.n_blocks
    top = costs.block_prefix_up[-1]
    end = model.new_int_var(0, n, f"{slot.name}_end")
    model.add(end == slot.start + slot.blocks)
    before_end = model.new_int_var(0, top, f"{slot.name}_prefix_end")
    before_start = model.new_int_var(0, top, f"{slot.name}_prefix_start")
    model.add_element(end, costs.block_prefix_up, before_end)
    model.add_element(slot.start, costs.block_prefix_down, before_start)
    return before_end - before_start
