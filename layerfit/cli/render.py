"""Text rendering of plans and fleet plans for a terminal."""

from __future__ import annotations

from collections.abc import Sequence

from layerfit.domain.base import counted, format_bytes
from layerfit.domain.cluster import Cluster
from layerfit.domain.fleet import FleetPlan, PlacedReplica, ReplicaChange
from layerfit.domain.layout import Claims
from layerfit.domain.plan import BEYOND_HARDWARE, EngineStats, Plan, Reason
from layerfit.domain.speed import SpeedPrediction, figure
from layerfit.heuristics.notes import Action

_VRAM_TERMS = ("weights", "output", "KV", "compute", "runtime", "total")
_RAM_TERMS = ("fixed", "weights", "KV", "experts", "embed", "output", "compute", "total")
_W = 11
"""Width of one size column."""


def _size(size: int | None) -> str:
    return "-" if size is None else "0" if size == 0 else format_bytes(size)


def _row(label: str, extra: str, sizes: Sequence[int | None]) -> str:
    cells = "".join(f"{_size(size):>{_W}}" for size in sizes)
    return f"  {label:<18}{extra}{cells}"


def _header(label: str, extra: str, terms: Sequence[str]) -> str:
    return f"  {label:<18}{extra}" + "".join(f"{term:>{_W}}" for term in terms)


def vram_table(plan: Plan, claims: Claims) -> list[str]:
    """One row per GPU with every term of its VRAM claim, the total and what stays free; a totals row.

    ``runtime`` is the per-process fixed cost plus the main GPU's extras; ``total`` is the sum of the
    terms before it; ``free after`` is the GPU's allocatable VRAM minus ``total`` (negative: short).
    """
    names = {use.gpu_id: use for use in plan.device_use}
    lines = [_header("GPU", f"{'llama.cpp':<10}{'role':<6}{'blocks':>7}", (*_VRAM_TERMS, "free after"))]
    for device, use in zip(claims.devices, plan.device_use or [None] * len(claims.devices), strict=True):
        gpu_id = use.gpu_id if use is not None else f"{device.worker}:?:{device.gpu_index}"
        llama = use.llama_device if use is not None else "?"
        terms = (
            device.weight_bytes,
            device.output_bytes,
            device.kv_bytes,
            device.compute_bytes,
            device.fixed_bytes + device.extra_bytes,
            device.total_bytes,
            use.free_after_bytes if use is not None else None,
        )
        lines.append(_row(gpu_id, f"{llama:<10}{device.role.value:<6}{device.blocks:>7}", terms))
    if len(claims.devices) > 1:
        totals = (
            sum(d.weight_bytes for d in claims.devices),
            sum(d.output_bytes for d in claims.devices),
            sum(d.kv_bytes for d in claims.devices),
            sum(d.compute_bytes for d in claims.devices),
            sum(d.fixed_bytes + d.extra_bytes for d in claims.devices),
            claims.total_vram_bytes,
            sum(use.free_after_bytes for use in names.values()) if names else None,
        )
        blocks = sum(d.blocks for d in claims.devices)
        lines.append(_row("total", f"{'':<16}{blocks:>7}", totals))
    return lines


def ram_table(plan: Plan, claims: Claims) -> list[str]:
    """One row per worker with every term of its RAM claim; a unified-memory worker adds its VRAM,
    and its ``free after`` is that of the one pool."""
    uses = {use.worker: use for use in plan.worker_use}
    experts = any(worker.expert_bytes for worker in claims.workers)
    names = tuple(term for term in _RAM_TERMS if experts or term != "experts")
    lines = [_header("RAM", f"{'role':<6}", (*names, "free after"))]
    rows: list[tuple[int, ...]] = []
    notes: list[str] = []
    for worker in claims.workers:
        terms = (
            worker.fixed_bytes,
            worker.weight_bytes,
            worker.kv_bytes,
            *((worker.expert_bytes,) if experts else ()),
            worker.embedding_bytes,
            worker.output_bytes,
            worker.compute_bytes,
            worker.ram_bytes,
        )
        rows.append(terms)
        use = uses.get(worker.worker)
        free = use.free_after_bytes if use is not None else None
        lines.append(_row(worker.worker, f"{'main' if worker.is_main else 'rpc':<6}", (*terms, free)))
        if use is not None and use.unified_memory:
            notes.append(
                f"  {worker.worker}: unified memory, one pool: RAM {format_bytes(worker.ram_bytes)} + VRAM "
                f"{format_bytes(worker.vram_bytes)} = {format_bytes(worker.pool_bytes)} of "
                f"{format_bytes(use.allocatable_bytes)}"
            )
    if len(rows) > 1:
        lines.append(_row("total", f"{'':<6}", (*(sum(column) for column in zip(*rows, strict=True)), None)))
    return lines + notes


