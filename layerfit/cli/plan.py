"""``layerfit plan`` and ``layerfit explain``: place one deployment, or say why it does not fit."""

from __future__ import annotations

import argparse

from layerfit.cli.common import EXAMPLES, HELP_FORMAT, SUBCOMMANDS, add_build_arguments, exit_code, seconds
from layerfit.domain.choices import ModelKind, Objective, Policy


def cmd_plan(args: argparse.Namespace, rest: list[str]) -> int:
    from layerfit.domain.cluster import Cluster
    from layerfit.io.documents import load_file

    cluster = load_file(Cluster, args.cluster)  # first: a bad cluster file answers before the rest loads
    from layerfit.cli.inputs import (
        check_objective,
        check_plot_target,
        check_selection,
        deployment_from_args,
        plan_panel,
        planner_config,
        progress_display,
        write_plot,
    )
    from layerfit.cli.render import render_plan
    from layerfit.domain.layout import Layout

    check_plot_target(args.plot)
    deployment = deployment_from_args(args, rest)
    check_selection(cluster, deployment, args.deployment or "--gpus")
    config = planner_config(args)
    check_objective(args, deployment)
    layout = load_file(Layout, args.layout) if args.layout is not None else None
    from layerfit.planning import planner  # after the inputs: a bad file answers before OR-Tools loads

    if layout is not None:
        plan = planner.evaluate(cluster, deployment, layout, config)
    else:
        with progress_display(args, args.command):
            plan = planner.plan(cluster, deployment, config, explain=args.command == "explain")
    print(plan.model_dump_json(indent=2) if args.json else render_plan(plan))
    if args.plot is not None:
        write_plot(args.plot, cluster, [plan_panel(cluster, deployment, plan)])
    return exit_code(plan.status)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``plan`` and ``explain`` to the subcommands."""
    plan = commands.add_parser(
        "plan", help=SUBCOMMANDS["plan"][1], epilog=EXAMPLES, formatter_class=HELP_FORMAT, allow_abbrev=False
    )
    _add_plan_arguments(plan)
    plan.set_defaults(handler=cmd_plan)
    explain = commands.add_parser(
        "explain",
        help=SUBCOMMANDS["explain"][1],
        epilog=EXAMPLES,
        formatter_class=HELP_FORMAT,
        allow_abbrev=False,
    )
    _add_plan_arguments(explain)
    explain.set_defaults(handler=cmd_plan)


def _add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", required=True, help="cluster YAML/JSON (workers, GPUs, allocatable memory)")
    parser.add_argument("--deployment", help="deployment YAML/JSON (model, llama.cpp parameters, rules)")
    parser.add_argument(
        "--model",
        help="GGUF file or URL (https://, hf://ORG/REPO[@REVISION]/FILE.gguf, ms://); llama.cpp parameters may "
        "follow (-c 8192 -ngl 99 -ts 1,1 ...)",
    )
    parser.add_argument("--name", help="deployment name (default: the model file's name)")
    parser.add_argument("--no-cpu-offloading", action="store_true", help="forbid layers on the CPU")
    parser.add_argument("--distributed", action="store_true", help="allow RPC servers on other workers")
    parser.add_argument("--gpus", help="manual GPU selection: worker:cuda:0,worker:cuda:1")
    parser.add_argument("--kind", choices=[k.value for k in ModelKind], help="the model's kind (default llm)")
    parser.add_argument("--layout", help="evaluate this layout instead of searching for one")
    parser.add_argument("--policy", choices=[p.value for p in Policy], default=Policy.BINPACK.value)
    parser.add_argument(
        "--objective",
        choices=[o.value for o in Objective],
        help="what the best layout is: layers (GPUStack's order: most layers on GPUs, then fewest workers and "
        "GPUs; the default) or speed (the fastest predicted decode, then fewest workers and GPUs); a deployment "
        "file's objective field says the same",
    )
    parser.add_argument(
        "--min-decode-tokens-per-s",
        type=float,
        metavar="RATE",
        help="with --model: the slowest predicted decode speed a layout may have (tokens/s, one sequence)",
    )
    parser.add_argument("--time-limit", type=seconds, default=10.0, help="solver time limit in seconds (default 10)")
    add_build_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument(
        "--quiet", action="store_true", help="no progress display (it is shown only when stderr is a terminal)"
    )
    parser.add_argument("--plot", help="draw the plan into FILE.png, FILE.svg or FILE.html")
