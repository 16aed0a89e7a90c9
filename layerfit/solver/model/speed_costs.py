"""The decode time per token in the model's units: whole microseconds, read from ``layerfit.speed``.

``speed.decode.decode_costs`` gives every cost a layout adds up for one main worker (the ``decode``
module docstring writes the sum out). Here they are computed once per distinct fact and rounded to
whole microseconds (``to_us``: to the nearest), so that the CP-SAT model (``constraints.speed``)
adds integers:

* a **table** per distinct GPU speed in a role (local GPU or rpc-server): the prefix sums of its
  blocks' time with their experts (``prefix[i]``: blocks ``0 .. i-1``, each sum rounded), what a
  block saves there when its experts stay on the host (``saving``), the output layer, and, for a
  local GPU, its once-per-token copy and synchronisation (``device``) and the copies per block whose
  experts stay on the host (``switch``). GPUs of one name, figures and type share a table (a GPU
  served by ggml's CPU backend: its worker's CPU, so its worker too);
* a **host** per distinct main-worker CPU (RAM bandwidth and threads): prefix sums of the blocks
  kept there, the output layer there, each block's experts read there, the fixed cost per token;
* a **link** per pair of network facts (main worker's, server worker's): an rpc-server's round
  trip and traffic (``hop``), the logits beyond the hidden state when it holds the output layer,
  and the round trips per block whose experts stay on the host.

Rounding: every figure the model adds is one rounded number, so a layout's time in the model
differs from its predicted time by at most half a microsecond per figure it adds; ``error_us``
bounds that over every layout of the instance. The model's optimum is exact on the rounded
figures; no layout is faster than it by more than ``2 * error_us`` (the plan says so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from math import ceil

from layerfit.domain.cluster import Cluster, Network
from layerfit.domain.deployment import Deployment
from layerfit.domain.profile import MemoryProfile
from layerfit.speed import DecodeCosts, DeviceCosts, decode_costs, speed_shape
from layerfit.speed.deployment import decode_limit_ms, deployment_settings, gpu_key, host_key
from layerfit.speed.devices import gpu_facts
from layerfit.speed.predict import context_fill

US_PER_MS = 1000


def to_us(ms: float) -> int:
    """Milliseconds as whole microseconds, to the nearest."""
    return round(ms * US_PER_MS)


@dataclass(frozen=True)
class SpeedTable:
    """One GPU speed in one role, in microseconds."""

    prefix: tuple[int, ...]
    """``prefix[i]``: blocks ``0 .. i-1`` with their experts (the sum rounded)."""
    saving: tuple[int, ...]
    """Per block: the time its routed experts take here (saved when they stay on the host)."""
    output: int
    device: int = 0
    """Once per token when the device is used (a local GPU's copy and synchronisation)."""
    switch: int = 0
    """A local GPU: per block of it whose experts stay on the host."""

    @property
    def unit(self) -> int | None:
        """The time of one block, when every block takes the same and none saves anything."""
        steps = {b - a for a, b in zip(self.prefix, self.prefix[1:], strict=False)}
        return steps.pop() if len(steps) == 1 and not any(self.saving) else None

    def block(self, block: int) -> int:
        return self.prefix[block + 1] - self.prefix[block]

    def at_least_as_fast(self, other: SpeedTable) -> bool:
        """Every block, with or without its experts, the output layer and the fixed cost take no
        longer here than on ``other``."""
        n = len(self.saving)
        return (
            all(self.block(b) <= other.block(b) for b in range(n))
            and all(self.block(b) - self.saving[b] <= other.block(b) - other.saving[b] for b in range(n))
            and self.output <= other.output
            and self.device <= other.device
            and self.switch <= other.switch
        )


@dataclass(frozen=True)
class HostCosts:
    """The main worker's CPU and the main process, in microseconds."""

    prefix: tuple[int, ...]
    """``prefix[i]``: blocks ``0 .. i-1`` kept on the host."""
    output: int
    experts: tuple[int, ...]
    """Per block on a GPU whose experts stay on the host: reading them on the host."""
    fixed: int

    def at_least_as_fast(self, other: HostCosts) -> bool:
        return (
            all(a <= b for a, b in zip(self.prefix, other.prefix, strict=True))
            and all(a <= b for a, b in zip(self.experts, other.experts, strict=True))
            and self.output <= other.output
            and self.fixed <= other.fixed
        )


@dataclass(frozen=True)
class LinkCosts:
    """One rpc-server's costs over the link between its worker and the main worker, in microseconds."""

    hop: int
    logits: int
    switch: int
    """Per block of the server whose experts stay on the host."""

    def at_most(self, other: LinkCosts) -> bool:
        return self.hop <= other.hop and self.logits <= other.logits and self.switch <= other.switch


@dataclass(frozen=True)
class SpeedCosts:
    """Every decode cost of one deployment's instance, in whole microseconds (see the module)."""

    tables: tuple[SpeedTable, ...]
    local_table: tuple[int | None, ...]
    """Per GPU class: its table as a local GPU (``None``: no local role)."""
    rpc_table: tuple[int | None, ...]
    """Per GPU class: its table as an rpc-server (``None``: no rpc role)."""
    hosts: tuple[HostCosts, ...]
    host_of: tuple[int | None, ...]
    """Per worker: its CPU's host costs as the main worker (``None``: it cannot be main)."""
    net_of: tuple[int, ...]
    """Per worker: its network facts (an index: the links are per pair of them)."""
    links: Mapping[tuple[int, int], LinkCosts]
    """(main worker's network, server worker's network) -> an rpc-server's link costs."""
    fixed_host_experts: tuple[int, ...]
    """Blocks whose experts stay on the host wherever the block sits on a GPU (a stand-in profile's)."""
    limit_us: int | None
    """``min_decode_tokens_per_s`` as the most microseconds the model may count, less ``error_us``
    (so every layout the model accepts meets it); ``None``: no minimum."""
    error_us: int
    """How far a layout's time in the model may be from its predicted time, at most."""

    @property
    def uniform(self) -> bool:
        """Every table's blocks take the same time and none saves anything (symmetry breaking)."""
        return all(table.unit is not None for table in self.tables)

    def link(self, main: int, server: int) -> LinkCosts | None:
        return self.links.get((self.net_of[main], self.net_of[server]))

    def time_upper_bound(self, slots: int) -> int:
        """A bound on any layout's time in the model over ``slots`` devices: every figure at its largest."""
        blocks = len(self.tables[0].saving) if self.tables else 0
        per_slot = max((t.prefix[-1] + t.output + t.device + t.switch * blocks for t in self.tables), default=0)
        per_slot += max((link.hop + link.logits + link.switch * blocks for link in self.links.values()), default=0)
        host = max((h.prefix[-1] + h.output + sum(h.experts) + h.fixed for h in self.hosts), default=0)
        return host + slots * per_slot

    def least_hop(self) -> int:
        """The cheapest rpc-server round trip over any link."""
        return min((link.hop for link in self.links.values()), default=0)

    @cached_property
    def table_order(self) -> tuple[tuple[bool, ...], ...]:
        """``table_order[a][b]``: table ``a`` at least as fast as table ``b`` (computed once)."""
        return tuple(tuple(a.at_least_as_fast(b) for b in self.tables) for a in self.tables)

    @cached_property
    def host_order(self) -> tuple[tuple[bool, ...], ...]:
        """``host_order[a][b]``: host ``a`` at least as fast as host ``b`` (computed once)."""
        return tuple(tuple(a.at_least_as_fast(b) for b in self.hosts) for a in self.hosts)


ClassRef = tuple[int, int, bool, bool]
"""A GPU class as the costs need it: its worker's position, a GPU index, local and rpc roles."""


def _table(device: DeviceCosts, local: bool) -> SpeedTable:
    """A device's costs in microseconds; with every block alike (and no experts to save), one
    rounded figure per block, so that the model may count blocks instead of summing prefixes."""
    alike = len(set(device.block_ms)) == 1 and device.block_ms == device.dense_ms
    if alike:
        prefix = tuple(to_us(device.block_ms[0]) * i for i in range(len(device.block_ms) + 1))
    else:
        prefix = tuple(to_us(ms) for ms in accumulate(device.block_ms, initial=0.0))
    saving = tuple(to_us(full - dense) for full, dense in zip(device.block_ms, device.dense_ms, strict=True))
    return SpeedTable(
        prefix=prefix,
        saving=saving,
        output=to_us(device.output_ms),
        device=to_us(device.device_ms) if local else 0,
        switch=to_us(device.expert_switch_ms) if local else 0,
    )


def _host(costs: DecodeCosts) -> HostCosts:
    return HostCosts(
        prefix=tuple(to_us(ms) for ms in accumulate(costs.host.block_ms, initial=0.0)),
        output=to_us(costs.host.output_ms),
        experts=tuple(to_us(ms) for ms in costs.host_expert_ms),
        fixed=to_us(costs.fixed_ms),
    )


class _Requests:
    """The ``decode_costs`` calls the costs need, one per main worker, and what each call gives."""

    def __init__(self) -> None:
        self.gpus: dict[str, dict[tuple[str, int], None]] = {}

    def ask(self, main: str, gpus: Iterable[tuple[str, int]] = ()) -> None:
        wanted = self.gpus.setdefault(main, {})
        wanted.update(dict.fromkeys(gpus))


def speed_costs(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    classes: Sequence[ClassRef],
    main_ok: Sequence[bool],
    rpc_ok: Sequence[bool],
    slots: int,
) -> SpeedCosts:
    """The decode costs of every class, main worker and link of an instance (``slots``: its
    device slots, for the rounding bound)."""
    settings = deployment_settings(deployment, profile)
    shape, _ = speed_shape(profile, settings)
    fill, _ = context_fill(shape, settings)
    threads = settings.threads
    workers = cluster.workers
    requests = _Requests()
    table_keys: dict[tuple[object, ...], tuple[str, tuple[str, int], bool]] = {}
    class_keys: list[tuple[tuple[object, ...] | None, tuple[object, ...] | None]] = []
    first_two = [v.name for v in workers[:2]]  # any other worker may stand for the main one
    for w, index, local_ok, remote_ok in classes:
        worker = workers[w]
        gpu = worker.gpu(index)
        on_cpu = gpu_facts("", gpu).on_cpu
        keys: list[tuple[object, ...] | None] = []
        for role_local, allowed in ((True, local_ok), (False, remote_ok)):
            if not allowed:
                keys.append(None)
                continue
            others = [name for name in first_two if name != worker.name]
            if not role_local and not others:  # no main worker it could serve
                keys.append(None)
                continue
            owner = host_key(worker, threads if role_local else None) if on_cpu else None
            table_key = (gpu_key(gpu), role_local, owner)
            if table_key not in table_keys:
                main = worker.name if role_local else others[0]
                table_keys[table_key] = (main, (worker.name, index), role_local)
                requests.ask(main, [(worker.name, index)])
            keys.append(table_key)
        class_keys.append((keys[0], keys[1]))
    host_keys: dict[tuple[object, ...], str] = {}
    host_by_worker: list[tuple[object, ...] | None] = []
    for worker, can_lead in zip(workers, main_ok, strict=True):
        cpu = host_key(worker, threads) if can_lead else None
        if cpu is not None and cpu not in host_keys:
            host_keys[cpu] = worker.name
            requests.ask(worker.name)
        host_by_worker.append(cpu)
    networks: dict[Network | None, int] = {}
    net_of = tuple(networks.setdefault(worker.network, len(networks)) for worker in workers)
    link_pairs: dict[tuple[int, int], tuple[str, tuple[str, int]]] = {}
    for m, worker in enumerate(workers):
        if not main_ok[m]:
            continue
        for v, server in enumerate(workers):
            pair = (net_of[m], net_of[v])
            if v == m or not rpc_ok[v] or not server.gpus or pair in link_pairs:
                continue
            link_pairs[pair] = (worker.name, (server.name, server.gpus[0].index))
            requests.ask(worker.name, [link_pairs[pair][1]])
    given = {
        main: decode_costs(profile, shape, cluster, main, fill=fill, gpus=list(gpus), threads=threads)
        for main, gpus in requests.gpus.items()
    }
    tables: dict[tuple[object, ...], int] = {}
    built: list[SpeedTable] = []
    for made_of, (main, rep, role_local) in table_keys.items():
        table = _table(given[main].gpus[rep], role_local)
        if table not in built:
            built.append(table)
        tables[made_of] = built.index(table)
    hosts = {cpu: _host(given[name]) for cpu, name in host_keys.items()}
    host_index = {cpu: i for i, cpu in enumerate(hosts)}
    links = {
        pair: LinkCosts(
            hop=to_us(given[main].gpus[rep].hop_ms),
            logits=to_us(given[main].gpus[rep].logits_ms),
            switch=to_us(given[main].gpus[rep].expert_switch_ms),
        )
        for pair, (main, rep) in link_pairs.items()
    }
    fixed = profile.stand_in_host_experts or ()
    error = rounding_bound(profile, built, slots)
    limit = decode_limit_ms(deployment)
    return SpeedCosts(
        tables=tuple(built),
        local_table=tuple(None if local is None else tables[local] for local, _ in class_keys),
        rpc_table=tuple(None if remote is None else tables[remote] for _, remote in class_keys),
        hosts=tuple(hosts.values()),
        host_of=tuple(None if key is None else host_index[key] for key in host_by_worker),
        net_of=net_of,
        links=links,
        fixed_host_experts=tuple(fixed),
        limit_us=None if limit is None else int(limit * US_PER_MS) - error,
        error_us=error,
    )


def rounding_bound(profile: MemoryProfile, tables: Sequence[SpeedTable], slots: int) -> int:
    """At most how many microseconds a layout's time in the model is from its predicted time: half
    a microsecond per rounded figure it adds. Per used device: its blocks (two prefix sums, or one
    figure per block when every block takes the same), its fixed cost or round trip, and on the last
    device the output layer and the logits; the host's blocks, output layer and fixed cost; per block
    whose experts may stay on the host: the saving, its copies and the host's reading."""
    halves = slots + 2 + 3  # each device's fixed cost or hop; the output and logits; the host's three
    uniform = all(table.unit is not None for table in tables)
    halves += profile.n_blocks if uniform else 2 * slots
    experts = len(profile.expert_blocks) if profile.is_moe else 0
    experts = max(experts, len(profile.stand_in_host_experts or ()))
    halves += 3 * experts
    return ceil(halves / 2)
