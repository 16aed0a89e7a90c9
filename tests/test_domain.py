"""Domain types: JSON round trips, schema export, parameter parsing, and bad input naming the field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from layerfit.domain import (
    Claims,
    Cluster,
    ComputeBuffer,
    Deployment,
    DeviceAssignment,
    GiB,
    Gpu,
    GpuRef,
    Layout,
    LlamaParams,
    MemoryProfile,
    MiB,
    Plan,
    PlannerConfig,
    Reason,
    ReasonKind,
    RoleCosts,
    Status,
    Worker,
)
from layerfit.domain.fleet import FleetConfig
from layerfit.errors import InputError
from layerfit.memory import claims, make_layout

sizes = st.integers(min_value=0, max_value=2**40)


@st.composite
def gpus(draw: st.DrawFn, index: int) -> Gpu:
    total = draw(sizes)
    return Gpu(
        index=index,
        type=draw(st.sampled_from(["cuda", "rocm", "metal"])),
        total_vram_bytes=total,
        allocatable_vram_bytes=draw(st.integers(0, total)),
    )


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    workers = []
    for i in range(draw(st.integers(0, 4))):
        total_ram = draw(sizes)
        workers.append(
            Worker(
                id=i,
                name=f"w{i}",
                labels=draw(st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=5), max_size=2)),
                unified_memory=draw(st.booleans()),
                total_ram_bytes=total_ram,
                allocatable_ram_bytes=draw(st.integers(0, total_ram)),
                gpus=tuple(draw(gpus(j)) for j in range(draw(st.integers(0, 3)))),
            )
        )
    return Cluster(workers=tuple(workers))


@st.composite
def profiles(draw: st.DrawFn) -> MemoryProfile:
    n = draw(st.integers(1, 12))
    role = st.builds(
        RoleCosts,
        fixed_bytes=sizes,
        compute=st.builds(ComputeBuffer, full_offload_bytes=sizes, partial_offload_bytes=sizes),
    )
    return MemoryProfile(
        block_weight_bytes=tuple(draw(st.lists(sizes, min_size=n, max_size=n))),
        block_kv_bytes=tuple(draw(st.lists(sizes, min_size=n, max_size=n))),
        output_weight_bytes=draw(sizes),
        token_embedding_bytes=draw(sizes),
        main=draw(role),
        local=draw(role),
        rpc=draw(role),
        unified=draw(st.none() | role),
        host_fixed_bytes=draw(sizes),
        warnings=tuple(draw(st.lists(st.text(max_size=10), max_size=2))),
    )


@st.composite
def layouts(draw: st.DrawFn) -> tuple[MemoryProfile, Layout]:
    profile = draw(profiles())
    n_devices = draw(st.integers(0, 4))
    remaining = profile.n_blocks
    devices = []
    for i in range(n_devices):
        blocks = draw(st.integers(1 if i < n_devices - 1 else 0, max(1, remaining)))
        if blocks > remaining:
            break
        remaining -= blocks
        worker = "main" if i >= n_devices // 2 else f"rpc{i}"
        devices.append(DeviceAssignment(worker=worker, gpu_index=i, blocks=blocks))
    if devices and devices[-1].blocks == 0 and len(devices) > 1 and devices[-2].blocks == 0:
        devices.pop()
    return profile, make_layout("main", profile.n_blocks, devices)


def round_trip(value: BaseModel) -> None:
    again = type(value).model_validate_json(value.model_dump_json())
    assert again == value


@given(clusters())
def test_cluster_json_round_trip(cluster: Cluster) -> None:
    round_trip(cluster)


@given(profiles())
def test_profile_json_round_trip(profile: MemoryProfile) -> None:
    round_trip(profile)


@given(layouts())
def test_layout_and_claims_json_round_trip(case: tuple[MemoryProfile, Layout]) -> None:
    profile, layout = case
    round_trip(layout)
    round_trip(claims(profile, layout))


@given(st.builds(PlannerConfig, time_limit_s=st.floats(0.1, 100)))
def test_config_json_round_trip(config: PlannerConfig) -> None:
    round_trip(config)


@given(
    st.builds(
        LlamaParams,
        ctx_size=st.none() | st.integers(1, 10**6),
        n_gpu_layers=st.none() | st.integers(0, 999),
        tensor_split=st.none() | st.lists(st.floats(0.5, 100), min_size=1, max_size=4).map(tuple),
        cache_type_k=st.sampled_from(["f16", "q8_0", "q4_0"]),
        flash_attn=st.sampled_from(["on", "off", "auto"]),
        mmap=st.booleans(),
    )
)
def test_params_round_trip(params: LlamaParams) -> None:
    round_trip(params)


@given(profiles(), st.sampled_from(list(Status)))
def test_deployment_and_plan_round_trip(profile: MemoryProfile, status: Status) -> None:
    deployment = Deployment(name="m", profile=profile, gpu_selection=("w1:cuda:0", "w2:cuda:1"))
    round_trip(deployment)
    reason = Reason(kind=ReasonKind.INSUFFICIENT_VRAM, message="short", needed_bytes=5, available_bytes=3)
    round_trip(Plan(deployment="m", status=status, reasons=(reason,), messages=("short",)))


def test_json_schema_export() -> None:
    for model in (Cluster, Deployment, MemoryProfile, Layout, Claims, Plan, PlannerConfig):
        schema = model.model_json_schema()
        assert schema["type"] == "object" and schema["properties"], model


def test_sizes_accept_units() -> None:
    gpu = Gpu(index=0, total_vram_bytes="24 GiB", allocatable_vram_bytes="512MiB")
    assert (gpu.total_vram_bytes, gpu.allocatable_vram_bytes) == (24 * GiB, 512 * MiB)


@pytest.mark.parametrize("text", ["\uff12\uff14 GiB", "\u0662\u0664 GiB", "24\u00a0GiB"])
def test_sizes_are_ascii(text: str) -> None:
    """Full-width and Arabic-Indic digits were read as 24 GiB."""
    with pytest.raises(ValueError, match="not a size"):
        Gpu(index=0, total_vram_bytes=text, allocatable_vram_bytes=0)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--ctx-size 4096"], {"ctx_size": 4096}),
        (["-c=4096"], {"ctx_size": 4096}),
        (["--ctx-size", "4096"], {"ctx_size": 4096}),
        (["-ngl 20"], {"n_gpu_layers": 20}),
        (["--n-gpu-layers=20"], {"n_gpu_layers": 20}),
        (["--gpu-layers", "0"], {"n_gpu_layers": 0}),
        (["-ts 3,1"], {"tensor_split": (3.0, 1.0)}),
        (["--tensor-split=1,1,0"], {"tensor_split": (1.0, 1.0, 0.0)}),
        (["-np 4"], {"parallel": 4}),
        (["--cache-type-k q8_0", "--cache-type-v=q8_0"], {"cache_type_k": "q8_0", "cache_type_v": "q8_0"}),
        (["--flash-attn"], {"flash_attn": "on"}),
        (["--flash-attn", "-c", "2048"], {"flash_attn": "on", "ctx_size": 2048}),
        (["-fa off"], {"flash_attn": "off"}),
        (["-fa", "-1", "-c", "2048"], {"flash_attn": "auto", "ctx_size": 2048}),
        (["--no-mmap"], {"mmap": False}),
        (["--ubatch-size 2048"], {"ubatch_size": 2048}),
        (["--mmproj /m/proj.gguf"], {"mmproj": "/m/proj.gguf"}),
        (["--threads 8", "--jinja"], {"extra": ("--threads", "8", "--jinja")}),
    ],
)
def test_backend_parameters_parse(args: list[str], expected: dict[str, object]) -> None:
    params = LlamaParams.from_args(args)
    for field, value in expected.items():
        assert getattr(params, field) == value


def test_default_ctx_is_gpustacks() -> None:
    assert LlamaParams().effective_ctx_size == 8192


def test_gpu_ref_parse_and_print() -> None:
    ref = GpuRef.parse("host-1:cuda:3")
    assert (ref.worker, ref.type, ref.index, str(ref)) == ("host-1", "cuda", 3, "host-1:cuda:3")


def _worker(name: str, *gpu_list: Gpu, ram: int = 64 * GiB) -> Worker:
    return Worker(id=name, name=name, total_ram_bytes=ram, allocatable_ram_bytes=ram, gpus=gpu_list)


def _gpu(index: int, total: int = 24 * GiB, allocatable: int = 20 * GiB) -> Gpu:
    return Gpu(index=index, total_vram_bytes=total, allocatable_vram_bytes=allocatable)


BAD_INPUT = [
    ("duplicate GPU index", lambda: _worker("w", _gpu(0), _gpu(0)), "duplicate GPU index 0"),
    ("negative VRAM", lambda: _gpu(0, total=-1), "total_vram_bytes"),
    ("allocatable above total", lambda: _gpu(0, total=GiB, allocatable=2 * GiB), "allocatable_vram_bytes"),
    ("malformed GPU id", lambda: GpuRef.parse("worker:cuda:x"), "malformed GPU id 'worker:cuda:x'"),
    ("ngl not a number", lambda: LlamaParams.from_args(["-ngl abc"]), "-ngl: expected an integer"),
    ("flash attention's value", lambda: LlamaParams.from_args(["-fa maybe"]), "-fa: expected on, off or auto"),
    ("empty tensor split entry", lambda: LlamaParams.from_args(["-ts 1,,2"]), "-ts: empty entry"),
    ("duplicate worker name", lambda: Cluster(workers=(_worker("a"), _worker("a"))), "duplicate worker id"),
    ("reserved flag", lambda: LlamaParams.from_args(["--rpc", "h:1"]), "--rpc: cannot be set"),
    ("flag twice", lambda: LlamaParams.from_args(["-c 1", "--ctx-size 2"]), "--ctx-size: given more than once"),
    ("missing value", lambda: LlamaParams.from_args(["-c"]), "-c: missing value"),
    ("unknown cache type", lambda: LlamaParams(cache_type_k="q3"), "cache_type_k: unknown cache type"),
    ("all-zero split", lambda: LlamaParams.from_args(["-ts 0,0"]), "all shares are zero"),
    ("profile lengths differ", lambda: MemoryProfile(block_weight_bytes=(1, 2), block_kv_bytes=(1,)), "block_kv_bytes"),
    ("no model source", lambda: Deployment(name="m"), "exactly one of gguf_path or profile"),
    (
        "a size written as a boolean",
        lambda: _gpu(0, total=True),
        "total_vram_bytes\n  Value error, expected a number, got true",
    ),
    (
        "a count written as a boolean",
        lambda: Deployment(name="m", gguf_path="m", replicas=True),
        "expected a number, got true",
    ),
    (
        "a worker id written as a boolean (read as 1, another worker's id perhaps)",
        lambda: Worker(id=True, name="w", total_ram_bytes=1, allocatable_ram_bytes=1),
        "id\n  Value error, expected a number or a string, got true",
    ),
    ("GPU index beyond any device", lambda: _gpu(2**63), "index\n  Input should be less than or equal to 1023"),
    ("GPU id of 5,000 digits", lambda: GpuRef.parse("w:cuda:" + "9" * 5000), "malformed GPU id 'w:cuda:9999"),
    ("CP-SAT seed beyond 32 bits", lambda: PlannerConfig(seed=2**40), "seed\n  Input should be less than or equal to"),
    ("a million CP-SAT workers", lambda: PlannerConfig(num_search_workers=10**6), "num_search_workers\n  Input should"),
    ("rpc ports past 65535", lambda: PlannerConfig(rpc_port_base=65530), "port 65537 > 65535"),
    ("more rpc-servers than devices", lambda: PlannerConfig(max_rpc_servers=16), "max_rpc_servers\n  Input should"),
    (
        "infinite time limit",
        lambda: PlannerConfig(time_limit_s=float("inf")),
        "time_limit_s\n  Input should be a finite",
    ),
    ("a time limit of 1e308 s", lambda: PlannerConfig(time_limit_s=1e308), "time_limit_s\n  Input should be less"),
    ("a fleet's limit of 1e308 s", lambda: FleetConfig(time_limit_s=1e308), "time_limit_s\n  Input should be less"),
    ("a million processes", lambda: FleetConfig(processes=10**6), "processes\n  Input should be less than or equal"),
    (
        "huge ctx_max",
        lambda: Deployment(name="m", gguf_path="m.gguf", ctx_max=2**31),
        "ctx_max\n  Input should be less",
    ),
    (
        "huge ctx_min",
        lambda: Deployment(name="m", gguf_path="m.gguf", ctx_min=10**30),
        "ctx_min\n  Input should be less",
    ),
]


@pytest.mark.parametrize(("label", "make", "message"), BAD_INPUT, ids=[row[0] for row in BAD_INPUT])
def test_bad_input_names_the_field(label: str, make: object, message: str) -> None:
    with pytest.raises((InputError, ValidationError), match=message):
        make()  # type: ignore[operator]


def test_unknown_worker_in_selection() -> None:
    cluster = Cluster(workers=(_worker("a", _gpu(0)),))
    with pytest.raises(InputError, match="no worker named 'ghost'"):
        cluster.gpu(GpuRef.parse("ghost:cuda:0"))
    with pytest.raises(InputError, match="a:cuda:5 does not exist"):
        cluster.gpu(GpuRef.parse("a:cuda:5"))


def test_copies_do_not_keep_stale_lookups() -> None:
    cluster = Cluster(workers=(_worker("a", _gpu(0)),))
    assert cluster.worker("a").gpus[0].allocatable_vram_bytes == 20 * GiB  # fills the cached index
    bigger = _worker("a", _gpu(0, total=40 * GiB, allocatable=30 * GiB))
    copy = cluster.model_copy(update={"workers": (bigger,)})
    assert copy.worker("a").gpus[0].allocatable_vram_bytes == 30 * GiB
