"""Model building, apart from solving: instance -> CP-SAT model with its variables."""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from layerfit.solver.model.constraints import post_all
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.variables import Variables, make_variables


@dataclass(frozen=True, eq=False)
class BuiltModel:
    """A CP-SAT model of one deployment and the container of its variables."""

    instance: Instance
    model: cp_model.CpModel
    variables: Variables
    symmetry_broken: bool


def build_model(instance: Instance, *, break_symmetry: bool = True) -> BuiltModel:
    """Create the variables and post every constraint family (no objective yet)."""
    model = cp_model.CpModel()
    variables = make_variables(model, instance)
    post_all(model, instance, variables, break_symmetry=break_symmetry)
    return BuiltModel(instance=instance, model=model, variables=variables, symmetry_broken=break_symmetry)
