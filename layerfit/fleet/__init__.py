"""plan_fleet(): place every replica of many deployments over a whole fleet at once.

One module per stage:

* ``candidates``: valid layouts per deployment, each checked alone against the cluster (run per
  deployment on the configured executor, ``executors``: serial, local process pool or Ray).
* ``master``: the column-based master CP-SAT model, ``x[d, c]`` replicas of deployment ``d`` on
  candidate ``c``, capacities per GPU and per worker; ``greedy`` gives its first solution.
* ``tiers``: the objective tiers solved in order (priority weight placed, layers on GPUs, replicas
  kept in place, GPUs and workers used), each fixing the previous optimum.
* ``moves``: replica numbers and the order of stops and starts from the current placement.
* ``plan``: ``plan_fleet`` and ``choose``, putting the stages together; ``sequential``: the
  one-at-a-time baseline (GPUStack's way) that also seeds the joint plan.

Optimality is relative to the candidate set: a layout no generator proposes is never chosen. The
reported gap is the master's own (bound vs. objective of the stage that stopped early).
"""

from layerfit.domain.fleet import Fleet, FleetConfig, FleetPlan, Placement
from layerfit.fleet.candidates import _single_gpu_candidates, generate_candidates, valid_candidates
from layerfit.fleet.master import priority_weights
from layerfit.fleet.moves import order_moves
from layerfit.fleet.plan import choose, plan_fleet
from layerfit.fleet.sequential import plan_sequential, subtract

__all__ = [
    "Fleet",
    "FleetConfig",
    "FleetPlan",
    "Placement",
    "_single_gpu_candidates",
    "choose",
    "generate_candidates",
    "order_moves",
    "plan_fleet",
    "plan_sequential",
    "priority_weights",
    "subtract",
    "valid_candidates",
]
