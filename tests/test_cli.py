"""The command line: exit codes, JSON output, pictures, estimate, replan, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layerfit.cli import EXIT_BAD_INPUT, EXIT_NO_FIT, EXIT_PLACED, main
from layerfit.testing.synthetic import REAL_MODELS, write_gguf

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
    assert "any one of these changes places it" in out and "--ctx-size" in out


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
    assert code == EXIT_PLACED and MemoryProfile.model_validate(json.loads(out)["profile"]).n_blocks == 32


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


def _deep_yaml(depth: int) -> str:
    return "".join("  " * level + f"k{level}:\n" for level in range(depth)) + "  " * depth + "v: 1\n"


BAD_FILES = [
    ("cluster.yaml", lambda: f"workers:\n- id: 1\n  name: a\n  total_ram_bytes: '{'9' * 400}'\n", "total_ram_bytes"),
    ("cluster.yaml", lambda: "workers: []\nname: café\n".encode("latin-1"), "not UTF-8 text: byte"),
    ("cluster.yaml", lambda: _deep_yaml(1200), "cluster.yaml: not valid YAML: .*nesting depth"),
    ("cluster.json", lambda: "[" * 100_000 + "]" * 100_000, "cluster.json: nested more than 64 levels"),
    # scalars that cannot be constructed raised ValueError with a traceback
    ("cluster.yaml", lambda: "workers: []\nx: 2020-13-45\n", "as timestamp: month must be in 1..12 .*line 2"),
    ("cluster.yaml", lambda: "workers: []\nx: !!int abc\n", "not valid YAML: invalid literal for int"),
    ("cluster.yaml", lambda: f"workers: []\nx: {'9' * 5000}\n", "as int: Exceeds the limit \\(4300 digits\\)"),
    (
        "cluster.json",
        lambda: f'{{"workers": [], "x": {"9" * 5000}}}',
        "not valid JSON: Exceeds the limit \\(4300 digits\\)",
    ),
]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    BAD_FILES,
    ids=["digits", "latin-1", "yaml-deep", "json-deep", "date", "tag", "yaml-int", "json-int"],
)
def test_bad_files_exit_two_naming_file_and_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, content: object, message: str
) -> None:
    import re

    path = tmp_path / name
    data = content()  # type: ignore[operator]
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    deployment = str(EXAMPLES / "deployment.yaml")
    code, _, err = run(capsys, "plan", "--cluster", str(path), "--deployment", deployment)
    assert code == EXIT_BAD_INPUT and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert re.search(message, err) and str(path) in err, err


@pytest.mark.parametrize("which", ["cluster", "model"])
@pytest.mark.parametrize("kind", ["a pipe", "a character device", "a folder"])
def test_only_regular_files_are_read_one_rule_for_documents_and_models(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, which: str, kind: str
) -> None:
    """Opening a FIFO without a writer blocked for ever, and a pipe or a device can be read without
    end. The GGUF reader refused only pipes and sockets (/dev/null reached its magic check, a
    folder said 'Is a directory'), the documents took only regular files: one rule now, in one place."""
    import os

    special = {"a pipe": tmp_path / "pipe", "a character device": Path(os.devnull), "a folder": tmp_path / "dir"}[kind]
    if kind == "a pipe":
        os.mkfifo(special)
    elif kind == "a folder":
        special.mkdir()
    model = write_gguf(tmp_path / "m.gguf", REAL_MODELS["llama-3.2-1b"])[0]
    cluster, gguf = (special, model) if which == "cluster" else (CLUSTER, special)
    code, _, err = run(capsys, "plan", "--cluster", str(cluster), "--model", str(gguf))
    assert code == EXIT_BAD_INPUT and f"{special}" in err and f"{kind}, not a regular file" in err, err


def test_a_run_of_a_billion_blocks_is_refused_without_allocating(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("name: m\nprofile:\n  block_weight_bytes: ['1 MiB x 1000000000']\n  block_kv_bytes: []\n")
    code, _, err = run(capsys, "plan", "--cluster", CLUSTER, "--deployment", str(path))
    assert code == EXIT_BAD_INPUT and "huge.yaml" in err and "block_weight_bytes" in err


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["estimate", "{model}", "-np", "0"], "-np: must be at least 1"),
        (["estimate", "{model}", "-ctk", "q9_9"], "-ctk: unknown cache type 'q9_9'"),
        (["plan", "--cluster", CLUSTER, "--model", "{model}", "-ub", "0"], "-ub: must be between 1"),
        (["plan", "--cluster", CLUSTER, "--model", "{model}", "-ts", "nan,1"], "-ts: shares must be finite"),
        (["plan", "--cluster", CLUSTER, "--model", "{model}", "--time-limit", "0"], "--time-limit: must be"),
        (["plan", "--cluster", CLUSTER, "--model", "{model}", "--time-limit", "-1"], "--time-limit: must be"),
        (["plan", "--cluster", CLUSTER, "--model", "{model}", "--time-limit", "nan"], "--time-limit: must be"),
        (["replan", str(EXAMPLES / "fleet.yaml"), "--time-limit", "nan"], "--time-limit: must be"),
        # the fleet's LP limit, in ms, was infinite: "input too large or malformed (OverflowError ...)"
        (["replan", str(EXAMPLES / "fleet.yaml"), "--time-limit", "1e308"], "--time-limit: must be at most"),
        (["plan", "--cluster", CLUSTER, "--model", "{model}", "--time-limit", "1e7"], "--time-limit: must be at most"),
        (["plan", "--cluster", CLUSTER, "--model", "{model}", "--plot", "/no/such/dir/p.png"], "--plot: folder"),
        (["plan", "--cluster", CLUSTER, "--model", "{model}", "--gpus", "ghost:cuda:0"], "--gpus: gpu_selection"),
        (["plan", "--cluster", CLUSTER, "--model", "{model}", "--gpus", ""], "malformed GPU id ''"),  # was ignored
        (
            ["estimate", "{model}", "-c", "2147483647", "-b", "2147483647", "-ub", "2147483647"],
            "at ctx 2147483647, ubatch",
        ),
    ],
)
def test_bad_flags_exit_two_on_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str], message: str
) -> None:
    (path,) = write_gguf(tmp_path / "llama1b.gguf", REAL_MODELS["llama-3.2-1b"])
    code, _, err = run(capsys, *(part.format(model=path) for part in command))
    assert code == EXIT_BAD_INPUT and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert message in err, err


def test_unknown_gpu_in_a_deployment_file_names_file_and_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = (EXAMPLES / "deployment.yaml").read_text() + "gpu_selection: [ghost:cuda:0]\n"
    path = tmp_path / "ghost.yaml"
    path.write_text(text)
    code, _, err = run(capsys, "plan", "--cluster", CLUSTER, "--deployment", str(path))
    assert code == EXIT_BAD_INPUT and f"{path}: gpu_selection[0]: no worker named 'ghost'" in err, err


def test_a_layout_naming_missing_gpus_exits_two_naming_them(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = (EXAMPLES / "layout.yaml").read_text()
    path = tmp_path / "layout.yaml"
    path.write_text(
        text.replace("{worker: gpu-b, gpu_index: 0", "{worker: ghost, gpu_index: 0").replace(
            "{worker: gpu-a, gpu_index: 1", "{worker: gpu-a, gpu_index: 7"
        )
    )
    deployment = str(EXAMPLES / "deployment.yaml")
    code, out, err = run(capsys, "plan", "--cluster", CLUSTER, "--deployment", deployment, "--layout", str(path))
    assert code == EXIT_BAD_INPUT and not out and "Traceback" not in err, err
    assert "layout: worker 'ghost' is not in the cluster; worker 'gpu-a' has no GPU 7" in err, err


@pytest.mark.parametrize(
    ("replicas", "copies", "message"),
    [
        (10**6, 1, "deployments.1.replicas: Input should be less than or equal to 1024"),
        (1024, 9, "fleet.deployments: 9220 replicas in all; at most 8192 are planned"),
    ],
)
def test_replica_counts_are_bounded(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, replicas: int, copies: int, message: str
) -> None:
    """A million replicas took 26 s and 1 GB past a 3 s limit; the file is refused instead."""
    import yaml

    fleet = yaml.safe_load((EXAMPLES / "fleet.yaml").read_text())
    qwen = fleet["deployments"][1]
    fleet["deployments"][1] = {**qwen, "replicas": replicas}
    fleet["deployments"] += [{**qwen, "name": f"copy{i}", "replicas": replicas} for i in range(1, copies)]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    code, _, err = run(capsys, "replan", str(path), "--time-limit", "1")
    assert code == EXIT_BAD_INPUT and message in err, err


def test_ctx_zero_is_the_training_context(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (path,) = write_gguf(tmp_path / "llama1b.gguf", REAL_MODELS["llama-3.2-1b"])
    code, out, err = run(capsys, "estimate", str(path), "-c", "0", "--json")
    assert code == EXIT_PLACED, err
    from layerfit.estimators import read_gguf

    trained_ctx = str(read_gguf(str(path)).context_length)
    code, trained, _ = run(capsys, "estimate", str(path), "-c", trained_ctx, "--json")
    assert json.loads(out)["profile"]["block_kv_bytes"] == json.loads(trained)["profile"]["block_kv_bytes"]


def test_a_closed_pipe_is_no_traceback() -> None:
    import subprocess
    import sys

    argv = [sys.executable, "-m", "layerfit.cli", "plan", "--cluster", CLUSTER, "--deployment"]
    process = subprocess.Popen(
        [*argv, str(EXAMPLES / "deployment.yaml"), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader leaves before anything is written, as `| head -1` may
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == EXIT_PLACED
    assert "BrokenPipeError" not in err and "Traceback" not in err, err


def test_yaml_is_read_with_the_c_loader() -> None:
    import yaml

    from layerfit.io.documents import yaml_loader

    assert yaml.__with_libyaml__  # the CI's PyYAML wheels carry libyaml
    assert yaml_loader() is yaml.CSafeLoader
