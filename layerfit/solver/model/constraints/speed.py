"""The decode time per token as a model variable (``Variables.decode_us``), exactly the sum of the
figures of ``speed_costs`` a layout adds (whole microseconds), and the deployment's minimum speed.

Device slots run in order, so a slot's blocks are those between two boundaries: ``cpu_blocks``,
each slot's start, and ``n``. For each table (a GPU speed in a role) the prefix sums at the
boundaries are element constraints, and a slot's block time is the difference on its class's
table, enforced by the slot's table literal (``u``), zero for the others: as the memory costs of
``vram`` take a prefix-sum difference, here one per table (a table whose blocks all take the same
time: that time times the slot's blocks). Blocks whose experts stay on the host (a decision of the
model, or a stand-in profile's fixed ones on GPUs) save their table's expert time, cost the host
their reading and their device a few copies, through prefix sums of those savings and counts.

An rpc slot's round trip depends on the main worker's network and its own worker's: one literal
per pair of networks. The host's figures depend on the main worker's CPU: one literal per CPU.
Every figure is posted as an equality under its literal, so ``decode_us`` is the layout's time
in any solution (not only at the optimum): the tie-break and alternatives fix it exactly.
A redundant floor by the host's blocks (``speed_floor``) helps the proofs.
"""

from __future__ import annotations

from collections.abc import Sequence

from ortools.sat.python import cp_model

from layerfit.solver.model.capacity import block_capacity
from layerfit.solver.model.instance import Instance, SlotKind
from layerfit.solver.model.speed_costs import SpeedCosts
from layerfit.solver.model.speed_floor import least_device_cost, time_floor
from layerfit.solver.model.variables import Expr, IntVar, SlotVars, Variables

Literal = cp_model.IntVar


def post(model: cp_model.CpModel, instance: Instance, variables: Variables) -> None:
    """``decode_us`` equals the layout's time; at most the minimum speed's limit."""
    costs = instance.speed
    total = variables.decode_us
    if costs is None or total is None:
        return
    top = costs.time_upper_bound(len(variables.slots))
    moved = _host_expert_flags(model, instance, variables)
    boundaries: list[Expr] = [*(slot.start for slot in variables.slots), instance.n_blocks]
    if not variables.slots:
        boundaries = [instance.n_blocks]
    chains = _Chains(model, instance, costs, moved, boundaries, top)
    parts: list[Expr] = [_host_time(model, instance, costs, variables, moved, top)]
    main_net = _net_literals(model, costs, variables.main, "main")
    for k, slot in enumerate(variables.slots):
        parts.append(_slot_time(model, instance, costs, slot, k, chains, main_net, top))
    model.add(total == sum(parts))
    _floor(model, instance, variables, top)
    if costs.limit_us is not None:
        model.add(total <= costs.limit_us)


def _floor(model: cp_model.CpModel, instance: Instance, variables: Variables, top: int) -> None:
    """The redundant ``decode_us >= floor[cpu_blocks]`` (``speed_floor``): ties the time to the
    blocks kept on the host, which the memory constraints bound, so proofs need no search there."""
    floor = time_floor(instance)
    if not floor or variables.decode_us is None:
        return
    costs = instance.speed
    assert costs is not None
    least = model.new_int_var(min(floor), max(max(floor), 0), "decode_floor")
    model.add_element(variables.cpu_blocks, list(floor), least)
    device, hop = least_device_cost(instance, costs), costs.least_hop()
    per_slot = [(device if slot.kind is SlotKind.LOCAL else hop) * slot.used for slot in variables.slots]
    model.add(variables.decode_us >= least + sum(per_slot))
    # one worker whose blocks keep their experts: its GPUs hold at most block_capacity blocks
    if instance.rpc_slots == 0 and instance.experts is None and not costs.fixed_host_experts:
        n = instance.n_blocks
        for w, is_main in variables.main.items():
            room = min(n, block_capacity(instance, w, SlotKind.LOCAL, instance.local_slots))
            if room < n:
                model.add(variables.cpu_blocks >= n - room).only_enforce_if(is_main)