_TRIED = {
    Action.SINGLE_GPU.value: "all layers on one GPU",
    Action.MULTI_GPU.value: "all layers split over one worker's GPUs",
    Action.DISTRIBUTED.value: "main worker plus RPC servers",
    Action.PARTIAL.value: "some layers on one worker's GPUs, the rest on its CPU",
    Action.CPU_ONLY.value: "CPU only",
}
"""The layout each strategy tried, in words, for the memory it was short of."""


def _tried(reason: Reason) -> str:
    """`` (tried: ...)`` for a memory shortfall of a strategy's layout; empty otherwise."""
    if reason.needed_bytes is None or reason.strategy not in _TRIED:
        return ""
    return f" (tried: {_TRIED[reason.strategy]})"


def _layouts_differ(reasons: Sequence[Reason]) -> list[str]:
    """Why one GPU's need differs between the layouts tried, when it does."""
    needs: dict[tuple[str | None, int | None], set[int]] = {}
    for reason in reasons:
        if reason.resource == "vram" and reason.needed_bytes is not None and _tried(reason):
            needs.setdefault((reason.worker, reason.gpu_index), set()).add(reason.needed_bytes)
    if all(len(figures) < 2 for figures in needs.values()):
        return []
    return [
        "  (needs differ by the layout tried: in a split every GPU holds its own compute buffer and runtime "
        "cost, so the GPUs of a split need more in all than one GPU holding every layer; GPUStack's summary "
        "below is for the layout of the first strategy that gave advice)"
    ]


def _rate(per_s: float) -> str:
    """``~24``, ``~1,250``, ``~0.8``: a rate at the precision a prediction has."""
    return f"~{per_s:,.0f}" if per_s >= 10 else f"~{per_s:.1f}"


def speed_lines(speed: SpeedPrediction, terms: int = 2) -> list[str]:
    """The predicted speed, its largest decode terms, and what it assumed."""
    largest = speed.largest_text(terms)
    return [
        f"  predicted: {_rate(speed.decode_tokens_per_s)} tokens/s decode (one sequence, {speed.context_fill} tokens "
        f"cached), {_rate(speed.prompt_tokens_per_s)} tokens/s prompt; "
        f"per token {figure(speed.decode_ms_per_token)} ms, most in {largest}",
        *(f"    assumed: {text}" for text in speed.assumptions),
    ]


def render_plan(plan: Plan) -> str:
    """A plan as text for a terminal: status, every term of every claim, reasons, command lines."""
    lines = [f"deployment {plan.deployment}: {plan.status.value}"]
    best = plan.best
    if best is not None:
        layout = best.layout
        output = " (output layer on GPU)" if layout.output_offloaded else " (output layer on CPU)"
        lines.append(
            f"  {best.strategy.value}: main worker {layout.main_worker}, {layout.gpu_layers}/{layout.n_blocks + 1} "
            f"layers on GPUs{output}, {layout.cpu_blocks} blocks on CPU"
        )
        if best.speed is not None:
            lines += speed_lines(best.speed)
        if best.claims.devices:
            lines += vram_table(plan, best.claims)
        lines += ram_table(plan, best.claims)
        if plan.alternatives:
            lines.append(f"  {len(plan.alternatives)} equally good alternative(s)")
    shown = set()
    for reason in plan.reasons:
        if reason.message not in shown:  # two strategies may give the same reason: print it once
            lines.append(f"  ! {reason.severity.value}: {reason.message}{_tried(reason)}")
        shown.add(reason.message)
    lines += _layouts_differ(plan.reasons)
    lines += [f"  {message}" for message in plan.messages if message not in shown]
    changes = [relaxation for relaxation in plan.relaxations if relaxation.kind not in BEYOND_HARDWARE]
    if changes:
        lines.append("  any one of these changes places it (each was planned with the change made):")
        lines += [f"    - {relaxation.message}" for relaxation in changes]
    lines += [f"  beyond this hardware: {r.message}" for r in plan.relaxations if r.kind in BEYOND_HARDWARE]
    if best is not None and not plan.commands and plan.status.value == "infeasible":
        lines.append("  no launch commands: this layout does not fit")
    if plan.commands:
        lines.append("  commands:")
        lines += [f"    [{command.worker}] {command.line}" for command in plan.commands]
    lines += [f"  {stats_line(stats)}" for stats in plan.stats]
    return "\n".join(lines)


_EXPLAIN_FOUND = {
    "infeasible": "no single change found that places it",
    "unknown": "cut short by its {limit} (a smaller change may exist, or one not found)",
}
"""What the explain stage's status says: the changes it tried (``Relaxation``), each a relaxed plan."""


