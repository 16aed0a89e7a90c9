"""The ``layerfit`` command line.

Exit codes: 0 placed (or estimate printed), 1 nothing fits, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from layerfit.domain.base import format_bytes
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import OffloadOrder, PlannerConfig, Policy
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.fleet import Executor, Fleet, FleetConfig, FleetPlan
from layerfit.domain.layout import Layout
from layerfit.domain.params import LlamaParams
from layerfit.domain.plan import Plan, Status
from layerfit.errors import InputError, LayerfitError
from layerfit.io import load_file, load_model

EXIT_PLACED = 0
EXIT_NO_FIT = 1
EXIT_BAD_INPUT = 2

_EXAMPLES = """\
examples:
  layerfit plan --cluster examples/cluster.yaml --deployment examples/deployment.yaml
  layerfit plan --cluster examples/cluster.yaml --model model.gguf --ctx-size 32768 -ngl 99 --distributed
  layerfit plan --cluster examples/cluster.yaml --deployment examples/deployment.yaml --plot plan.png
  layerfit explain --cluster examples/cluster.yaml --deployment examples/too-big.yaml
  layerfit estimate model.gguf --ctx-size 16384 --cache-type-k q8_0 --flash-attn on
  layerfit replan examples/fleet.yaml --json

exit codes: 0 placed, 1 nothing fits, 2 bad input
"""


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


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


def _exit_code(status: Status) -> int:
    return EXIT_PLACED if status in (Status.OPTIMAL, Status.FEASIBLE) else EXIT_NO_FIT


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def _config(args: argparse.Namespace) -> PlannerConfig:
    return PlannerConfig(
        policy=Policy(args.policy), time_limit_s=args.time_limit, offload_order=OffloadOrder(args.offload_order)
    )


def _deployment(args: argparse.Namespace, backend_parameters: list[str]) -> Deployment:
    if args.deployment is not None:
        if args.model is not None or backend_parameters:
            raise InputError("--deployment", "give either a deployment file or --model with llama.cpp parameters")
        return load_file(Deployment, args.deployment)
    if args.model is None:
        raise InputError("--model", "give --model MODEL.gguf or --deployment FILE")
    data: dict[str, Any] = {
        "name": args.name or args.model.rsplit("/", 1)[-1].removesuffix(".gguf"),
        "gguf_path": args.model,
        "params": LlamaParams.from_args(backend_parameters),
        "cpu_offloading": not args.no_cpu_offloading,
        "distributed_inference_across_workers": args.distributed,
        "kind": ModelKind(args.kind),
    }
    if args.gpus:
        data["gpu_selection"] = args.gpus.split(",")
    return load_model(Deployment, data, "command line")


def _plot(path: str | None, cluster: Cluster, panels: list[tuple[str, list[tuple[str, Any]]]]) -> None:
    if path is not None:
        from layerfit.plot import render

        written = render(cluster, panels, path)
        print(f"picture written to {written}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------


def cmd_plan(args: argparse.Namespace, rest: list[str]) -> int:
    from layerfit import planner

    cluster = load_file(Cluster, args.cluster)
    deployment = _deployment(args, rest)
    config = _config(args)
    if args.layout is not None:
        plan = planner.evaluate(cluster, deployment, load_file(Layout, args.layout), config)
    else:
        plan = planner.plan(cluster, deployment, config, explain=args.command == "explain")
    print(plan.model_dump_json(indent=2) if args.json else render_plan(plan))
    _plot(
        args.plot,
        cluster,
        [(f"{plan.deployment}: {plan.status.value}", [(plan.deployment, c.claims) for c in [plan.best] if c])],
    )
    return _exit_code(plan.status)


def cmd_estimate(args: argparse.Namespace, rest: list[str]) -> int:
    from layerfit import estimators
    from layerfit.estimators.report import estimate_table

    params = LlamaParams.from_args(rest)
    shape = estimators.read_gguf(args.model)
    profile = estimators.estimate_profile(shape, params)
    if args.json:
        print(profile.model_dump_json(indent=2))
    else:
        print(estimate_table(shape, profile))
    return EXIT_PLACED


def cmd_replan(args: argparse.Namespace, rest: list[str]) -> int:
    from layerfit.fleet import plan_fleet

    if rest:
        raise InputError("replan", f"unexpected arguments {rest}")
    fleet = load_file(Fleet, args.fleet)
    config = FleetConfig(
        time_limit_s=args.time_limit, executor=Executor(args.executor), progress=not args.quiet and not args.json
    )
    result = plan_fleet(fleet, config)
    print(result.model_dump_json(indent=2) if args.json else render_fleet(result))
    before = [(f"{p.deployment}#{p.replica}", p.layout) for p in fleet.current]
    if args.plot:
        from layerfit.check import reference_reasons, unified_workers
        from layerfit.memory import claims
        from layerfit.planner import resolve_profile

        profiles = {d.name: resolve_profile(d) for d in fleet.deployments}
        unified = unified_workers(fleet.cluster)
        old = [
            (name, claims(profiles[name.rsplit("#", 1)[0]], layout, unified))
            for name, layout in before
            if not reference_reasons(fleet.cluster, layout)
        ]
        new = [(f"{p.deployment}#{p.replica}", p.claims) for p in result.placements]
        _plot(args.plot, fleet.cluster, [("current", old), ("new plan", new)])
    return _exit_code(result.status) if not result.unplaced or result.placements else EXIT_NO_FIT


def _add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", required=True, help="cluster YAML/JSON (workers, GPUs, allocatable memory)")
    parser.add_argument("--deployment", help="deployment YAML/JSON (model, llama.cpp parameters, rules)")
    parser.add_argument("--model", help="GGUF file; llama.cpp parameters may follow (-c 8192 -ngl 99 -ts 1,1 ...)")
    parser.add_argument("--name", help="deployment name (default: the model file's name)")
    parser.add_argument("--no-cpu-offloading", action="store_true", help="forbid layers on the CPU")
    parser.add_argument("--distributed", action="store_true", help="allow RPC servers on other workers")
    parser.add_argument("--gpus", help="manual GPU selection: worker:cuda:0,worker:cuda:1")
    parser.add_argument("--kind", choices=[k.value for k in ModelKind], default=ModelKind.LLM.value)
    parser.add_argument("--layout", help="evaluate this layout instead of searching for one")
    parser.add_argument("--policy", choices=[p.value for p in Policy], default=Policy.BINPACK.value)
    parser.add_argument("--time-limit", type=float, default=10.0, help="solver time limit in seconds (default 10)")
    parser.add_argument(
        "--offload-order",
        choices=[o.value for o in OffloadOrder],
        default=OffloadOrder.OUTPUT_FIRST.value,
        help="output-last for llama.cpp builds older than December 2025",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--plot", help="draw the plan into FILE.png, FILE.svg or FILE.html")


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="layerfit",
        description="Place GGUF models (llama.cpp) on GPU clusters, and prove the placement optimal.",
        epilog=_EXAMPLES,
        formatter_class=formatter,
        allow_abbrev=False,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser(
        "plan", help="place one deployment", epilog=_EXAMPLES, formatter_class=formatter, allow_abbrev=False
    )
    _add_plan_arguments(plan)
    plan.set_defaults(handler=cmd_plan)
    explain = commands.add_parser(
        "explain",
        help="why a deployment does not fit, and the smallest change that would",
        epilog=_EXAMPLES,
        formatter_class=formatter,
        allow_abbrev=False,
    )
    _add_plan_arguments(explain)
    explain.set_defaults(handler=cmd_plan)
    estimate = commands.add_parser(
        "estimate", help="memory of a GGUF model, per layer and in total", epilog=_EXAMPLES, formatter_class=formatter
    )
    estimate.add_argument("model", help="GGUF file; llama.cpp parameters may follow (--ctx-size, -ctk, -fa, -np ...)")
    estimate.add_argument("--json", action="store_true", help="print the MemoryProfile as JSON")
    estimate.set_defaults(handler=cmd_estimate)
    replan = commands.add_parser(
        "replan", help="re-plan a whole fleet and list the moves", epilog=_EXAMPLES, formatter_class=formatter
    )
    replan.add_argument("fleet", help="fleet YAML/JSON: cluster, deployments, current placements")
    replan.add_argument("--time-limit", type=float, default=60.0, help="master solver time limit (default 60 s)")
    replan.add_argument("--executor", choices=[e.value for e in Executor], default=Executor.LOCAL.value)
    replan.add_argument("--json", action="store_true", help="print the fleet plan as JSON")
    replan.add_argument("--quiet", action="store_true", help="no progress display")
    replan.add_argument("--plot", help="draw current and new placement into FILE.png, FILE.svg or FILE.html")
    replan.set_defaults(handler=cmd_replan)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    try:
        code: int = args.handler(args, rest)
    except LayerfitError as exc:
        print(f"layerfit: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return code


if __name__ == "__main__":
    sys.exit(main())
