"""One module per constraint family; ``post_all`` posts them in a fixed order."""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.solver.model.constraints import (
    experts,
    layers,
    placement,
    ram,
    roles,
    rules,
    speed,
    symmetry,
    tensor_split,
    vram,
)
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.variables import Variables


def post_all(model: cp_model.CpModel, instance: Instance, variables: Variables, *, break_symmetry: bool) -> None:
    """Post every constraint family of the model."""
    placement.post(model, instance, variables)
    roles.post(model, instance, variables)
    layers.post(model, instance, variables)
    rules.post(model, instance, variables)
    tensor_split.post(model, instance, variables)
    vram.post(model, instance, variables)
    ram.post(model, instance, variables)
    if instance.experts is not None:
        experts.post(model, instance.experts, variables)
    if instance.speed is not None:
        speed.post(model, instance, variables)
    if break_symmetry:
        symmetry.post(model, instance, variables)
