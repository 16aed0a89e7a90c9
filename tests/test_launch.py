"""llama.cpp command lines from a layout."""

from __future__ import annotations

import shlex

import pytest
from pydantic import ValidationError

from layerfit.domain import (
    Cluster,
    DeviceAssignment,
    Gpu,
    Layout,
    LlamaParams,
    ModelKind,
    OffloadOrder,
    PlannerConfig,
    Worker,
)
from layerfit.launch import commands
from layerfit.memory import layout_from_flags, make_layout

CLUSTER = Cluster(
    workers=(
        Worker(
            id=1,
            name="main",
            address="10.0.0.1",
            total_ram_bytes=1,
            allocatable_ram_bytes=1,
            gpus=(
                Gpu(index=0, total_vram_bytes=1, allocatable_vram_bytes=1),
                Gpu(index=1, type="rocm", total_vram_bytes=1, allocatable_vram_bytes=1),
            ),
        ),
        Worker(
            id=2,
            name="r",
            address="10.0.0.2",
            total_ram_bytes=1,
            allocatable_ram_bytes=1,
            gpus=(
                Gpu(index=0, total_vram_bytes=1, allocatable_vram_bytes=1),
                Gpu(index=3, total_vram_bytes=1, allocatable_vram_bytes=1),
            ),
        ),
    )
)


def flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_distributed_commands_reproduce_the_layout() -> None:
    layout = make_layout(
        "main",
        40,
        [
            DeviceAssignment(worker="r", gpu_index=3, blocks=10),
            DeviceAssignment(worker="r", gpu_index=0, blocks=5),
            DeviceAssignment(worker="main", gpu_index=1, blocks=25),
        ],
    )
    rpc_a, rpc_b, server = commands(CLUSTER, layout, "/models/m.gguf", LlamaParams(ctx_size=4096))
    assert (rpc_a.worker, rpc_a.argv) == ("r", ("--host", "10.0.0.2", "--port", "50052", "--device", "CUDA3"))
    assert flag(rpc_b.argv, "--port") == "50053"
    argv = server.argv
    assert server.worker == "main" and flag(argv, "-m") == "/models/m.gguf" and flag(argv, "-c") == "4096"
    assert flag(argv, "--rpc") == "10.0.0.2:50052,10.0.0.2:50053"
    assert flag(argv, "--device") == "RPC0,RPC1,ROCm1"
    assert flag(argv, "--fit") == "off"
    # The emitted -ngl/-ts, read back with llama.cpp's rule, give the same layout.
    ngl, split = int(flag(argv, "-ngl")), [float(x) for x in flag(argv, "-ts").split(",")]
    gpus = [(d.worker, d.gpu_index) for d in layout.devices]
    assert layout_from_flags("main", gpus, 40, ngl, split, OffloadOrder.OUTPUT_FIRST) == layout
    assert shlex.split(server.line)[0] == "llama-server"


def test_cpu_only_uses_no_device() -> None:
    (server,) = commands(CLUSTER, make_layout("main", 40, []), "m.gguf", LlamaParams(), PlannerConfig())
    assert flag(server.argv, "-ngl") == "0" and flag(server.argv, "--device") == "none"
    assert "--rpc" not in server.argv and "-ts" not in server.argv


def test_user_flags_pass_through() -> None:
    params = LlamaParams.from_args(["-np 4", "--no-mmap", "--threads 8", "-ctk q8_0"])
    (server,) = commands(
        CLUSTER, make_layout("main", 4, [DeviceAssignment(worker="main", gpu_index=0, blocks=4)]), "m.gguf", params
    )
    line = server.line
    # llama-server 11434 has no --no-mmap: the legacy flag is printed as its -lm form
    assert "-np 4" in line and "-lm none" in line and "--threads 8" in line and "-ctk q8_0" in line
    assert "--no-mmap" not in line


def _rpc_layout() -> Layout:
    remote = DeviceAssignment(worker="r", gpu_index=3, blocks=2)
    return make_layout("main", 4, [remote, DeviceAssignment(worker="main", gpu_index=0, blocks=2)])


def _with_remote(**fields: str) -> Cluster:
    remote = CLUSTER.worker("r").model_dump() | fields
    return Cluster(workers=(CLUSTER.worker("main"), Worker.model_validate(remote)))


def test_rpc_server_binds_the_workers_own_address_never_every_interface() -> None:
    rpc, _ = commands(_with_remote(rpc_host="192.168.7.2"), _rpc_layout(), "m.gguf", LlamaParams())
    assert flag(rpc.argv, "--host") == "192.168.7.2"
    rpc, server = commands(CLUSTER, _rpc_layout(), "m.gguf", LlamaParams())
    assert flag(rpc.argv, "--host") == "10.0.0.2" and flag(server.argv, "--rpc") == "10.0.0.2:50052"
    assert "0.0.0.0" not in rpc.line


def test_rpc_server_without_an_ipv4_address_never_listens_everywhere() -> None:
    rpc, _ = commands(_with_remote(address="gpu-r.example"), _rpc_layout(), "m.gguf", LlamaParams())
    assert flag(rpc.argv, "--host") == "<IPv4-of-r>"  # a placeholder rpc-server rejects: it fails closed
    with pytest.raises(ValidationError, match=r"0\.0\.0\.0 listens on every interface"):
        _with_remote(rpc_host="0.0.0.0")
    with pytest.raises(ValidationError, match="not an IPv4 address"):
        _with_remote(rpc_host="gpu-r.example")


@pytest.mark.parametrize(
    ("kind", "args", "switch"),
    [
        ("embedding", [], "--embedding"),
        ("embedding", ["--pooling", "mean"], "--embedding"),
        ("reranker", [], "--rerank"),
        ("reranker", ["--embedding", "--pooling", "rank"], "--rerank"),
        ("llm", [], None),
        ("image", [], None),
    ],
)
def test_server_is_started_as_the_kind_it_is_planned_for(kind: str, args: list[str], switch: str | None) -> None:
    layout = make_layout("main", 4, [DeviceAssignment(worker="main", gpu_index=0, blocks=4)])
    params = LlamaParams.from_args(args)
    (server,) = commands(CLUSTER, layout, "m.gguf", params, kind=ModelKind(kind))
    switches = [arg for arg in server.argv if arg in ("--embedding", "--embeddings", "--rerank", "--reranking")]
    expected = [arg for arg in args if arg == "--embedding"] + ([switch] if switch else [])
    assert sorted(switches) == sorted(expected)


@pytest.mark.parametrize("own", ["--embeddings", "--rerank"])
def test_the_deployments_own_switch_is_not_repeated(own: str) -> None:
    layout = make_layout("main", 4, [])
    kind = ModelKind.RERANKER if own == "--rerank" else ModelKind.EMBEDDING
    (server,) = commands(CLUSTER, layout, "m.gguf", LlamaParams.from_args([own]), kind=kind)
    assert [arg for arg in server.argv if arg.startswith(("--embedding", "--rerank"))] == [own]
