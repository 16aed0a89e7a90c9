"""plan_fleet(): place every replica of many deployments over a whole fleet at once.

One module per stage:

* ``candidates``: valid layouts per deployment, each checked alone against the cluster (run per
  deployment on the configured executor, ``executors``: serial, local process pool or Ray).
* ``master``: the column-based master CP-SAT model, ``x[d, c]`` replicas of deployment ``d`` on
  candidate ``c``, capacities per GPU and per worker; ``greedy`` gives its first solution.
* ``tiers``: the objective tiers solved in order (priority weight placed, layers on GPUs, replicas
  kept in place, GPUs and workers used), each fixing the previous optimum, none ending worse than
  the incumbent; ``lns``: on fleets larger than one group of workers, the GPUs and workers tier
  searched group by group; ``gaps``: each tier's bound and gap in its own units, where it means
  something.
* ``pricing``: the single-deployment CP-SAT model (same memory model, same rules) priced with dual
  prices on every GPU, worker and pool: the layout with the best reduced cost over all layouts.
* ``colgen``: column generation, the master's LP relaxation (GLOP) and pricing in rounds; new
  columns join the candidates, and every round gives a bound over all layouts (priority-weighted
  placement tier, and layers tier among plans that place as much).
* ``moves``: replica numbers and the order of stops and starts from the current placement.
* ``generate``: the fleet's candidates and the one-at-a-time seed; ``joint``: ``choose``, the
  master over given candidates, with replica numbers and moves; ``plan``: ``plan_fleet``, putting
  the stages together; ``sequential``: the one-at-a-time baseline (GPUStack's way) that also seeds
  the joint plan.

``FleetPlan.bounds`` gives every tier's value, whether it is proven, and its bound and gap where
one is known, over all layouts with column generation (``FleetConfig.column_generation``, on by
default) where pricing gives one, else over the candidates; ``FleetPlan.gap`` is the gap of the
first tier not proven.
"""

from layerfit.domain.fleet import Fleet, FleetConfig, FleetPlan, Placement
from layerfit.fleet.candidates import generate_candidates, valid_candidates
from layerfit.fleet.master import priority_weights
from layerfit.fleet.moves import order_moves
from layerfit.fleet.plan import choose, plan_fleet
from layerfit.fleet.sequential import plan_sequential, subtract
from layerfit.fleet.single_gpu import single_gpu_candidates

__all__ = [
    "Fleet",
    "FleetConfig",
    "FleetPlan",
    "Placement",
    "choose",
    "generate_candidates",
    "order_moves",
    "plan_fleet",
    "plan_sequential",
    "priority_weights",
    "single_gpu_candidates",
    "subtract",
    "valid_candidates",
]
