"""The last device, and each slot's device kind (role, memory type, offload mode).

The last used local slot is the main GPU (role MAIN) and the last device; with no local GPU, the
last used RPC slot is the last device; the first device is RPC slot 0, else local slot 0. Each used
slot has exactly one device kind, and the kind agrees with the slot's role, its GPU's worker
(unified memory or not), and the global partial-offload and several-devices flags.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.domain.profile import DeviceRole
from layerfit.solver.model.instance import Instance, SlotKind
from layerfit.solver.model.variables import Expr, SlotVars, Variables


def post(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    _any_device(model, variables)
    _last_local(model, variables)
    _last_rpc(model, variables)
    _multi_device(model, variables)
    for slot in variables.slots:
        _device_kind(model, instance, variables, slot)
    _first_device(model, variables)


def _any_device(model: cp_model.CpModel, variables: Variables) -> None:
    firsts = [group[0].used for group in (variables.rpc, variables.local) if group]
    model.add(variables.any_local == (variables.local[0].used if variables.local else 0))
    for first in firsts:
        model.add_implication(first, variables.any_device)
    model.add(variables.any_device <= sum(firsts))


def _last_local(model: cp_model.CpModel, variables: Variables) -> None:
    for slot, after in _with_next(variables.local):
        model.add(slot.last == slot.used - (after.used if after is not None else 0))


def _last_rpc(model: cp_model.CpModel, variables: Variables) -> None:
    for slot, after in _with_next(variables.rpc):
        ends_group = slot.used - (after.used if after is not None else 0)
        model.add(slot.last <= ends_group)
        model.add(slot.last <= 1 - variables.any_local)
        model.add(slot.last >= ends_group - variables.any_local)


def _multi_device(model: cp_model.CpModel, variables: Variables) -> None:
    devices = sum(slot.used for slot in variables.slots)
    model.add(devices >= 2 * variables.multi)
    model.add(devices <= 1 + len(variables.slots) * variables.multi)


def _first_device(model: cp_model.CpModel, variables: Variables) -> None:
    """The first device (RPC slot 0, else local slot 0) of a full offload over several devices."""
    any_rpc: Expr = variables.rpc[0].used if variables.rpc else 0
    for slot in variables.slots:
        flag = slot.first_full
        if flag is None:
            continue
        before: Expr = 0 if slot.kind is SlotKind.RPC else any_rpc
        model.add(flag <= slot.used)
        model.add(flag <= 1 - before)
        model.add(flag <= 1 - variables.partial)
        model.add(flag <= variables.multi)
        model.add(flag >= slot.used - before + (1 - variables.partial) + variables.multi - 2)


def _with_next(group: tuple[SlotVars, ...]) -> list[tuple[SlotVars, SlotVars | None]]:
    return [(slot, group[i + 1] if i + 1 < len(group) else None) for i, slot in enumerate(group)]


def _device_kind(model: cp_model.CpModel, instance: Instance, variables: Variables, slot: SlotVars) -> None:
    model.add(sum(slot.device_kind.values()) == slot.used)
    unified = [a for c, a in slot.assign.items() if instance.workers[instance.classes[c].worker].unified]
    mixed = 0 < len(unified) < len(slot.assign)  # otherwise every kind of the slot has the same memory type
    for kind, chosen in slot.device_kind.items():
        model.add_implication(chosen, variables.partial if kind.partial else ~variables.partial)
        if mixed and kind.unified is not None:
            model.add(sum(unified) == int(kind.unified)).only_enforce_if(chosen)
        if kind.multi is not None:
            model.add_implication(chosen, variables.multi if kind.multi else ~variables.multi)
        if kind.role is DeviceRole.MAIN:
            model.add_implication(chosen, slot.last)
        elif kind.role is DeviceRole.LOCAL:
            model.add_implication(chosen, ~slot.last)
