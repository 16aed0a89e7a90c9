"""Per-worker RAM, and the single pool of unified-memory workers.

* The main worker's RAM: its fixed costs (a linear function of partial offload, the output layer
  kept on the host and the absence of a main GPU) plus the host weights and KV of the kept blocks.
* Each rpc-server costs its worker a fixed amount of RAM.
* A unified-memory worker's pool holds its RAM claim and its GPUs' VRAM claims together.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from layerfit.solver.instance import Instance
from layerfit.solver.variables import Variables


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


def _main_ram(model: cp_model.CpModel, instance: Instance, variables: Variables) -> cp_model.LinearExprT:
    costs = instance.costs
    host = costs.host
    if costs.uniform_host_block is not None:
        kept: cp_model.LinearExprT = costs.uniform_host_block * variables.cpu_blocks
    else:
        kept = model.new_int_var(0, costs.host_prefix_up[-1], "host_kept_blocks")
        model.add_element(variables.cpu_blocks, costs.host_prefix_up, kept)
    return (
        host.base
        + host.partial * variables.partial
        + host.kept_output * (1 - variables.output_offloaded)
        + host.no_main_gpu * (1 - variables.any_local)
        + kept
    )
