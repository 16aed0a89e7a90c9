"""The deployment's own rules: ``-ngl``, the CPU-offloading switch, image models; and llama.cpp's
limit on the devices of one process (RPC and local slots together; each group alone has no more
slots than the limit).

The manual selection, the distribution switch and the RPC-server cap are already in the instance:
they decide which GPUs may fill which slots and how many RPC slots there are; a selection used
whole also fixes the number of devices here.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.domain.limits import MAX_DEVICES
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.variables import Variables


def post(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    rules = instance.rules
    if rules.layer_target is not None:
        model.add(variables.gpu_layers == rules.layer_target)
    if rules.full_offload:
        model.add(variables.cpu_blocks == 0)
        model.add(variables.output_offloaded == 1)
    if rules.single_device:
        model.add(sum(slot.used for slot in variables.slots) == 1)
    if rules.device_count is not None:
        model.add(sum(slot.used for slot in variables.slots) == rules.device_count)
    if len(variables.slots) > MAX_DEVICES:
        model.add(sum(slot.used for slot in variables.slots) <= MAX_DEVICES)
    if len(rules.partial_values) == 1:
        model.add(variables.partial == int(rules.partial_values[0]))
