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
from layerfit.llamacpp.launch import CUDA_ORDER, commands
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


def _wide_worker(name: str, address: str, gpus: int, gpu_type: str = "cuda") -> Worker:
    return Worker(
        id=name,
        name=name,
        address=address,
        total_ram_bytes=1,
        allocatable_ram_bytes=1,
        gpus=tuple(Gpu(index=i, type=gpu_type, total_vram_bytes=1, allocatable_vram_bytes=1) for i in range(gpus)),
    )


def test_a_worker_past_the_backends_16_devices_gives_each_process_only_its_gpus() -> None:
    """CUDA (and HIP, MUSA, CANN) abort at start-up when they see more than 16 devices: on a
    20-GPU worker each process is told which GPUs it may see, and names them by their place there."""
    cluster = Cluster(workers=(_wide_worker("big", "10.0.0.1", 20), _wide_worker("far", "10.0.0.2", 18, "rocm")))
    layout = make_layout(
        "big",
        8,
        [
            DeviceAssignment(worker="far", gpu_index=17, blocks=2),
            DeviceAssignment(worker="big", gpu_index=18, blocks=3),
            DeviceAssignment(worker="big", gpu_index=2, blocks=3),
        ],
    )
    rpc, server = commands(cluster, layout, "m.gguf", LlamaParams())
    assert rpc.env == {"HIP_VISIBLE_DEVICES": "17"} and flag(rpc.argv, "--device") == "ROCm0"
    assert server.env == {"CUDA_VISIBLE_DEVICES": "18,2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert flag(server.argv, "--device") == "RPC0,CUDA0,CUDA1"
    assert shlex.split(server.line)[:3] == ["CUDA_VISIBLE_DEVICES=18,2", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "llama-server"]
    # no local GPU: the backend is shown none, so that its start-up does not count all 20
    (cpu,) = commands(cluster, make_layout("big", 8, []), "m.gguf", LlamaParams())
    assert cpu.env == {"CUDA_VISIBLE_DEVICES": ""} and cpu.line.startswith("CUDA_VISIBLE_DEVICES='' llama-server")


def test_a_worker_within_the_backends_devices_keeps_its_indexes() -> None:
    cluster = Cluster(workers=(_wide_worker("w", "10.0.0.1", 16),))
    layout = make_layout("w", 8, [DeviceAssignment(worker="w", gpu_index=15, blocks=8)])
    (server,) = commands(cluster, layout, "m.gguf", LlamaParams())
    assert server.env == {} and flag(server.argv, "--device") == "CUDA15" and server.line.startswith("llama-server")
    vulkan = Cluster(workers=(_wide_worker("v", "10.0.0.1", 20, "vulkan"),))  # not capped: no abort, no list
    layout = make_layout("v", 8, [DeviceAssignment(worker="v", gpu_index=19, blocks=8)])
    (server,) = commands(vulkan, layout, "m.gguf", LlamaParams())
    assert server.env == {} and flag(server.argv, "--device") == "Vulkan19"


def _mixed_worker(name: str, sizes: tuple[int, ...], names: tuple[str, ...] = ()) -> Worker:
    return Worker(
        id=name,
        name=name,
        address="10.0.0.9",
        total_ram_bytes=1,
        allocatable_ram_bytes=1,
        gpus=tuple(
            Gpu(index=i, name=names[i] if names else "", total_vram_bytes=size, allocatable_vram_bytes=size)
            for i, size in enumerate(sizes)
        ),
    )


def test_cuda_numbers_a_mixed_workers_gpus_in_pci_order() -> None:
    """CUDA numbers GPUs fastest first unless told PCI order; indexes are NVML's (PCI order), so a
    process using a CUDA GPU of a worker whose GPUs differ is given CUDA_DEVICE_ORDER=PCI_BUS_ID."""
    mixed = _mixed_worker("mixed", (24, 80))
    layout = make_layout("mixed", 8, [DeviceAssignment(worker="mixed", gpu_index=1, blocks=8)])
    (server,) = commands(Cluster(workers=(mixed,)), layout, "m.gguf", LlamaParams())
    assert server.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} and flag(server.argv, "--device") == "CUDA1"
    assert server.line.startswith("CUDA_DEVICE_ORDER=PCI_BUS_ID llama-server")
    named = _mixed_worker("named", (24, 24), ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"))
    remote = make_layout("mixed", 8, [DeviceAssignment(worker="named", gpu_index=0, blocks=8)])
    rpc, main = commands(Cluster(workers=(mixed, named)), remote, "m.gguf", LlamaParams())
    assert rpc.env == CUDA_ORDER and main.env == {}  # the main uses no local GPU: nothing to number
    same = _mixed_worker("same", (24, 24), ("NVIDIA H100", "NVIDIA H100"))
    layout = make_layout("same", 8, [DeviceAssignment(worker="same", gpu_index=1, blocks=8)])
    (server,) = commands(Cluster(workers=(same,)), layout, "m.gguf", LlamaParams())
    assert server.env == {}
