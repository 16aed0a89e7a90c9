"""The memory model: claims() rows worked out by hand, and llama.cpp's -ngl/-ts rules both ways."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layerfit.domain import ComputeBuffer, DeviceAssignment, DeviceRole, Layout, MemoryProfile, OffloadOrder, RoleCosts
from layerfit.errors import InputError
from layerfit.memory import (
    claims,
    gpu_layers_flag,
    layout_from_flags,
    make_layout,
    split_layers,
    tensor_split_counts,
)

# A small profile with distinct numbers per item so every term is visible in the sums:
# 4 blocks of weights 100 (block 3: 130) and KV 10; output 50; embedding 40.
# main GPU: fixed 1000, compute 200 full / 300 partial; local: 900, 150/250; rpc: 800, 120/220.
# host: fixed 7, compute 20 full / 30 partial; rpc-server RAM 5. Block 2 costs 60 on the host (repack).
PROFILE = MemoryProfile(
    block_weight_bytes=(100, 100, 100, 130),
    block_kv_bytes=(10, 10, 10, 10),
    block_host_weight_bytes=(100, 100, 60, 130),
    output_weight_bytes=50,
    token_embedding_bytes=40,
    main=RoleCosts(fixed_bytes=1000, compute=ComputeBuffer(full_offload_bytes=200, partial_offload_bytes=300)),
    local=RoleCosts(fixed_bytes=900, compute=ComputeBuffer(full_offload_bytes=150, partial_offload_bytes=250)),
    rpc=RoleCosts(fixed_bytes=800, compute=ComputeBuffer(full_offload_bytes=120, partial_offload_bytes=220)),
    unified=RoleCosts(fixed_bytes=0, compute=ComputeBuffer(full_offload_bytes=90, partial_offload_bytes=95)),
    host_fixed_bytes=7,
    host_compute=ComputeBuffer(full_offload_bytes=20, partial_offload_bytes=30),
    rpc_host_fixed_bytes=5,
)


def dev(worker: str, index: int, blocks: int) -> DeviceAssignment:
    return DeviceAssignment(worker=worker, gpu_index=index, blocks=blocks)


CLAIM_ROWS = [
    # single GPU, full offload: blocks 0-3 = 430 weights + 40 KV, output 50, main fixed 1000 + compute 200
    #   -> 1720. Host: fixed 7 + embedding 40 + compute 20 = 67.
    ("single GPU", make_layout("a", 4, [dev("a", 0, 4)]), {("a", 0): 1720}, {"a": 67}),
    # two local GPUs 2+2: GPU0 (local) blocks 0-1: 200+20+900+150 = 1270;
    #   GPU1 (main) blocks 2-3: 230+20 + output 50 + 1000 + 200 = 1500. Host 67.
    (
        "two local GPUs",
        make_layout("a", 4, [dev("a", 0, 2), dev("a", 1, 2)]),
        {("a", 0): 1270, ("a", 1): 1500},
        {"a": 67},
    ),
    # RPC + local: b:0 (rpc) block 0: 110 + 800 + 120 = 1030; a:0 (main) blocks 1-3: 330+30+50+1000+200 = 1610.
    #   Host a: 67; worker b: one rpc-server, 5.
    (
        "rpc + local",
        make_layout("a", 4, [dev("b", 0, 1), dev("a", 0, 3)]),
        {("b", 0): 1030, ("a", 0): 1610},
        {"a": 67, "b": 5},
    ),
    # partial offload, 2 blocks on GPU (output first): blocks 0-1 stay on the host.
    #   GPU: blocks 2-3 = 230+20 + output 50 + 1000 + partial compute 300 = 1600.
    #   Host: fixed 7 + blocks 0-1 on host (100+100 weights, 20 KV) + embedding 40 + partial compute 30 = 297.
    ("partial offload", make_layout("a", 4, [dev("a", 0, 2)]), {("a", 0): 1600}, {"a": 297}),
    # CPU only: host 7 + all blocks (100+100+60+130 = 390, KV 40) + embedding 40 + output 50 + compute 30 = 557.
    ("CPU only", make_layout("a", 4, []), {}, {"a": 557}),
    # heterogeneous blocks decide who carries block 3 (130): GPU0 gets blocks 1-2, GPU1 block 3.
    #   GPU0 (local): 200+20+900+250 = 1370; GPU1 (main): 130+10+50+1000+300 = 1490.
    #   Host: 7 + block 0 (100+10) + 40 + 30 = 187.
    (
        "heterogeneous partial",
        make_layout("a", 4, [dev("a", 0, 2), dev("a", 1, 1)]),
        {("a", 0): 1370, ("a", 1): 1490},
        {"a": 187},
    ),
    # legacy order, 3 blocks offloaded: output stays on host. GPU (main): blocks 1-3 = 330+30+1000+300 = 1660.
    #   Host: 7 + block 0 (110) + 40 + output 50 + compute 30 = 237.
    (
        "output last, partial",
        make_layout("a", 4, [dev("a", 0, 3)], OffloadOrder.OUTPUT_LAST),
        {("a", 0): 1660},
        {"a": 237},
    ),
]


@pytest.mark.parametrize(("label", "layout", "vram", "ram"), CLAIM_ROWS, ids=[row[0] for row in CLAIM_ROWS])
def test_claims_rows(label: str, layout: Layout, vram: dict[tuple[str, int], int], ram: dict[str, int]) -> None:
    result = claims(PROFILE, layout)
    assert {(d.worker, d.gpu_index): d.total_bytes for d in result.devices} == vram
    assert {w.worker: w.ram_bytes for w in result.workers} == ram


def test_unified_memory_pool() -> None:
    # Worker a is unified: its GPU uses the unified role costs (fixed 0, compute 90 full).
    # GPU: 430+40 + output 50 + 0 + 90 = 610; RAM 67; one pool must hold 610 + 67 = 677.
    result = claims(PROFILE, make_layout("a", 4, [dev("a", 0, 4)]), unified_workers={"a"})
    worker = result.workers[0]
    assert (result.devices[0].total_bytes, worker.ram_bytes, worker.pool_bytes, worker.unified_memory) == (
        610,
        67,
        677,
        True,
    )


def test_mmproj_extra_lands_on_main_gpu_or_host() -> None:
    profile = PROFILE.model_copy(update={"extra_main_gpu_bytes": 33})
    on_gpu = claims(profile, make_layout("a", 4, [dev("a", 0, 4)]))
    assert on_gpu.devices[0].total_bytes == 1720 + 33 and on_gpu.workers[0].ram_bytes == 67
    cpu_only = claims(profile, make_layout("a", 4, []))
    assert cpu_only.workers[0].ram_bytes == 557 + 33


def test_claims_rejects_mismatched_block_count() -> None:
    with pytest.raises(InputError, match="layout has 3 blocks, the model has 4"):
        claims(PROFILE, make_layout("a", 3, [dev("a", 0, 3)]))


@pytest.mark.parametrize(
    ("n_blocks", "ngl", "split", "expected"),
    [
        # ground truth (h200.csv): -ts 1,1,1 of 33 layers -> 11/11/10 blocks + output on the last device
        (32, 99, (1, 1, 1), (0, (11, 11, 10), True)),
        # ground truth: 81 layers -> 27/27/26 + output
        (80, 99, (1, 1, 1), (0, (27, 27, 26), True)),
        # ground truth: llama1b -ngl 8 -> 7 blocks + output on the GPU, 9 blocks on the host
        (16, 8, (1,), (9, (7,), True)),
        # -ngl 1 offloads only the output layer (output first)
        (16, 1, (1,), (16, (0,), True)),
        (16, 0, (1,), (16, (0,), False)),
    ],
)
def test_split_layers_matches_llama_cpp(
    n_blocks: int, ngl: int, split: tuple[float, ...], expected: tuple[int, tuple[int, ...], bool]
) -> None:
    assert split_layers(n_blocks, ngl, split) == expected


def test_split_layers_output_last() -> None:
    # old builds: -ngl 8 of 16 blocks = the last 8 blocks, output on the host; -ngl 17 = everything
    assert split_layers(16, 8, (1,), OffloadOrder.OUTPUT_LAST) == (8, (8,), False)
    assert split_layers(16, 16, (1,), OffloadOrder.OUTPUT_LAST) == (0, (16,), False)
    assert split_layers(16, 17, (1,), OffloadOrder.OUTPUT_LAST) == (0, (16,), True)


@st.composite
def layouts(draw: st.DrawFn) -> tuple[OffloadOrder, Layout]:
    """A layout that llama.cpp built with ``order`` can reproduce."""
    order = draw(st.sampled_from(list(OffloadOrder)))
    n_devices = draw(st.integers(1, 9))
    counts = draw(st.lists(st.integers(1, 40), min_size=n_devices, max_size=n_devices))
    n_blocks = sum(counts) + draw(st.integers(0, 40))
    devices = [dev("main" if i >= n_devices - 2 else f"rpc{i}", i, c) for i, c in enumerate(counts)]
    if order is OffloadOrder.OUTPUT_FIRST and draw(st.booleans()):
        devices.append(dev("main", 99, 0))  # the last device may hold only the output layer
        output = True
    elif order is OffloadOrder.OUTPUT_LAST and sum(counts) == n_blocks:
        output = draw(st.booleans())  # old builds: -ngl n keeps the output layer on the host, n+1 offloads it
    else:
        output = order is OffloadOrder.OUTPUT_FIRST
    return order, Layout(main_worker="main", n_blocks=n_blocks, devices=tuple(devices), output_offloaded=output)


@given(layouts())
def test_tensor_split_round_trip(case: tuple[OffloadOrder, Layout]) -> None:
    """Integer -ts counts and -ngl, fed into llama.cpp's rule, give back exactly the layout."""
    order, layout = case
    gpus = [(d.worker, d.gpu_index) for d in layout.devices]
    ngl, split = gpu_layers_flag(layout), tensor_split_counts(layout)
    assert layout_from_flags(layout.main_worker, gpus, layout.n_blocks, ngl, split, order) == layout


