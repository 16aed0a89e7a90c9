"""``layerfit schema``: every ``--json`` output validates against its schema; docs/schema is current."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fixtures_gguf import gemma_270m_path

from layerfit.cli import EXIT_BAD_INPUT, EXIT_NO_FIT, EXIT_PLACED, main

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "layerfit" / "examples"
CLUSTER = str(EXAMPLES / "cluster.yaml")


def printed(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(list(argv)) in (EXIT_PLACED, EXIT_NO_FIT)
    return json.loads(capsys.readouterr().out)


def validator(capsys: pytest.CaptureFixture[str], name: str) -> jsonschema.Draft202012Validator:
    schema = printed(capsys, "schema", name)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        ("plan", ("plan", "--cluster", CLUSTER, "--deployment", str(EXAMPLES / "deployment.yaml"))),
        ("plan", ("explain", "--cluster", CLUSTER, "--deployment", str(EXAMPLES / "too-big.yaml"))),
        ("fleet", ("replan", str(EXAMPLES / "fleet.yaml"), "--time-limit", "5")),
    ],
)
def test_outputs_validate_against_their_schema(
    capsys: pytest.CaptureFixture[str], name: str, argv: tuple[str, ...]
) -> None:
    check = validator(capsys, name)
    output = printed(capsys, *argv, "--json")
    assert output["schema_version"] == 1
    check.validate(output)
    broken = {**output, "schema_version": 2}
    assert not check.is_valid(broken)


def test_estimate_output_validates_and_the_schema_names_derived_figures(capsys: pytest.CaptureFixture[str]) -> None:
    check = validator(capsys, "estimate")
    output = printed(capsys, "estimate", str(gemma_270m_path()), "--json")
    check.validate(output)
    claim = check.schema["$defs"]["DeviceClaim"]
    assert "total_bytes" in claim["required"] and claim["properties"]["total_bytes"]["readOnly"]
    assert "total_vram_bytes" in check.schema["$defs"]["Claims"]["properties"]
    del output["parameters"]["ctx_size"]
    assert not check.is_valid(output)


@pytest.mark.parametrize("name", ["plan", "fleet", "estimate"])
def test_the_documented_schemas_are_current(capsys: pytest.CaptureFixture[str], name: str) -> None:
    committed = json.loads((ROOT / "docs" / "schema" / f"{name}.json").read_text(encoding="utf-8"))
    assert committed == printed(capsys, "schema", name), f"regenerate: layerfit schema {name} > docs/schema/{name}.json"


def test_an_unknown_output_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "layout"]) == EXIT_BAD_INPUT
    assert "invalid choice: 'layout'" in capsys.readouterr().err
