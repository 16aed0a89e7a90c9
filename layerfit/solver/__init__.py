"""CP-SAT solver: the provably best layout for one deployment.

``solve(cluster, deployment, profile, config, hint)`` prepares the deployment (``instance``: GPU
classes, scaled memory figures from ``layerfit.memory``, the rules), builds CP-SAT models from a
variable container (``variables``) and one module per constraint family (``constraints``), and
solves DESIGN.md's objective tiers in order (``objective``, ``search``). Devices are slots in
llama.cpp order (RPC servers, then the main worker's GPUs) and any GPU may fill any slot, so no
device order is fixed in advance. Large clusters stay tractable through GPU classes, capacity
bounds (``bounds``) and dominance pruning (``prune``), each exact for the tiers it is used for.

``layout_is_feasible_in_model`` asks the model whether it accepts a given layout.
"""

from layerfit.solver.search.result import SolveResult, TierValues
from layerfit.solver.search.solve import layout_is_feasible_in_model, solve
from layerfit.solver.search.trace import not_run

__all__ = ["SolveResult", "TierValues", "layout_is_feasible_in_model", "not_run", "solve"]