def stats_line(stats: EngineStats) -> str:
    """An engine's status and time; the explain stage's says what it found, not a plan's status."""
    took = f"{stats.wall_time_s * 1000:.1f} ms"
    if stats.engine != "explain":
        return f"{stats.engine}: {stats.status.value} in {took}{_objective(stats)}"
    limit = "time limit" if stats.safety_stops else "work budget"
    changes = int(stats.details.get("changes", 0))
    if stats.status.value == "feasible":
        found = f"{counted(changes, 'changes')} found that place{'s' if changes == 1 else ''} it"
    else:
        found = _EXPLAIN_FOUND[stats.status.value].format(limit=limit)
    return f"explain: {found}; {stats.details.get('plans', 0)} relaxed plans in {took}"


def _objective(stats: EngineStats) -> str:
    """`` (objective speed: ...)`` for a solve under ``objective: speed``, with its rounding."""
    if stats.details.get("objective") != "speed":
        return ""
    rounding = stats.details.get("speed_rounding_us")
    return (
        f" (objective speed: the fastest predicted decode, proven on times in whole microseconds, each within "
        f"{rounding} us of the prediction)"
    )


_CHANGE_NOTES = {"started": "first start", "moved": "move", "stopped": "stops for good"}


def _replica_line(cluster: Cluster, placed: PlacedReplica) -> str:
    gpus = ", ".join(cluster.gpu_id(d.worker, d.gpu_index) for d in placed.layout.devices) or "CPU"
    speed = ""
    if placed.speed is not None:
        speed = f", {_rate(placed.speed.decode_tokens_per_s)} tokens/s alone"
        if placed.busy_speed is not None:
            speed += f", {_rate(placed.busy_speed.decode_tokens_per_s)} with its GPUs' other replicas busy"
    return f"    {placed.deployment}#{placed.replica}: {placed.layout.main_worker} [{gpus}]{speed}"


def render_fleet(plan: FleetPlan, cluster: Cluster) -> str:
    """A fleet plan as text: replicas kept, moved, started and stopped (each in its own list), the
    steps in order, what to stop by hand, and the command lines of every placed replica."""
    proven = plan.proven_text
    lines = [f"fleet: {plan.status.value}" + (f" ({proven})" if proven else "")]
    by_change = {change: [p for p in plan.placements if p.change is change] for change in ReplicaChange}
    placed_changes = (ReplicaChange.KEPT, ReplicaChange.MOVED, ReplicaChange.STARTED)
    counts = ", ".join(f"{len(by_change[change])} {change.value}" for change in placed_changes)
    lost = f", {len(plan.lost)} to stop by hand (GPU or worker gone)" if plan.lost else ""
    stopped = f"{len(plan.stopped)} stopped{lost}"
    lines.append(f"  {len(plan.placements)} placed ({counts}), {stopped}, {len(plan.unplaced)} not placed")
    lines += [f"  tier: {bound.text}" for bound in plan.bounds]
    for change in placed_changes:
        if by_change[change]:
            lines.append(f"  {change.value}:")
            lines += [_replica_line(cluster, placed) for placed in by_change[change]]
    if plan.stopped:
        lines.append("  stopped:")
        lines += [f"    {ref.deployment}#{ref.replica}" for ref in plan.stopped]
    for missing in plan.unplaced:
        why = "; ".join(reason.message for reason in missing.reasons)
        lines.append(f"  not placed: {missing.deployment}#{missing.replica}: {why}")
    for reason in plan.reasons:
        lines.append(f"  ! {reason.severity.value}: {reason.message}")
    if plan.lost:
        lines.append("  stop by hand (their GPU or worker is gone from the cluster):")
        lines += [
            f"    {lost.deployment}#{lost.replica} on {lost.worker} [{', '.join(lost.gpus) or 'CPU'}]"
            for lost in plan.lost
        ]
    if plan.moves:
        lines.append("  steps:")
        for move in plan.moves:
            note = _CHANGE_NOTES[move.change.value] + (", after a stop: downtime" if move.downtime else "")
            gpus = ", ".join(move.gpus) or "CPU"
            lines.append(f"    {move.step + 1}. {move.action} {move.deployment}#{move.replica} on {gpus} ({note})")
    if plan.commands:
        lines.append("  commands:")
        for replica in plan.commands:
            lines.append(f"    {replica.deployment}#{replica.replica}:")
            lines += [f"      [{command.worker}] {command.line}" for command in replica.commands]
    if plan.refused:
        names = ", ".join(plan.refused)
        lines.append(f"refused for bad input (see 'not placed'; exit code 2): {names}; the rest is planned")
    return "\n".join(lines)
