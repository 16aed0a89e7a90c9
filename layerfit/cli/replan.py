"""``layerfit replan``: re-plan a whole fleet and list the moves."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from layerfit.cli.common import (
    EXAMPLES,
    EXIT_BAD_INPUT,
    EXIT_NO_FIT,
    HELP_FORMAT,
    SUBCOMMANDS,
    add_build_arguments,
    exit_code,
    seconds,
)
from layerfit.domain.choices import Executor

if TYPE_CHECKING:
    from layerfit.domain.fleet import Fleet, FleetPlan

PER_DEPLOYMENT_SECONDS = 2.0
"""Time limit of the per-deployment solves inside a fleet plan (``plan_fleet``'s default)."""


def cmd_replan(args: argparse.Namespace, rest: list[str]) -> int:
    from layerfit.budget.deadline import Deadline

    if args.executor == Executor.RAY:  # Ray's start is not the plan's: before the clock
        from layerfit.domain.fleet import FleetConfig
        from layerfit.fleet.executors import start_executor

        start_executor(FleetConfig(executor=Executor.RAY))
    deadline = Deadline.after(args.time_limit)  # the limit counts reading the file too
    from layerfit.cli.inputs import check_plot_target, planner_config, progress_display
    from layerfit.cli.render import render_fleet
    from layerfit.domain.fleet import Fleet, FleetConfig
    from layerfit.errors import InputError
    from layerfit.io.documents import load_file

    if rest:
        raise InputError("replan", f"unexpected arguments {rest}")
    check_plot_target(args.plot)
    commands_for = planner_config(args, time_limit_s=PER_DEPLOYMENT_SECONDS)
    fleet = load_file(Fleet, args.fleet)
    from layerfit.llamacpp.launch import check_deployment_flags

    for deployment in fleet.deployments:  # a flag the build cannot take: refused before the search
        check_deployment_flags(deployment, commands_for)
    from layerfit.fleet import plan_fleet  # after the input: a bad file answers before OR-Tools loads
    from layerfit.io.files import reading_once

    with reading_once():  # the plot reads the models again
        with progress_display(args, "replan") as shown:
            config = FleetConfig(time_limit_s=args.time_limit, executor=Executor(args.executor), progress=shown)
            result = plan_fleet(fleet, config, commands_for, deadline=deadline)
        print(result.model_dump_json(indent=2) if args.json else render_fleet(result, fleet.cluster))
        if args.plot:
            _draw(args.plot, fleet, result)
    if result.refused:  # planned around, but bad input all the same
        return EXIT_BAD_INPUT
    return exit_code(result.status) if not result.unplaced or result.placements else EXIT_NO_FIT


def _draw(path: str, fleet: Fleet, result: FleetPlan) -> None:
    """The current placement and the new one side by side; current replicas on lost GPUs, or whose
    memory is not known (a deployment without a profile, a layout of another block count), are not
    drawn."""
    from layerfit.check import reference_reasons, unified_workers
    from layerfit.cli.inputs import write_plot
    from layerfit.errors import LayerfitError
    from layerfit.memory import claims
    from layerfit.planning.profiles import resolve_profile

    profiles = {}
    for deployment in fleet.deployments:
        try:
            profiles[deployment.name] = resolve_profile(deployment)
        except LayerfitError:  # refused for bad input, reported in the plan
            continue
    unified = unified_workers(fleet.cluster)
    old, lost, unknown = [], [], []
    for placement in fleet.current:
        name, profile = f"{placement.deployment}#{placement.replica}", profiles.get(placement.deployment)
        if reference_reasons(fleet.cluster, placement.layout):
            lost.append(name)
        elif profile is None or profile.n_blocks != placement.layout.n_blocks:
            unknown.append(name)
        else:
            old.append((name, claims(profile, placement.layout, unified)))
    hidden = [f"{', '.join(lost)} on lost GPUs"] if lost else []
    hidden += [f"{', '.join(unknown)} of unknown memory"] if unknown else []
    current = "current" + (f" ({'; '.join(hidden)}, not drawn)" if hidden else "")
    new = [(f"{p.deployment}#{p.replica}", p.claims) for p in result.placements]
    write_plot(path, fleet.cluster, [(current, old), ("new plan", new)])


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``replan`` to the subcommands."""
    replan = commands.add_parser("replan", help=SUBCOMMANDS["replan"][1], epilog=EXAMPLES, formatter_class=HELP_FORMAT)
    replan.add_argument("fleet", help="fleet YAML/JSON: cluster, deployments, current placements")
    replan.add_argument(
        "--time-limit",
        type=seconds,
        default=60.0,
        help="time limit of the whole re-plan, reading the fleet file included (default 60 s)",
    )
    replan.add_argument("--executor", choices=[e.value for e in Executor], default=Executor.LOCAL.value)
    add_build_arguments(replan)
    replan.add_argument("--json", action="store_true", help="print the fleet plan as JSON")
    replan.add_argument(
        "--quiet", action="store_true", help="no progress display (it is shown only when stderr is a terminal)"
    )
    replan.add_argument("--plot", help="draw current and new placement into FILE.png, FILE.svg or FILE.html")
    replan.set_defaults(handler=cmd_replan)
