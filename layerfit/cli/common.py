"""Exit codes and input helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import OffloadOrder, PlannerConfig, Policy
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.params import LlamaParams
from layerfit.domain.plan import Status
from layerfit.errors import InputError
from layerfit.io import load_file, load_model

EXIT_PLACED = 0
EXIT_NO_FIT = 1
EXIT_BAD_INPUT = 2

HELP_FORMAT = argparse.RawDescriptionHelpFormatter

EXAMPLES = """\
examples:
  layerfit plan --cluster examples/cluster.yaml --deployment examples/deployment.yaml
  layerfit plan --cluster examples/cluster.yaml --model model.gguf --ctx-size 32768 -ngl 99 --distributed
  layerfit plan --cluster examples/cluster.yaml --deployment examples/deployment.yaml --plot plan.png
  layerfit explain --cluster examples/cluster.yaml --deployment examples/too-big.yaml
  layerfit estimate model.gguf --ctx-size 16384 --cache-type-k q8_0 --flash-attn on
  layerfit replan examples/fleet.yaml --json

exit codes: 0 placed, 1 nothing fits, 2 bad input
"""


def exit_code(status: Status) -> int:
    return EXIT_PLACED if status in (Status.OPTIMAL, Status.FEASIBLE) else EXIT_NO_FIT


def planner_config(args: argparse.Namespace) -> PlannerConfig:
    return PlannerConfig(
        policy=Policy(args.policy), time_limit_s=args.time_limit, offload_order=OffloadOrder(args.offload_order)
    )


def deployment_from_args(args: argparse.Namespace, backend_parameters: list[str]) -> Deployment:
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


def write_plot(path: str | None, cluster: Cluster, panels: list[tuple[str, list[tuple[str, Any]]]]) -> None:
    if path is not None:
        from layerfit.plot import render

        written = render(cluster, panels, path)
        print(f"picture written to {written}", file=sys.stderr)
