"""Per-worker RAM, and the single pool of unified-memory workers.

* The main worker's RAM: its fixed costs (one host kind: partial offload, output layer on a GPU,
  a main GPU present, several devices) plus the host weights and KV of the kept blocks.
* Each rpc-server costs its worker a fixed amount of RAM.
* A unified-memory worker's pool holds its RAM claim and its GPUs' VRAM claims together.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.solver.model.constraints.experts import host_expert_ram
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.variables import Expr, Variables


def post(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    main_ram = _main_ram(model, instance, variables)
    for slot in variables.slots:
        for w, share in slot.pool_share.items():
            model.add(share >= slot.need).only_enforce_if(slot.on_worker[w])
    for w, view in enumerate(instance.workers):
        pool = [slot.pool_share[w] for slot in variables.slots if w in slot.pool_share]
        main = variables.main.get(w)
        if main is not None:
            model.add(main_ram + sum(pool) <= view.ram_capacity).only_enforce_if(main)
        servers = [slot.on_worker[w] for slot in variables.rpc if w in slot.on_worker]
        if servers:
            model.add(instance.costs.rpc_host * sum(servers) + sum(pool) <= view.ram_capacity)


def _main_ram(model: cp_model.CpModel, instance: Instance, variables: Variables) -> Expr:
    expression = main_ram_expression(model, instance, variables)
    _host_kind(model, variables)
    return expression


def main_ram_expression(model: cp_model.CpModel, instance: Instance, variables: Variables) -> Expr:
    """The main worker's RAM claim (scaled): its host kind's fixed cost and the kept blocks.

    Posts no constraint of its own (an element variable when blocks differ in size), so callers
    such as the fleet's pricing can price the claim of a model whose constraints are posted.
    """
    costs = instance.costs
    if costs.uniform_host_block is not None:
        kept: Expr = costs.uniform_host_block * variables.cpu_blocks
    else:
        kept = model.new_int_var(0, costs.host_prefix_up[-1], "host_kept_blocks")
        model.add_element(variables.cpu_blocks, costs.host_prefix_up, kept)
    fixed = sum(costs.host[kind] * chosen for kind, chosen in variables.host_kind.items())
    return fixed + kept + host_expert_ram(instance.experts, variables)


def _host_kind(model: cp_model.CpModel, variables: Variables) -> None:
    """Exactly one host kind, agreeing with the switches it is made of."""
    kinds = variables.host_kind
    model.add_exactly_one(kinds.values())
    model.add(sum(chosen for kind, chosen in kinds.items() if kind.partial) == variables.partial)
    model.add(sum(chosen for kind, chosen in kinds.items() if kind.output_offloaded) == variables.output_offloaded)
    model.add(sum(chosen for kind, chosen in kinds.items() if kind.main_gpu) == variables.any_local)
    if any(kind.multi is not None for kind in kinds):
        model.add(sum(chosen for kind, chosen in kinds.items() if kind.multi) == variables.multi)
