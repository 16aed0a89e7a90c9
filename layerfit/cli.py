"""The ``layerfit`` command line.

Exit codes: 0 placed (or estimate printed), 1 nothing fits, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from layerfit.domain.base import format_bytes
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import OffloadOrder, PlannerConfig, Policy
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Plan, Status
from layerfit.errors import LayerfitError
from layerfit.io import load_file

EXIT_PLACED = 0
EXIT_NO_FIT = 1
EXIT_BAD_INPUT = 2

_EXAMPLES = """\
examples:
  layerfit plan --cluster examples/cluster.yaml --deployment examples/deployment.yaml
  layerfit plan --cluster examples/cluster.yaml --deployment examples/deployment.yaml --layout examples/layout.yaml
  layerfit plan --cluster examples/cluster.yaml --deployment examples/deployment.yaml --json

exit codes: 0 placed, 1 nothing fits, 2 bad input
"""


def _config(args: argparse.Namespace) -> PlannerConfig:
    return PlannerConfig(
        policy=Policy(args.policy),
        time_limit_s=args.time_limit,
        offload_order=OffloadOrder(args.offload_order),
    )


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
    for reason in plan.reasons:
        lines.append(f"  ! {reason.severity.value}: {reason.message}")
    for message in plan.messages:
        if message not in {reason.message for reason in plan.reasons}:
            lines.append(f"  {message}")
    if plan.commands:
        lines.append("  commands:")
        lines.extend(f"    [{command.worker}] {command.line}" for command in plan.commands)
    return "\n".join(lines)


def _exit_code(plan: Plan) -> int:
    return EXIT_PLACED if plan.status in (Status.OPTIMAL, Status.FEASIBLE) else EXIT_NO_FIT


def cmd_plan(args: argparse.Namespace) -> int:
    from layerfit import planner

    cluster = load_file(Cluster, args.cluster)
    deployment = load_file(Deployment, args.deployment)
    config = _config(args)
    if args.layout is not None:
        plan = planner.evaluate(cluster, deployment, load_file(Layout, args.layout), config)
    else:
        plan = planner.plan(cluster, deployment, config)
    print(plan.model_dump_json(indent=2) if args.json else render_plan(plan))
    return _exit_code(plan)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="layerfit",
        description="Place GGUF models (llama.cpp) on GPU clusters, and prove the placement optimal.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser(
        "plan",
        help="place one deployment on a cluster",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    plan.add_argument("--cluster", required=True, help="cluster YAML/JSON (workers, GPUs, allocatable memory)")
    plan.add_argument("--deployment", required=True, help="deployment YAML/JSON (model, llama.cpp parameters, rules)")
    plan.add_argument("--layout", help="evaluate this layout instead of searching for one")
    plan.add_argument("--policy", choices=[p.value for p in Policy], default=Policy.BINPACK.value)
    plan.add_argument("--time-limit", type=float, default=10.0, help="solver time limit in seconds (default 10)")
    plan.add_argument(
        "--offload-order",
        choices=[o.value for o in OffloadOrder],
        default=OffloadOrder.OUTPUT_FIRST.value,
        help="output-last for llama.cpp builds older than December 2025",
    )
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(handler=cmd_plan)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except LayerfitError as exc:
        print(f"layerfit: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return code


if __name__ == "__main__":
    sys.exit(main())