def test_layout_rejects_rpc_after_local_and_empty_devices() -> None:
    with pytest.raises(ValueError, match="RPC servers must come before"):
        Layout(main_worker="a", n_blocks=4, devices=(dev("a", 0, 2), dev("b", 0, 2)), output_offloaded=True)
    with pytest.raises(ValueError, match="holds no layer"):
        Layout(main_worker="a", n_blocks=4, devices=(dev("a", 0, 0), dev("a", 1, 2)), output_offloaded=True)
    with pytest.raises(ValueError, match="appears twice"):
        Layout(main_worker="a", n_blocks=4, devices=(dev("a", 0, 1), dev("a", 0, 2)), output_offloaded=True)


def test_a_multi_device_full_offload_without_pipeline_parallelism() -> None:
    """With pipeline parallelism off (a tensor override), two devices each cost their partial-offload
    buffer and no input copies, and the host its single-device buffer; the solver's costs follow."""
    from layerfit.memory import device_compute_bytes, main_host_overhead_bytes
    from layerfit.solver.model.costs import memory_costs

    compute = ComputeBuffer(full_offload_bytes=100, partial_offload_bytes=300, multi_device_bytes=200)
    pipelined = MemoryProfile.uniform(
        4,
        10,
        1,
        compute=compute,
        host_compute=ComputeBuffer(full_offload_bytes=10, partial_offload_bytes=30, multi_device_bytes=40),
    ).model_copy(update={"first_device_compute_bytes": 7})
    plain = pipelined.model_copy(update={"pipeline_parallel": False})
    layout = Layout(main_worker="a", n_blocks=4, devices=(dev("a", 0, 2), dev("a", 1, 2)), output_offloaded=True)
    assert [d.compute_bytes for d in claims(pipelined, layout).devices] == [207, 200]
    assert claims(pipelined, layout).workers[0].compute_bytes == 40
    assert [d.compute_bytes for d in claims(plain, layout).devices] == [300, 300]
    assert claims(plain, layout).workers[0].compute_bytes == 10
    one = Layout(main_worker="a", n_blocks=4, devices=(dev("a", 0, 4),), output_offloaded=True)
    assert [d.compute_bytes for d in claims(plain, one).devices] == [100]
    common = {"partial": False, "unified_worker": False, "holds_output": False, "first_device": True}
    assert device_compute_bytes(plain, DeviceRole.LOCAL, **common) == 300  # device count unknown: the larger
    assert main_host_overhead_bytes(plain, partial=False, output_offloaded=True, has_main_gpu=True) == 10
    assert memory_costs(plain).first_device == 0
