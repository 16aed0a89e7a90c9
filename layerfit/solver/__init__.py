"""CP-SAT solver: the provably best layout for one deployment.

``solve(cluster, deployment, profile, config, hint)`` works in three layers (``docs/design.md``):

* ``model``: the deployment prepared once (``instance``: GPU classes, scaled memory figures from
  ``layerfit.memory``, the rules), a variable container, one module per constraint family, the
  objective tiers of ``docs/design.md``, and one CP-SAT call (``runner``);
* ``shortcuts``: answers that avoid a model or a search (proofs, capacity and GPU-count bounds,
  dominance pruning, a tie-break met by its bound), each exact for the tiers it is used for;
* ``search``: which models to solve, in which order, and what the answer is.

Devices are slots in llama.cpp order (RPC servers, then the main worker's GPUs) and any GPU may
fill any slot, so no device order is fixed in advance.

``layout_is_feasible_in_model`` asks the model whether it accepts a given layout.
"""

from layerfit.solver.search.result import SolveResult, TierValues
from layerfit.solver.search.solve import layout_is_feasible_in_model, solve
from layerfit.solver.search.trace import not_run

__all__ = ["SolveResult", "TierValues", "layout_is_feasible_in_model", "not_run", "solve"]