def _host_expert_flags(model: cp_model.CpModel, instance: Instance, variables: Variables) -> dict[int, Literal]:
    """Per block that may keep its experts on the host while it sits on a GPU: that literal (the
    model's decision, or for a stand-in profile's fixed blocks: the block is on a GPU)."""
    assert instance.speed is not None
    flags: dict[int, Literal] = dict(variables.host_experts)
    for block in instance.speed.fixed_host_experts:
        on_gpu = model.new_bool_var(f"fixed_experts_on_host{block}")
        model.add(variables.cpu_blocks <= block).only_enforce_if(on_gpu)
        model.add(variables.cpu_blocks >= block + 1).only_enforce_if(~on_gpu)
        flags[block] = on_gpu
    return flags


class _Chains:
    """Prefix sums at the slot boundaries: each table's block time, each table's savings and the
    count of blocks whose experts stay on the host (``at(...)[k]``: at boundary ``k``)."""

    def __init__(
        self,
        model: cp_model.CpModel,
        instance: Instance,
        costs: SpeedCosts,
        moved: dict[int, Literal],
        boundaries: Sequence[Expr],
        top: int,
    ) -> None:
        self.model, self.instance, self.costs, self.moved = model, instance, costs, moved
        self.boundaries, self.top = boundaries, top
        self._prefix: dict[int, list[Expr]] = {}
        self._savings: dict[int, list[Expr]] = {}
        self._count: list[Expr] | None = None

    def _elements(self, name: str, values: Sequence[Expr]) -> list[Expr]:
        found: list[Expr] = []
        for k, index in enumerate(self.boundaries):
            if isinstance(index, int):
                found.append(values[index])
                continue
            target = self.model.new_int_var(0, self.top, f"{name}_at{k}")
            self.model.add_element(index, values, target)
            found.append(target)
        return found

    def _running(self, name: str, weights: Sequence[int]) -> list[Expr]:
        """``sum(weights[b] * moved[b] for b < i)`` for every ``i``, as variables."""
        running: list[Expr] = [0]
        total = sum(weights[b] for b in self.moved)
        for block in range(self.instance.n_blocks):
            if block in self.moved and weights[block]:
                step = self.model.new_int_var(0, total, f"{name}_to{block + 1}")
                self.model.add(step == running[-1] + weights[block] * self.moved[block])
                running.append(step)
            else:
                running.append(running[-1])
        return running

    def prefix(self, t: int) -> list[Expr]:
        if t not in self._prefix:
            self._prefix[t] = self._elements(f"time_t{t}", list(self.costs.tables[t].prefix))
        return self._prefix[t]

    def savings(self, t: int) -> list[Expr]:
        if t not in self._savings:
            running = self._running(f"saved_t{t}", self.costs.tables[t].saving)
            self._savings[t] = self._elements(f"saved_t{t}", running)
        return self._savings[t]

    def count(self) -> list[Expr]:
        if self._count is None:
            running = self._running("moved", [1] * self.instance.n_blocks)
            self._count = self._elements("moved", running)
        return self._count


def _literal(model: cp_model.CpModel, members: Sequence[Literal], name: str) -> Literal:
    """A literal equal to the sum of at most one true literal among ``members``."""
    flag = model.new_bool_var(name)
    model.add(flag == sum(members))
    return flag


def _and(model: cp_model.CpModel, a: Literal, b: Literal, name: str) -> Literal:
    both = model.new_bool_var(name)
    model.add_bool_and([a, b]).only_enforce_if(both)
    model.add_bool_or([~a, ~b]).only_enforce_if(~both)
    return both


def _equal_if(model: cp_model.CpModel, value: Expr, literal: Literal, top: int, name: str) -> IntVar:
    """A variable equal to ``value`` when ``literal`` holds, else 0."""
    part = model.new_int_var(-top, top, name)  # a slot's savings may round above its blocks' time
    model.add(part == value).only_enforce_if(literal)
    model.add(part == 0).only_enforce_if(~literal)
    return part


def _net_literals(
    model: cp_model.CpModel, costs: SpeedCosts, chosen: dict[int, Literal], name: str
) -> dict[int, Literal]:
    """Per network (``costs.net_of``) among the workers of ``chosen``: the chosen one has it."""
    by_net: dict[int, list[Literal]] = {}
    for w, literal in chosen.items():
        by_net.setdefault(costs.net_of[w], []).append(literal)
    return {net: _literal(model, members, f"{name}_net{net}") for net, members in by_net.items()}


