"""CP-SAT solver: the provably best layout for one deployment.

``solve`` builds one model per deployment (see ``instance``, ``variables``, ``constraints``,
``objective``) and solves the objective tiers in order (see ``search``).
"""

from layerfit.solver.result import SolveResult, TierValues
from layerfit.solver.search import layout_is_feasible_in_model, solve

__all__ = ["SolveResult", "TierValues", "layout_is_feasible_in_model", "solve"]
