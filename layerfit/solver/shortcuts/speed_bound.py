"""Bounds on the decode time that let the speed search skip models (``search.speed_search``).

* ``least_time_us``: no layout's time in the model is below it: the least fixed cost of any main
  worker, every block at its cheapest place (the host, or any GPU table, with or without its
  experts, the host then reading them) and the output layer at its cheapest. Each figure is one the
  model adds (the prefix sums' steps telescope to the model's differences), and every other figure
  is at least 0, so the sum bounds every layout's time from below.
* ``most_servers``: a layout with ``r`` rpc-servers adds ``r`` round trips of at least the cheapest
  link's ``hop`` to that: with ``target_us`` to beat, at most that many fit.

Both are in the model's own units (whole microseconds), so they hold for the model exactly.
"""

from __future__ import annotations

from layerfit.solver.model.instance import Instance
from layerfit.solver.model.speed_costs import SpeedCosts


def _movable(instance: Instance, costs: SpeedCosts) -> frozenset[int]:
    """Blocks whose experts may stay on the host while the block sits on a GPU."""
    decided = frozenset() if instance.experts is None else frozenset(instance.experts.blocks)
    return decided | frozenset(costs.fixed_host_experts)


def least_time_us(instance: Instance) -> int:
    """A lower bound on the time of every layout of the instance (see the module)."""
    costs = instance.speed
    if costs is None:
        raise ValueError("the instance does not model time")
    hosts = [costs.hosts[h] for w, h in enumerate(costs.host_of) if h is not None and instance.workers[w].main_ok]
    if not hosts:
        return 0
    movable = _movable(instance, costs)
    fixed_moved = frozenset(costs.fixed_host_experts)
    total = min(host.fixed for host in hosts)
    for block in range(instance.n_blocks):
        options = [host.prefix[block + 1] - host.prefix[block] for host in hosts]
        least_reading = min(host.experts[block] for host in hosts)
        for table in costs.tables:
            with_experts = table.block(block)
            without = with_experts - table.saving[block] + least_reading
            if block in fixed_moved:
                options.append(without)
            else:
                options.append(with_experts)
                if block in movable:
                    options.append(without)
        total += min(options)
    outputs = [host.output for host in hosts] + [table.output for table in costs.tables]
    return total + min(outputs)


def most_servers(instance: Instance, target_us: int) -> int:
    """The most rpc-servers a layout whose time is at most ``target_us`` can have."""
    costs = instance.speed
    if costs is None:
        raise ValueError("the instance does not model time")
    hop = costs.least_hop()
    room = target_us - least_time_us(instance)
    if room < 0:
        return -1
    if hop <= 0:
        return instance.rpc_slots
    return min(instance.rpc_slots, room // hop)
