"""Inputs the command line once took without a word: options it ignored, hosts llama.cpp cannot reach."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from layerfit.cli import EXIT_BAD_INPUT, EXIT_PLACED, main
from layerfit.domain import Cluster

EXAMPLES = Path(__file__).parent.parent / "examples"
CLUSTER = str(EXAMPLES / "cluster.yaml")
DEPLOYMENT = str(EXAMPLES / "deployment.yaml")


@pytest.mark.parametrize(
    ("option", "field"),
    [
        (["--gpus", "gpu-a:cuda:0"], "gpu_selection"),
        (["--name", "other"], "name"),
        (["--distributed"], "distributed_inference_across_workers"),
        (["--no-cpu-offloading"], "cpu_offloading"),
        (["--kind", "llm"], "kind"),
    ],
)
def test_options_of_model_are_refused_with_a_deployment_file(
    capsys: pytest.CaptureFixture[str], option: list[str], field: str
) -> None:
    """Each was silently ignored: the file's own field applied (--gpus 'a:b:c' planned on every GPU)."""
    code = main(["plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, "--quiet", *option])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and f"{option[0]}: applies to --model only" in err and field in err, err


def _cluster_with_rpc_worker(tmp_path: Path, address: str) -> str:
    """examples/cluster.yaml with gpu-a's GPUs too small to be the main worker: they serve RPC."""
    document = yaml.safe_load((EXAMPLES / "cluster.yaml").read_text())
    document["workers"][0]["address"] = address
    for gpu in document["workers"][0]["gpus"]:
        gpu["allocatable_vram_bytes"] = "12 GiB"
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


@pytest.mark.parametrize("address", ["10.0.0.11:99", "::1", "a,b", "10.0.0.11 x"])
def test_an_rpc_host_llama_cpp_would_misread_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, address: str
) -> None:
    """llama.cpp splits --rpc at commas and each endpoint at its first colon: '10.0.0.11:99:50052'
    connects to port 99, '::1:50052' to host '' (it was written into the command)."""
    cluster = _cluster_with_rpc_worker(tmp_path, address)
    code = main(["plan", "--cluster", cluster, "--deployment", DEPLOYMENT, "--quiet"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and "worker[gpu-a].address" in err and "--rpc HOST:PORT" in err, err


def test_a_host_name_serves_rpc(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["plan", "--cluster", _cluster_with_rpc_worker(tmp_path, "gpu-a.lan"), "--deployment", DEPLOYMENT])
    out = capsys.readouterr().out
    assert code == EXIT_PLACED and "--rpc gpu-a.lan:50052,gpu-a.lan:50053" in out, out


def test_a_worker_without_address_needs_a_name_llama_cpp_can_reach() -> None:
    worker = {"id": 1, "name": "gpu,a", "total_ram_bytes": 1, "allocatable_ram_bytes": 1, "gpus": []}
    named = Cluster.model_validate({"workers": [worker]})
    with pytest.raises(ValueError, match=r"worker\[gpu,a\]\.name"):
        _ = named.workers[0].host


def _cluster_with(tmp_path: Path, **fields: str) -> str:
    document = yaml.safe_load((EXAMPLES / "cluster.yaml").read_text())
    document["workers"][0].update(fields)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("a\n[gpu-b] rm -rf /", "holds the control character '\\n'"),  # printed a command line of its own
        ("a\x1b[2Jb", "holds the control character '\\x1b'"),  # cleared the terminal
        ("a\u202eb", "holds the control character"),  # reversed the text after it
        ("a:cuda:0", "cannot start a GPU id"),  # its GPUs were 'a:cuda:0:cuda:0', which --gpus cannot name
        ("gpu a", "cannot start a GPU id"),
    ],
)
def test_a_worker_name_that_would_garble_the_output_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, problem: str
) -> None:
    code = main(["plan", "--cluster", _cluster_with(tmp_path, name=name), "--deployment", DEPLOYMENT, "--quiet"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and "workers.0.name" in err and problem in err, err


def test_a_deployment_or_gpu_name_with_a_new_line_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(
        (EXAMPLES / "deployment.yaml").read_text().replace("name: llama-70b", "name: 'x\n\n[gpu-a] y'")
    )
    code = main(["plan", "--cluster", CLUSTER, "--deployment", str(deployment), "--quiet"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and "deployment.yaml: name: 'x\\n" in err, err
    document = yaml.safe_load((EXAMPLES / "cluster.yaml").read_text())
    document["workers"][0]["gpus"][0]["name"] = "RTX\n4090"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(document))
    code = main(["plan", "--cluster", str(cluster), "--deployment", DEPLOYMENT, "--quiet"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and "workers.0.gpus.0.name" in err, err


def test_a_name_with_shell_characters_is_quoted_in_the_commands(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text((EXAMPLES / "deployment.yaml").read_text().replace("name: llama-70b", "name: $(id);x"))
    code = main(["plan", "--cluster", CLUSTER, "--deployment", str(deployment), "--quiet"])
    out = capsys.readouterr().out
    assert code == EXIT_PLACED and "llama-server -m '$(id);x.gguf'" in out, out


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, "--cluster", str(EXAMPLES / "moe-cluster.yaml")],
        ["plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, "--policy", "spread", "--policy", "binpack"],
        ["replan", str(EXAMPLES / "fleet.yaml"), "--time-limit", "5", "--time-limit", "50"],
    ],
)
def test_an_option_given_twice_is_refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """argparse kept the last value without a word: the first --cluster was never read."""
    code = main([*argv, "--quiet"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and f"argument {argv[-2]}: given more than once" in err, err
