"""The last device, and each slot's device kind (role, memory type, offload mode).

The last used local slot is the main GPU (role MAIN) and the last device; with no local GPU, the
last used RPC slot is the last device. Each used slot has exactly one device kind, and the kind
agrees with the slot's role, its GPU's worker (unified memory or not) and the global partial flag.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.domain.profile import DeviceRole
from layerfit.solver.instance import Instance
from layerfit.solver.variables import SlotVars, Variables


def post(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    _any_device(model, variables)
    _last_local(model, variables)
    _last_rpc(model, variables)
    for slot in variables.slots:
        _device_kind(model, instance, variables, slot)


def _any_device(model: cp_model.CpModel, variables: Variables) -> None:
    firsts = [group[0].used for group in (variables.rpc, variables.local) if group]
    model.add(variables.any_local == (variables.local[0].used if variables.local else 0))
    for first in firsts:
        model.add_implication(first, variables.any_device)
    model.add(variables.any_device <= sum(firsts))


def _last_local(model: cp_model.CpModel, variables: Variables) -> None:
    for slot, after in zip(variables.local, (*variables.local[1:], None), strict=True):
        model.add(slot.last == slot.used - (after.used if after is not None else 0))


def _last_rpc(model: cp_model.CpModel, variables: Variables) -> None:
    for slot, after in zip(variables.rpc, (*variables.rpc[1:], None), strict=True):
        ends_group = slot.used - (after.used if after is not None else 0)
        model.add(slot.last <= ends_group)
        model.add(slot.last <= 1 - variables.any_local)
        model.add(slot.last >= ends_group - variables.any_local)


def _device_kind(model: cp_model.CpModel, instance: Instance, variables: Variables, slot: SlotVars) -> None:
    model.add(sum(slot.device_kind.values()) == slot.used)
    unified = [a for c, a in slot.assign.items() if instance.workers[instance.classes[c].worker].unified]
    mixed = 0 < len(unified) < len(slot.assign)  # otherwise every kind of the slot has the same memory type
    for kind, chosen in slot.device_kind.items():
        model.add_implication(chosen, variables.partial if kind.partial else ~variables.partial)
        if mixed:
            model.add(sum(unified) == int(kind.unified)).only_enforce_if(chosen)
        if kind.role is DeviceRole.MAIN:
            model.add_implication(chosen, slot.last)
        elif kind.role is DeviceRole.LOCAL:
            model.add_implication(chosen, ~slot.last)
