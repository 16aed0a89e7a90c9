"""``layerfit schema plan|fleet|estimate``: the JSON Schema of what ``--json`` prints."""

from __future__ import annotations

import argparse
from typing import Any

from layerfit.cli.common import EXIT_PLACED, HELP_FORMAT, SUBCOMMANDS

OUTPUTS = {
    "plan": "what `layerfit plan --json` and `layerfit explain --json` print",
    "fleet": "what `layerfit replan --json` prints",
    "estimate": "what `layerfit estimate --json` prints",
}


def output_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12, as pydantic writes it) of one output, derived figures included."""
    from pydantic import BaseModel

    from layerfit.domain.base import SCHEMA_VERSION
    from layerfit.domain.fleet import FleetPlan
    from layerfit.domain.plan import Plan
    from layerfit.estimators.report import Estimate

    models: dict[str, type[BaseModel]] = {"plan": Plan, "fleet": FleetPlan, "estimate": Estimate}
    schema = models[name].model_json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": f"layerfit {name} output, schema_version {SCHEMA_VERSION}: {OUTPUTS[name]}",
        **schema,
    }


def cmd_schema(args: argparse.Namespace, rest: list[str]) -> int:
    from layerfit.errors import InputError

    if rest:
        raise InputError("schema", f"unexpected arguments {rest}")
    import json

    print(json.dumps(output_schema(args.output), indent=2, sort_keys=False))
    return EXIT_PLACED


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``schema`` to the subcommands."""
    schema = commands.add_parser(
        "schema",
        help=SUBCOMMANDS["schema"][1],
        description="The JSON Schema of what --json prints; every output carries its schema_version.",
        formatter_class=HELP_FORMAT,
        allow_abbrev=False,
    )
    schema.add_argument("output", choices=list(OUTPUTS), help="; ".join(f"{k}: {v}" for k, v in OUTPUTS.items()))
    schema.set_defaults(handler=cmd_schema)
