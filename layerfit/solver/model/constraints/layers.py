"""Block counts, contiguity and the output layer, as llama.cpp lays them out.

* An unused slot holds nothing; a used slot holds at least one block unless it is the last device
  and holds only the output layer.
* Blocks ``0 .. cpu_blocks-1`` stay on the host; each slot starts where the previous one ends, so
  the offloaded blocks are contiguous in device order.
* The output layer sits on the last device. ``OUTPUT_FIRST`` (current llama.cpp) offloads it
  whenever any device is used; ``OUTPUT_LAST`` (older builds) only once every block is on a GPU.
* Partial offload (larger compute buffers) means some block or the output layer stays on the host.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.domain.config import OffloadOrder
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.variables import Expr, Variables


def post(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    n = instance.n_blocks
    out = variables.output_offloaded
    cpu = variables.cpu_blocks
    for slot in variables.slots:
        model.add(slot.blocks <= n * slot.used)
        model.add(slot.blocks >= slot.used - slot.holds_output)
        model.add(slot.holds_output <= slot.last)
        model.add(slot.holds_output <= out)
        model.add(slot.holds_output >= slot.last + out - 1)
    model.add(cpu + sum(slot.blocks for slot in variables.slots) == n)
    _contiguous(model, variables)
    if instance.rules.offload_order is OffloadOrder.OUTPUT_FIRST:
        model.add(out == variables.any_device)
    else:
        model.add(out <= variables.any_device)
        model.add(cpu == 0).only_enforce_if(out)
    model.add(variables.partial >= 1 - out)
    model.add(cpu <= n * variables.partial)
    model.add(variables.partial <= cpu + 1 - out + sum(variables.host_experts.values()))
    model.add(variables.gpu_layers == n - cpu + out)


def _contiguous(model: cp_model.CpModel, variables: Variables) -> None:
    offset: Expr = variables.cpu_blocks
    for slot in variables.slots:
        model.add(slot.start == offset)
        offset = offset + slot.blocks
