"""A floor under the decode time by the number of blocks kept on the host, in the model's units.

For ``i`` blocks on the host, every layout takes at least ``floor[i]``: the cheapest main worker's
fixed cost and its first ``i`` blocks (``HostCosts.prefix``), every later block at its cheapest
GPU that may serve (any of their tables, with its experts or, where they may stay on the host,
without them plus the least host's reading of them), the output layer at its cheapest place.
``constraints.speed`` adds, per slot used, the least once-per-token cost of a local GPU or the
least round trip of an rpc-server; every other figure the model adds (copies, logits) is at
least 0. Each figure is one the model adds
(the prefix sums' steps telescope to the model's differences), so the floor holds in the model
exactly. ``constraints.speed`` posts it as a redundant constraint (CP-SAT then ties the time to the
host's blocks, which the memory constraints bound); ``shortcuts.speed_bound`` takes its least
value as a bound on every layout.
"""

from __future__ import annotations

from layerfit.solver.model.instance import Instance
from layerfit.solver.model.speed_costs import HostCosts, SpeedCosts, SpeedTable


def _movable(instance: Instance, costs: SpeedCosts) -> frozenset[int]:
    """Blocks whose experts may stay on the host while the block sits on a GPU."""
    decided = frozenset() if instance.experts is None else frozenset(instance.experts.blocks)
    return decided | frozenset(costs.fixed_host_experts)


def main_hosts(instance: Instance, costs: SpeedCosts) -> list[HostCosts]:
    """The host costs of every worker that may be main."""
    return [costs.hosts[h] for w, h in enumerate(costs.host_of) if h is not None and instance.workers[w].main_ok]


def usable_tables(instance: Instance, costs: SpeedCosts) -> tuple[list[SpeedTable], list[SpeedTable]]:
    """The tables of the GPU classes that may serve: as local GPUs, and as rpc-servers."""
    local = {t for c, cls in enumerate(instance.classes) if cls.local_ok and (t := costs.local_table[c]) is not None}
    rpc = {t for c, cls in enumerate(instance.classes) if cls.rpc_ok and (t := costs.rpc_table[c]) is not None}
    return [costs.tables[t] for t in sorted(local)], [costs.tables[t] for t in sorted(rpc)]


def least_device_cost(instance: Instance, costs: SpeedCosts) -> int:
    """The least once-per-token cost of a local GPU that may serve (0 without one)."""
    local, _ = usable_tables(instance, costs)
    return min((table.device for table in local), default=0)


def _block_floor(block: int, tables: list[SpeedTable], least_reading: int, *, movable: bool, forced: bool) -> int:
    """The least time ``block`` takes on any of ``tables``: with its experts or, where they may
    stay on the host (``movable``; ``forced``: they must), without them plus their reading there."""
    options = []
    for table in tables:
        with_experts = table.block(block)
        without = with_experts - table.saving[block] + least_reading
        if forced:
            options.append(without)
        else:
            options.append(with_experts)
            if movable:
                options.append(without)
    return min(options)


def time_floor(instance: Instance) -> tuple[int, ...]:
    """``floor[i]`` for ``i`` = 0 .. n blocks on the host (see the module); empty without time or
    without a main worker."""
    costs = instance.speed
    if costs is None:
        return ()
    hosts = main_hosts(instance, costs)
    if not hosts:
        return ()
    n = instance.n_blocks
    local, rpc = usable_tables(instance, costs)
    output = min([host.output for host in hosts] + [table.output for table in local + rpc])
    on_host = [min(host.fixed + host.prefix[i] for host in hosts) + output for i in range(n + 1)]
    if not (local or rpc):  # no GPU may serve: every layout keeps all n blocks on the host
        return (on_host[n],) * (n + 1)
    movable, forced = _movable(instance, costs), frozenset(costs.fixed_host_experts)
    gpu = [
        _block_floor(b, local + rpc, min(host.experts[b] for host in hosts), movable=b in movable, forced=b in forced)
        for b in range(n)
    ]
    floors = [on_host[n]]
    for i in range(n - 1, -1, -1):
        floors.append(floors[-1] - on_host[i + 1] + on_host[i] + gpu[i])
    return tuple(reversed(floors))
