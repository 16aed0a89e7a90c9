"""MoE in the memory model: experts of GPU-resident blocks kept in host RAM, worked out by hand."""

from __future__ import annotations

import pytest

from layerfit.check import expert_reasons, rule_reasons
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    DeviceAssignment,
    Layout,
    MemoryProfile,
    PlannerConfig,
    RoleCosts,
)
from layerfit.domain.plan import ReasonKind
from layerfit.errors import InputError
from layerfit.memory import claims, is_partial, make_layout

# 4 blocks: block 0 dense (weights 100, no experts), blocks 1-3 MoE (weights 400, experts 300; on the
# host the experts cost 280 each, a repacked size). KV 10 per block; output 50; embedding 40.
# GPU: fixed 1000, compute 200 full / 300 partial. Host: fixed 7, compute 20 full / 30 partial.
ROLE = RoleCosts(fixed_bytes=1000, compute=ComputeBuffer(full_offload_bytes=200, partial_offload_bytes=300))
MOE = MemoryProfile(
    block_weight_bytes=(100, 400, 400, 400),
    block_kv_bytes=(10, 10, 10, 10),
    block_expert_bytes=(0, 300, 300, 300),
    block_host_expert_bytes=(0, 280, 280, 280),
    output_weight_bytes=50,
    token_embedding_bytes=40,
    main=ROLE,
    local=ROLE,
    rpc=ROLE,
    host_fixed_bytes=7,
    host_compute=ComputeBuffer(full_offload_bytes=20, partial_offload_bytes=30),
)
DENSE = MOE.model_copy(update={"block_expert_bytes": None, "block_host_expert_bytes": None})


def one_gpu(host_experts: tuple[int, ...] = (), blocks: int = 4) -> Layout:
    layout = make_layout("a", 4, [DeviceAssignment(worker="a", gpu_index=0, blocks=blocks)])
    return Layout.model_validate(layout.model_dump() | {"host_expert_blocks": host_experts})


def test_full_offload_without_host_experts_is_the_dense_arithmetic() -> None:
    # 1300 weights + 40 KV + 50 output + 1000 fixed + 200 full compute = 2590; host 7 + 40 + 20 = 67
    needed = claims(MOE, one_gpu())
    assert needed.devices[0].total_bytes == 2590
    assert needed.workers[0].ram_bytes == 67
    assert needed == claims(DENSE, one_gpu())


def test_experts_of_gpu_blocks_on_the_host() -> None:
    # experts of blocks 2 and 3 on the host: the GPU drops 2 x 300 weights and pays the partial compute
    #   (tensor overrides, no pipeline parallelism): 700 + 40 + 50 + 1000 + 300 = 2090.
    # host: 7 + 40 + 30 (partial compute) + 2 x 280 (host size of the experts) = 637.
    layout = one_gpu((2, 3))
    assert is_partial(layout)
    needed = claims(MOE, layout)
    assert needed.devices[0].weight_bytes == 700
    assert needed.devices[0].total_bytes == 2090
    assert needed.workers[0].expert_bytes == 560
    assert needed.workers[0].ram_bytes == 637


def test_experts_on_host_with_blocks_on_host() -> None:
    # block 0 on the host (100 + 10 KV), blocks 1-3 on the GPU with block 1's experts on the host:
    #   GPU 1200 - 300 + 30 KV + 50 + 1000 + 300 = 2280; host 7 + 40 + 30 + 110 + 280 = 467
    layout = one_gpu((1,), blocks=3)
    assert layout.experts_on_host == (0, 1)
    needed = claims(MOE, layout)
    assert needed.devices[0].total_bytes == 2280
    assert needed.workers[0].ram_bytes == 467


def test_two_devices_each_lose_their_own_blocks_experts() -> None:
    # GPU0 blocks 0-1 (experts of 1 on the host): 500 - 300 + 20 + 1000 + 300 = 1520
    # GPU1 blocks 2-3 (experts of 3 on the host): 800 - 300 + 20 + 50 + 1000 + 300 = 1870
    devices = [DeviceAssignment(worker="a", gpu_index=0, blocks=2), DeviceAssignment(worker="a", gpu_index=1, blocks=2)]
    layout = Layout.model_validate(make_layout("a", 4, devices).model_dump() | {"host_expert_blocks": (1, 3)})
    needed = claims(MOE, layout)
    assert [device.total_bytes for device in needed.devices] == [1520, 1870]
    assert needed.workers[0].expert_bytes == 560


def test_profile_round_trips_through_json() -> None:
    assert MemoryProfile.model_validate_json(MOE.model_dump_json()) == MOE
    assert MemoryProfile.model_validate_json(DENSE.model_dump_json()) == DENSE
    assert not DENSE.is_moe and MOE.expert_blocks == (1, 2, 3)


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"block_expert_bytes": (0, 500, 0, 0)}, "block_expert_bytes[1]"),
        ({"block_expert_bytes": (0, 1)}, "block_expert_bytes"),
        ({"block_expert_bytes": None}, "block_host_expert_bytes"),
        ({"block_host_weight_bytes": (100, 400, 250, 400)}, "block_host_expert_bytes[2]"),
        ({"fixed_host_experts": (0,)}, "fixed_host_experts"),
        ({"fixed_host_experts": (2, 1)}, "fixed_host_experts"),
    ],
)
def test_bad_expert_fields_name_the_field(update: dict[str, object], field: str) -> None:
    data = MOE.model_dump() | update
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        MemoryProfile.model_validate(data)


@pytest.mark.parametrize("host_experts", [(0,), (3, 2), (2, 2), (4,)])
def test_layout_refuses_host_experts_off_the_gpus_or_unordered(host_experts: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="host_expert_blocks"):
        one_gpu(host_experts, blocks=3)


def test_claims_refuse_host_experts_of_a_dense_model() -> None:
    with pytest.raises(InputError, match="no expert tensors"):
        claims(DENSE, one_gpu((2,)))


GPUS = [{"index": i, "total_vram_bytes": 10_000, "allocatable_vram_bytes": 10_000} for i in (0, 1)]
WORKER = {"id": 1, "name": "a", "total_ram_bytes": 10_000, "allocatable_ram_bytes": 10_000, "gpus": GPUS}
CLUSTER = Cluster.model_validate({"workers": [WORKER]})


def test_check_names_dense_blocks_and_overrides_not_honoured() -> None:
    assert expert_reasons(MOE, one_gpu((1, 2))) == ()
    assert [r.kind for r in expert_reasons(MOE, one_gpu((0,), blocks=4))] == [ReasonKind.EXPERTS_NOT_HONOURED]
    fixed = MOE.model_copy(update={"fixed_host_experts": (1, 2)})
    assert expert_reasons(fixed, one_gpu((1, 2))) == ()
    # blocks 0-1 on the host keep their experts there anyway: only block 2 is left to say
    assert expert_reasons(fixed, one_gpu((2,), blocks=2)) == ()
    (reason,) = expert_reasons(fixed, one_gpu((2, 3)))
    assert reason.kind is ReasonKind.EXPERTS_NOT_HONOURED and "[1, 2]" in reason.message


def test_check_refuses_host_experts_when_cpu_offloading_is_off() -> None:
    deployment = Deployment(name="m", profile=MOE, cpu_offloading=False)
    kinds = [r.kind for r in rule_reasons(CLUSTER, deployment, MOE, one_gpu((3,)), PlannerConfig())]
    assert kinds == [ReasonKind.CPU_OFFLOAD_NOT_ALLOWED]
    assert rule_reasons(CLUSTER, deployment, MOE, one_gpu(), PlannerConfig()) == ()
