"""Table lookups ``target == values[index]`` as CP-SAT table constraints.

Table (allowed-assignment) constraints are used instead of CP-SAT's element constraint: on these
models, CP-SAT 9.15's presolve wrongly proved some feasible element-based models infeasible.
"""

from __future__ import annotations

from collections.abc import Sequence

from ortools.sat.python import cp_model

from layerfit.solver.variables import Expr, IntVar


def lookup(model: cp_model.CpModel, index: Expr, values: Sequence[int], target: IntVar, name: str) -> None:
    """Constrain ``target`` to ``values[index]``; ``index`` may be a linear expression."""
    if isinstance(index, cp_model.IntVar):
        key = index
    else:
        key = model.new_int_var(0, len(values) - 1, f"{name}_index")
        model.add(key == index)
    model.add_allowed_assignments([key, target], [(i, value) for i, value in enumerate(values)])
