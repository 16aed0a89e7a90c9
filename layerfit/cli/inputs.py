"""Command-line arguments -> domain objects, and pictures; imported by the handlers when they run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import Objective, OffloadOrder, PlannerConfig, Policy
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.layout import Claims
from layerfit.domain.params import LlamaParams
from layerfit.domain.plan import Plan
from layerfit.errors import InputError
from layerfit.io.documents import load_file, load_model
from layerfit.io.sources import file_name


def planner_config(args: argparse.Namespace, **settings: Any) -> PlannerConfig:
    """The planner settings of the command line (``--policy``, ``--time-limit`` where the command has
    them, ``--offload-order``, ``--llama-cpp-build``); ``settings`` fill in the rest."""
    data = {
        **settings,
        "offload_order": OffloadOrder(args.offload_order) if args.offload_order else None,
        "llama_cpp_build": args.llama_cpp_build,
    }
    if "policy" in args:
        data |= {"policy": Policy(args.policy), "time_limit_s": args.time_limit}
    if getattr(args, "objective", None) is not None:
        data["objective"] = Objective(args.objective)
    return load_model(PlannerConfig, data, "command line")


def check_objective(args: argparse.Namespace, deployment: Deployment) -> None:
    """``--objective`` and a deployment file's ``objective`` must not contradict each other."""
    given = getattr(args, "objective", None)
    if given is not None and deployment.objective is not None and deployment.objective.value != given:
        raise InputError("--objective", f"{given} contradicts the deployment's objective: {deployment.objective.value}")


_MODEL_OPTIONS = (
    ("name", "--name", "name"),
    ("no_cpu_offloading", "--no-cpu-offloading", "cpu_offloading"),
    ("distributed", "--distributed", "distributed_inference_across_workers"),
    ("gpus", "--gpus", "gpu_selection"),
    ("kind", "--kind", "kind"),
    ("min_decode_tokens_per_s", "--min-decode-tokens-per-s", "min_decode_tokens_per_s"),
)
"""Options that describe the deployment given by ``--model`` (attribute, option, deployment field)."""


def _given(value: object) -> bool:
    """An option was given: set, and not a switch left off (a number 0 is given)."""
    return value is not None and value is not False and value != ""


def deployment_from_args(args: argparse.Namespace, backend_parameters: list[str]) -> Deployment:
    if args.deployment is not None:
        if args.model is not None or backend_parameters:
            raise InputError("--deployment", "give either a deployment file or --model with llama.cpp parameters")
        given = next(
            ((option, field) for name, option, field in _MODEL_OPTIONS if _given(getattr(args, name, None))), None
        )
        if given is not None:  # it was ignored: the file's own field applied
            option, field = given
            raise InputError(option, f"applies to --model only; with --deployment, set {field} in the file")
        return load_file(Deployment, args.deployment)
    if args.model is None:
        raise InputError("--model", "give --model MODEL.gguf or --deployment FILE")
    data: dict[str, Any] = {
        "name": args.name or file_name(args.model).removesuffix(".gguf"),
        "gguf_path": args.model,
        "params": LlamaParams.from_args(backend_parameters),
        "cpu_offloading": not args.no_cpu_offloading,
        "distributed_inference_across_workers": args.distributed,
        "kind": ModelKind(args.kind or ModelKind.LLM.value),
    }
    if getattr(args, "min_decode_tokens_per_s", None) is not None:
        data["min_decode_tokens_per_s"] = args.min_decode_tokens_per_s
    if args.gpus is not None:
        data["gpu_selection"] = args.gpus.split(",")
    return load_model(Deployment, data, "command line")


def check_selection(cluster: Cluster, deployment: Deployment, source: str) -> None:
    """Every GPU of a manual selection exists in the cluster; the error names the file (or ``--gpus``) and entry."""
    for position, ref in enumerate(deployment.gpu_selection or ()):
        try:
            cluster.gpu(ref)
        except InputError as exc:
            raise InputError(f"{source}: gpu_selection[{position}]", exc.problem) from None


def check_plot_target(path: str | None) -> None:
    """A picture can be written there: its folder exists, its format is known, matplotlib is
    installed (checked before planning, not after)."""
    if path is None:
        return
    folder = Path(path).parent
    if not folder.is_dir():
        raise InputError("--plot", f"folder {str(folder)!r} does not exist")
    from layerfit.io.plot import check_target

    check_target(path)


def write_plot(path: str | None, cluster: Cluster, panels: list[tuple[str, list[tuple[str, Any]]]]) -> None:
    if path is not None:
        from layerfit.io.plot import render

        try:
            written = render(cluster, panels, path)
        except OSError as exc:
            raise InputError("--plot", f"cannot write {path}: {exc.strerror or exc}") from None
        print(f"picture written to {written}", file=sys.stderr)


def plan_panel(cluster: Cluster, deployment: Deployment, plan: Plan) -> tuple[str, list[tuple[str, Claims]]]:
    """The picture of a plan: its best layout; when nothing fits, the closest full offload (the
    layout of the free-memory relaxation), so that the picture shows what is short and where."""
    title = f"{plan.deployment}: {plan.status.value}"
    if plan.best is not None:
        return title, [(plan.deployment, plan.best.claims)]
    closest = next((r.layout for r in plan.relaxations if r.layout is not None), None)
    if closest is None:
        return title, []
    from layerfit.check import unified_workers
    from layerfit.memory import claims
    from layerfit.planning.profiles import resolve_profile

    gpus = ", ".join(cluster.gpu_id(d.worker, d.gpu_index) for d in closest.devices)
    needed = claims(resolve_profile(deployment), closest, unified_workers(cluster))
    return f"{title}; closest: full offload on {gpus}", [(plan.deployment, needed)]


@contextmanager
def progress_display(args: argparse.Namespace, title: str) -> Iterator[bool]:
    """A live progress display on standard error while the block runs, only when that is a terminal
    and neither ``--json`` nor ``--quiet`` was given; otherwise every report is dropped. Yields
    whether the display is on."""
    from layerfit.budget.progress import LiveReporter, reporting, stderr_is_terminal

    if args.json or args.quiet or not stderr_is_terminal():
        with reporting(None):
            yield False
        return
    with LiveReporter(title=title) as live, reporting(live):
        yield True
