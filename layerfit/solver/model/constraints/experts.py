"""Experts on the host: the constraints and expressions of ``layerfit.solver.model.expert_costs``."""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.solver.model.expert_costs import ExpertCosts
from layerfit.solver.model.variables import Expr, IntVar, Variables


def post(model: cp_model.CpModel, experts: ExpertCosts, variables: Variables) -> None:
    """Only GPU blocks keep experts on the host, and doing so is a partial offload."""
    for block, chosen in variables.host_experts.items():
        model.add(variables.cpu_blocks <= block).only_enforce_if(chosen)
        model.add_implication(chosen, variables.partial)


def slot_savings(model: cp_model.CpModel, experts: ExpertCosts, variables: Variables) -> list[Expr]:
    """VRAM each slot saves (in slot order): the experts kept on the host among its blocks.

    A prefix ``P[i]`` of the savings of blocks ``0 .. i-1``; a slot saves ``P[end] - P[previous
    end]`` (no CPU block saves anything, so ``P[cpu_blocks] = 0``)."""
    chosen = variables.host_experts
    total = sum(experts.saved[block] for block in chosen)
    prefix: list[IntVar] = [model.new_constant(0)]
    for block in range(len(experts.saved)):
        step = model.new_int_var(0, total, f"expert_savings_to{block + 1}")
        term: Expr = experts.saved[block] * chosen[block] if block in chosen else 0
        model.add(step == prefix[-1] + term)
        prefix.append(step)
    largest = max((experts.saved[block] for block in chosen), default=0)
    savings: list[Expr] = []
    previous: Expr = 0
    for slot in variables.slots:
        end = model.new_int_var(0, len(experts.saved), f"{slot.name}_expert_end")
        model.add(end == slot.start + slot.blocks)
        at_end = model.new_int_var(0, total, f"{slot.name}_expert_savings_end")
        model.add_element(end, prefix, at_end)
        saving = at_end - previous
        model.add(saving <= largest * slot.blocks)
        savings.append(saving)
        previous = at_end
    model.add(sum(savings) == sum(experts.saved[block] * x for block, x in chosen.items()))
    return savings


def host_expert_ram(experts: ExpertCosts | None, variables: Variables) -> Expr:
    """The main worker's RAM for the experts kept on the host."""
    if experts is None:
        return 0
    return sum(experts.host[block] * chosen for block, chosen in variables.host_experts.items())


def experts_on_gpus(model: cp_model.CpModel, experts: ExpertCosts, variables: Variables) -> Expr:
    """Blocks whose experts are on GPUs: expert blocks on GPUs less those keeping them on the host."""
    n = len(experts.saved)
    table = [experts.on_gpus_from(cpu) for cpu in range(n + 1)]
    on_gpus = model.new_int_var(0, len(experts.blocks), "expert_blocks_on_gpus")
    model.add_element(variables.cpu_blocks, table, on_gpus)
    return on_gpus - sum(variables.host_experts.values())
