"""Command-line arguments -> domain objects, and pictures; imported by the handlers when they run."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import OffloadOrder, PlannerConfig, Policy
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.params import LlamaParams
from layerfit.errors import InputError
from layerfit.io import load_file, load_model


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
