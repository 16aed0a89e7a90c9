"""Bounds on the decode time that let the speed search skip models (``search.speed_search``).

* ``least_time_us``: no layout's time in the model is below it: the least of
  ``speed_floor.time_floor`` over every number of blocks kept on the host.
* ``most_servers``: a layout with ``r`` rpc-servers adds ``r`` round trips of at least the cheapest
  link's ``hop`` to that: with ``target_us`` to beat, at most that many fit.
* ``one_worker_least_time_us``: no layout of one worker ``w`` (no rpc-server) is faster in the model:
  every block starts on ``w``'s CPU, and at most ``C`` of them move to its GPUs, ``C`` the most
  blocks its GPUs hold (``capacity.block_capacity``, an upper bound), each saving at most its best
  GPU table's difference; the ``C`` largest positive savings are taken. The output layer at its
  cheapest place among them, the host's fixed cost, and the least once-per-token cost of one of
  its GPUs (a layout that uses a GPU uses one); or every block on the host. Only where no block's
  experts may leave it (they would change both time and room).
  ``slower_mains``: the workers whose bound exceeds a known layout's time: no one-worker layout
  they lead can be optimal.

Both are in the model's own units (whole microseconds), so they hold for the model exactly.
"""

from __future__ import annotations

from layerfit.solver.model.capacity import block_capacity
from layerfit.solver.model.instance import Instance, SlotKind
from layerfit.solver.model.speed_floor import time_floor


def least_time_us(instance: Instance) -> int:
    """A lower bound on the time of every layout of the instance (see the module)."""
    if instance.speed is None:
        raise ValueError("the instance does not model time")
    floor = time_floor(instance)
    return min(floor, default=0)


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


def one_worker_least_time_us(instance: Instance, worker: int) -> int | None:
    """A lower bound on the time of every layout with ``worker`` as its only worker (see the
    module); ``None`` where it does not apply (no time modelled, experts that may move, no host)."""
    costs = instance.speed
    if costs is None or instance.experts is not None or costs.fixed_host_experts:
        return None
    h = costs.host_of[worker]
    if h is None:
        return None
    host = costs.hosts[h]
    view = instance.workers[worker]
    tables = [
        costs.tables[t]
        for c in view.classes
        if instance.classes[c].local_ok and (t := costs.local_table[c]) is not None
    ]
    kept = [host.prefix[b + 1] - host.prefix[b] for b in range(instance.n_blocks)]
    on_host = host.fixed + sum(kept) + host.output
    if not tables:
        return on_host
    savings = sorted((kept[b] - min(t.block(b) for t in tables) for b in range(instance.n_blocks)), reverse=True)
    room = min(instance.n_blocks, block_capacity(instance, worker, SlotKind.LOCAL, instance.local_slots))
    moved = sum(saving for saving in savings[:room] if saving > 0)
    output = min([host.output, *(t.output for t in tables)])
    device = min(t.device for t in tables)  # a layout using a GPU uses at least one
    return min(on_host, host.fixed + sum(kept) - moved + output + device)


def slower_mains(instance: Instance, target_us: int) -> frozenset[int]:
    """Workers each of whose one-worker layouts takes more than ``target_us`` in the model."""
    slower = set()
    for w, view in enumerate(instance.workers):
        if not view.main_ok:
            continue
        least = one_worker_least_time_us(instance, w)
        if least is not None and least > target_us:
            slower.add(w)
    return frozenset(slower)
