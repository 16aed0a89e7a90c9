"""Which worker is main, which GPU fills each slot, and which workers take part.

* Exactly one main worker.
* A slot holds at most one GPU; the GPU's worker is the main worker for a local slot and another
  worker for an RPC slot.
* Used slots form a prefix of their group; a class gives no more GPUs than it has.
* A worker takes part when it is main or runs an rpc-server.
"""

from __future__ import annotations

import itertools

from ortools.sat.python import cp_model

from layerfit.solver.model.instance import Instance, SlotKind
from layerfit.solver.model.variables import SlotVars, Variables


def post(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    _one_main(model, variables)
    for slot in variables.slots:
        _slot_holds_one_gpu(model, instance, slot)
        _slot_worker_matches_role(model, variables, slot)
    for group in (variables.rpc, variables.local):
        for earlier, later in itertools.pairwise(group):
            model.add(earlier.used >= later.used)
    _class_counts(model, instance, variables)
    _workers_used(model, instance, variables)


def _one_main(model: cp_model.CpModel, variables: Variables) -> None:
    if variables.main:
        model.add_exactly_one(variables.main.values())
    else:
        model.add_bool_or([])  # no worker can run the main process: nothing fits


def _slot_holds_one_gpu(model: cp_model.CpModel, instance: Instance, slot: SlotVars) -> None:
    for w, on_worker in slot.on_worker.items():
        members = [slot.assign[c] for c in instance.workers[w].classes if c in slot.assign]
        model.add(on_worker == sum(members))
    model.add(slot.used == sum(slot.on_worker.values()))


def _slot_worker_matches_role(model: cp_model.CpModel, variables: Variables, slot: SlotVars) -> None:
    for w, on_worker in slot.on_worker.items():
        main = variables.main.get(w)
        if slot.kind is SlotKind.LOCAL:
            if main is None:
                model.add(on_worker == 0)
            else:
                model.add_implication(on_worker, main)
        elif main is not None:
            model.add_implication(on_worker, ~main)


def _class_counts(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    for c, cls in enumerate(instance.classes):
        uses = [slot.assign[c] for slot in variables.slots if c in slot.assign]
        if len(uses) > cls.count:
            model.add(sum(uses) <= cls.count)


def _workers_used(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    for w in range(len(instance.workers)):
        used = variables.worker_used[w]
        reasons = [slot.on_worker[w] for slot in variables.rpc if w in slot.on_worker]
        main = variables.main.get(w)
        if main is not None:
            reasons.append(main)
        for reason in reasons:
            model.add_implication(reason, used)
        model.add(used <= sum(reasons))
