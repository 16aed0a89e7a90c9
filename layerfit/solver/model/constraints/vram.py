"""Per-device VRAM: what each used slot needs fits its GPU's allocatable VRAM.

A device needs its blocks' weights and KV (a prefix-sum difference: element constraints when
blocks differ in size, a product when they are all alike), the fixed and compute cost of its
device kind, the output layer when it holds it, and the input copies when it is the first device
of a full offload over several devices. All figures come from ``layerfit.memory``.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.solver.model.capacity import class_blocks
from layerfit.solver.model.constraints.experts import slot_savings
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.variables import Expr, SlotVars, Variables


def post(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    costs = instance.costs
    if costs.uniform_block is None and costs.block_prefix_up == costs.block_prefix_down:
        block_costs = _chained_costs(model, instance, variables)
    else:
        block_costs = [_blocks_cost(model, instance, slot) for slot in variables.slots]
        if costs.uniform_block is None and variables.slots:
            _offloaded_total(model, instance, variables, block_costs)
    savings: list[Expr] = [0] * len(variables.slots)
    if instance.experts is not None:
        savings = slot_savings(model, instance.experts, variables)
    for slot, blocks_cost, saving in zip(variables.slots, block_costs, savings, strict=True):
        fixed = sum(instance.costs.device[kind] * chosen for kind, chosen in slot.device_kind.items())
        first = 0 if slot.first_full is None else instance.costs.first_device * slot.first_full
        model.add(slot.need == blocks_cost - saving + fixed + instance.costs.output * slot.holds_output + first)
        capacity = sum(instance.classes[c].capacity * assigned for c, assigned in slot.assign.items())
        # Unconditional (a strong linear relaxation): an unused slot needs nothing, except for at
        # most one unit of rounding between the two prefix tables when scaling is inexact.
        slack = 0 if instance.scale.exact else 1
        model.add(slot.need <= capacity + slack * (1 - slot.used))
        if instance.experts is not None:
            continue  # the bound below takes blocks with their experts
        # Redundant: whole blocks per GPU at its memory type's least fixed cost (the relaxation would
        # otherwise split blocks across GPUs).
        most = {c: class_blocks(instance, instance.classes[c], slot.kind) for c in slot.assign}
        model.add(slot.blocks <= sum(most[c] * assigned for c, assigned in slot.assign.items()))


def _offloaded_total(
    model: cp_model.CpModel, instance: Instance, variables: Variables, block_costs: list[Expr]
) -> None:
    """Redundant: the devices' block costs add up to every offloaded block (the prefix sums
    telescope). It gives the linear relaxation the total to place, which element constraints
    alone do not."""
    prefix = instance.costs.block_prefix_down
    kept = model.new_int_var(0, prefix[-1], "gpu_prefix_at_cpu_blocks")
    model.add_element(variables.cpu_blocks, prefix, kept)
    model.add(sum(block_costs) >= prefix[-1] - kept)


def _chained_costs(model: cp_model.CpModel, instance: Instance, variables: Variables) -> list[Expr]:
    """Block costs when one prefix table serves both ends (exact scaling): a slot ends where the
    next one starts, so one element constraint per slot end (and one at ``cpu_blocks``) gives every
    difference; the costs telescope to the offloaded total without a redundant row."""
    prefix = instance.costs.block_prefix_up
    n = instance.n_blocks
    previous: Expr = model.new_int_var(0, prefix[-1], "prefix_at_cpu_blocks")
    model.add_element(variables.cpu_blocks, prefix, previous)
    costs: list[Expr] = []
    for slot in variables.slots:
        end = model.new_int_var(0, n, f"{slot.name}_end")
        model.add(end == slot.start + slot.blocks)
        at_end = model.new_int_var(0, prefix[-1], f"{slot.name}_prefix_end")
        model.add_element(end, prefix, at_end)
        costs.append(at_end - previous)
        previous = at_end
    return costs


def _blocks_cost(model: cp_model.CpModel, instance: Instance, slot: SlotVars) -> Expr:
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
