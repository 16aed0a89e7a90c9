"""The command line: exit codes, JSON output, pictures, estimate, replan, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layerfit.cli import EXIT_BAD_INPUT, EXIT_NO_FIT, EXIT_PLACED, main
from layerfit.estimators.synthetic import REAL_MODELS, write_gguf

EXAMPLES = Path(__file__).parent.parent / "examples"
CLUSTER = str(EXAMPLES / "cluster.yaml")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_prints_layout_and_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--cluster", CLUSTER, "--deployment", str(EXAMPLES / "deployment.yaml"))
    assert code == EXIT_PLACED
    assert "optimal" in out and "llama-server" in out and "-ts" in out


def test_plan_json_round_trips(capsys: pytest.CaptureFixture[str]) -> None:
    from layerfit.domain import Plan

    code, out, _ = run(
        capsys, "plan", "--cluster", CLUSTER, "--deployment", str(EXAMPLES / "deployment.yaml"), "--json"
    )
    assert code == EXIT_PLACED
    plan = Plan.model_validate_json(out)
    assert plan.best is not None and plan.best.layout.full_offload


def test_explain_exits_one_with_relaxations(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", "--cluster", CLUSTER, "--deployment", str(EXAMPLES / "too-big.yaml"))
    assert code == EXIT_NO_FIT
    assert "would fit with any one of" in out and "--ctx-size" in out


@pytest.mark.parametrize("suffix", [".png", ".svg", ".html"])
def test_plot_files_are_written(capsys: pytest.CaptureFixture[str], tmp_path: Path, suffix: str) -> None:
    target = tmp_path / f"plan{suffix}"
    code, _, err = run(
        capsys, "plan", "--cluster", CLUSTER, "--deployment", str(EXAMPLES / "deployment.yaml"), "--plot", str(target)
    )
    assert code == EXIT_PLACED and "picture written" in err
    data = target.read_bytes()
    assert len(data) > 1000
    if suffix == ".png":
        assert data.startswith(b"\x89PNG")
    elif suffix == ".svg":
        assert b"<svg" in data[:2000]
    else:
        text = data.decode()
        assert text.startswith("<!doctype html>") and "<svg" in text and "src=" not in text  # self-contained


def test_plan_from_a_gguf_with_llama_cpp_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (path,) = write_gguf(tmp_path / "llama8b.gguf", REAL_MODELS["llama-3.1-8b"])
    code, out, _ = run(capsys, "plan", "--cluster", CLUSTER, "--model", str(path), "-c", "16384", "-np", "2")
    assert code == EXIT_PLACED
    assert f"-m {path}" in out and "-c 16384" in out and "-np 2" in out


def test_estimate_table_and_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from layerfit.domain import MemoryProfile

    (path,) = write_gguf(tmp_path / "llama8b.gguf", REAL_MODELS["llama-3.1-8b"])
    code, out, _ = run(capsys, "estimate", str(path), "--ctx-size", "4096")
    assert code == EXIT_PLACED and "full offload" in out.lower()
    code, out, _ = run(capsys, "estimate", str(path), "--json")
    assert code == EXIT_PLACED and MemoryProfile.model_validate_json(out).n_blocks == 32


def test_replan_example_fleet(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "fleet.png"
    code, out, _ = run(
        capsys,
        "replan",
        str(EXAMPLES / "fleet.yaml"),
        "--time-limit",
        "5",
        "--executor",
        "serial",
        "--json",
        "--plot",
        str(target),
    )
    assert code == EXIT_PLACED
    result = json.loads(out)
    placed = {(p["deployment"], p["replica"]) for p in result["placements"]}
    assert ("mistral-7b", 0) in placed and ("qwen-30b", 0) in placed
    pinned = next(p for p in result["placements"] if (p["deployment"], p["replica"]) == ("mistral-7b", 0))
    assert not pinned["moved"]
    assert target.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan", "--cluster", "missing.yaml", "--deployment", "x.yaml"], "missing.yaml: cannot read"),
        (["plan", "--cluster", CLUSTER], "give --model MODEL.gguf or --deployment FILE"),
        (["plan", "--cluster", CLUSTER, "--model", "m.gguf", "-ngl", "abc"], "-ngl: expected an integer"),
        (["plan", "--cluster", CLUSTER, "--model", "m.gguf", "--gpus", "gpu-a:cuda"], "malformed GPU id"),
        (["estimate", "/nonexistent/model.gguf"], "/nonexistent/model.gguf"),
        (["replan", str(EXAMPLES / "cluster.yaml")], "deployments"),
    ],
)
def test_bad_input_exits_two_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == EXIT_BAD_INPUT
    assert message in err and "Traceback" not in err


def test_every_command_on_the_real_gemma_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """estimate, plan and explain on a real GGUF (gemma-3-270m Q4_K_M from PyPI), not a synthetic one."""
    from fixtures_gguf import gemma_270m_path

    model = str(gemma_270m_path())
    code, out, _ = run(capsys, "estimate", model, "--ctx-size", "8192")
    assert code == EXIT_PLACED and "gemma3" in out
    code, out, _ = run(
        capsys, "plan", "--cluster", CLUSTER, "--model", model, "-c", "8192", "--plot", str(tmp_path / "gemma.svg")
    )
    assert code == EXIT_PLACED and "single_gpu" in out and f"-m {model}" in out
    code, out, _ = run(capsys, "explain", "--cluster", CLUSTER, "--model", model, "-c", "32768")
    assert code == EXIT_PLACED and "optimal" in out