def _host_time(
    model: cp_model.CpModel,
    instance: Instance,
    costs: SpeedCosts,
    variables: Variables,
    moved: dict[int, Literal],
    top: int,
) -> Expr:
    """The main worker's CPU and process: the blocks and output layer kept there, the experts read
    there and the fixed cost, by the main worker's CPU."""
    by_host: dict[int, list[Literal]] = {}
    for w, literal in variables.main.items():
        h = costs.host_of[w]
        if h is not None:
            by_host.setdefault(h, []).append(literal)
    parts: list[Expr] = []
    for h, members in by_host.items():
        host = costs.hosts[h]
        kept = model.new_int_var(0, host.prefix[-1], f"host{h}_blocks")
        model.add_element(variables.cpu_blocks, list(host.prefix), kept)
        value = kept + host.output * (1 - variables.output_offloaded) + host.fixed
        value += sum(host.experts[b] * flag for b, flag in moved.items())
        if len(by_host) == 1:
            parts.append(value)
        else:
            parts.append(_equal_if(model, value, _literal(model, members, f"main_host{h}"), top, f"host{h}_time"))
    return sum(parts)


def _slot_time(
    model: cp_model.CpModel,
    instance: Instance,
    costs: SpeedCosts,
    slot: SlotVars,
    k: int,
    chains: _Chains,
    main_net: dict[int, Literal],
    top: int,
) -> Expr:
    """One slot's time: its blocks on its class's table, less what its host-expert blocks save,
    plus its once-per-token cost (a local GPU's copies, an rpc-server's round trip over its link),
    the output layer (and an rpc-server's logits) when it holds it, and the copies per block whose
    experts stay on the host."""
    local = slot.kind is SlotKind.LOCAL
    table_of = costs.local_table if local else costs.rpc_table
    by_table: dict[int, list[Literal]] = {}
    for c, assigned in slot.assign.items():
        t = table_of[c]
        if t is None:  # a class without this role's table (no other worker to serve): never chosen
            model.add(assigned == 0)
        else:
            by_table.setdefault(t, []).append(assigned)
    parts: list[Expr] = []
    moves = bool(chains.moved)
    count: Expr = chains.count()[k + 1] - chains.count()[k] if moves else 0
    for t, members in by_table.items():
        table = costs.tables[t]
        uses = _literal(model, members, f"{slot.name}_t{t}")
        unit = table.unit
        if unit is not None and not moves:
            blocks: Expr = unit * slot.blocks
        else:
            prefix = chains.prefix(t)
            blocks = prefix[k + 1] - prefix[k]
            if moves:
                saved = chains.savings(t)
                blocks = blocks - (saved[k + 1] - saved[k])
            # the costs telescope per table, so only the chosen table's difference is the slot's
        value = blocks + table.device * uses if local else blocks
        if local and moves and table.switch:
            value = value + table.switch * count
        parts.append(_equal_if(model, value, uses, top, f"{slot.name}_t{t}_time"))
        output = _and(model, uses, slot.holds_output, f"{slot.name}_t{t}_output")
        parts.append(table.output * output)
    if not local:
        parts += _link_time(model, costs, slot, main_net, count, moves, top)
    return sum(parts)


def _link_time(
    model: cp_model.CpModel,
    costs: SpeedCosts,
    slot: SlotVars,
    main_net: dict[int, Literal],
    count: Expr,
    moves: bool,
    top: int,
) -> list[Expr]:
    """An rpc slot's round trip, logits and expert copies over the link its worker and the main
    worker share: one literal per pair of their networks."""
    own = _net_literals(model, costs, slot.on_worker, slot.name)
    parts: list[Expr] = []
    for a, main in main_net.items():
        for b, mine in own.items():
            link = costs.links.get((a, b))
            if link is None:  # no two workers make this pair: never chosen
                model.add_bool_or([~main, ~mine])
                continue
            pair = _and(model, main, mine, f"{slot.name}_link{a}_{b}")
            parts.append(link.hop * pair)
            if link.logits:
                parts.append(link.logits * _and(model, pair, slot.holds_output, f"{slot.name}_logits{a}_{b}"))
            if moves and link.switch:
                parts.append(_equal_if(model, link.switch * count, pair, top, f"{slot.name}_switch{a}_{b}"))
    return parts
