"""Text rendering of plans and fleet plans for a terminal."""

from __future__ import annotations

from layerfit.domain.base import format_bytes
from layerfit.domain.fleet import FleetPlan
from layerfit.domain.plan import Plan


def render_plan(plan: Plan) -> str:
    """A plan as text for a terminal: status, devices, worker RAM, reasons, command lines."""
    lines = [f"deployment {plan.deployment}: {plan.status.value}"]
    best = plan.best
    if best is not None:
        layout = best.layout
        lines.append(
            f"  {best.strategy.value}: main worker {layout.main_worker}, {layout.gpu_layers}/{layout.n_blocks + 1} "
            f"layers on GPUs, {layout.cpu_blocks} blocks on CPU"
        )
        lines.append(f"  {'device':<24}{'role':<7}{'blocks':>7}{'weights':>12}{'kv':>12}{'compute':>12}{'total':>12}")
        for device in best.claims.devices:
            name = f"{device.worker}:{device.gpu_index}" + (" +output" if device.holds_output else "")
            lines.append(
                f"  {name:<24}{device.role.value:<7}{device.blocks:>7}{format_bytes(device.weight_bytes):>12}"
                f"{format_bytes(device.kv_bytes):>12}{format_bytes(device.compute_bytes):>12}"
                f"{format_bytes(device.total_bytes):>12}"
            )
        for worker in best.claims.workers:
            role = "main" if worker.is_main else "rpc"
            lines.append(f"  RAM {worker.worker} ({role}): {format_bytes(worker.ram_bytes)}")
        if plan.alternatives:
            lines.append(f"  {len(plan.alternatives)} equally good alternative(s)")
    shown = set()
    for reason in plan.reasons:
        lines.append(f"  ! {reason.severity.value}: {reason.message}")
        shown.add(reason.message)
    lines += [f"  {message}" for message in plan.messages if message not in shown]
    if plan.relaxations:
        lines.append("  would fit with any one of:")
        lines += [f"    - {relaxation.message}" for relaxation in plan.relaxations]
    if plan.commands:
        lines.append("  commands:")
        lines += [f"    [{command.worker}] {command.line}" for command in plan.commands]
    for stats in plan.stats:
        lines.append(f"  {stats.engine}: {stats.status.value} in {stats.wall_time_s * 1000:.1f} ms")
    return "\n".join(lines)


def render_fleet(plan: FleetPlan) -> str:
    """A fleet plan as text: placements, unplaced replicas, moves."""
    unproven = f" ({plan.gap_tier} not proven" + (f", gap {plan.gap:.2%})" if plan.gap is not None else ")")
    lines = [f"fleet: {plan.status.value}" + (unproven if plan.gap_tier else "")]
    lines.append(f"  placed {len(plan.placements)}, unplaced {len(plan.unplaced)}, moves {len(plan.moves)}")
    for placed in plan.placements:
        gpus = ", ".join(f"{d.worker}:{d.gpu_index}" for d in placed.layout.devices) or "CPU"
        moved = " (moved)" if placed.moved else ""
        lines.append(f"  {placed.deployment}#{placed.replica}: {placed.layout.main_worker} [{gpus}]{moved}")
    for missing in plan.unplaced:
        why = "; ".join(reason.message for reason in missing.reasons)
        lines.append(f"  {missing.deployment}#{missing.replica}: not placed: {why}")
    for reason in plan.reasons:
        lines.append(f"  ! {reason.severity.value}: {reason.message}")
    if plan.moves:
        lines.append("  moves:")
        for move in plan.moves:
            note = " (after a stop: downtime)" if move.downtime else ""
            gpus = ",".join(move.gpus) or "CPU"
            lines.append(f"    {move.step + 1}. {move.action} {move.deployment}#{move.replica} on {gpus}{note}")
    return "\n".join(lines)
