"""Symmetry breaking: identical workers, and the order of interchangeable devices.

* Identical workers (``WorkerView.twin_of``): the earlier one is main before the later one, and
  takes part before it. Any layout maps onto one that satisfies this by swapping the two.
* With blocks all alike and no ``-ts``, swapping two devices of the same role (with their block
  counts) changes no memory figure (and, where time is modelled and every block takes the same time
  on each GPU, no time: ``Instance.interchangeable_devices``), so RPC slots, and local slots before
  the main GPU, are put in class order. The last device is left out: it holds the output layer. So
  is the first slot of each group when the first device of a full offload has a cost of its own
  (``first_device_compute_bytes``): swapping it with another changes both GPUs' figures.

Identical GPUs of one worker need no breaking: they are one class with a count.
"""

from __future__ import annotations

import itertools

from ortools.sat.python import cp_model

from layerfit.solver.model.instance import Instance
from layerfit.solver.model.variables import Expr, SlotVars, Variables


def post(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    _twin_workers(model, instance, variables)
    if instance.interchangeable_devices:
        skip = ordered_from(instance)
        for group in (variables.rpc, variables.local):
            for earlier, later in itertools.pairwise(group[skip:]):
                _class_order(model, earlier, later)


def ordered_from(instance: Instance) -> int:
    """The first slot of each group that the class order takes: 1 when the first device of a full
    offload costs more than the others (``Costs.first_device``), else 0."""
    return 1 if instance.costs.first_device > 0 else 0


def _twin_workers(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    for w, view in enumerate(instance.workers):
        if view.twin_of is None:
            continue
        twin = view.twin_of
        if w in variables.main and twin in variables.main:
            model.add(variables.main[twin] >= variables.main[w])
        model.add(variables.worker_used[twin] >= variables.worker_used[w])


def _class_order(model: cp_model.CpModel, earlier: SlotVars, later: SlotVars) -> None:
    def class_index(slot: SlotVars) -> Expr:
        return sum(c * assigned for c, assigned in slot.assign.items())

    model.add(class_index(earlier) <= class_index(later)).only_enforce_if([later.used, ~later.last])
