"""The memory model's compute terms the estimator fills: multi-device (pipeline-parallel) buffers,
the first device's input copies, logits on the device holding the output layer, and the host's
output layer when it stays there. Building blocks called without device count stay upper bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layerfit.domain import ComputeBuffer, DeviceAssignment, DeviceRole, Layout, MemoryProfile, RoleCosts
from layerfit.memory import claims, device_overhead_bytes, main_host_overhead_bytes

ROLE = RoleCosts(
    fixed_bytes=700, compute=ComputeBuffer(full_offload_bytes=100, partial_offload_bytes=60, multi_device_bytes=130)
)
PROFILE = MemoryProfile(
    block_weight_bytes=(1000,) * 6,
    block_kv_bytes=(10,) * 6,
    output_weight_bytes=500,
    host_output_weight_bytes=5,  # tied embedding: only the norm is extra on the host
    token_embedding_bytes=495,
    main=ROLE,
    local=ROLE,
    rpc=ROLE,
    host_compute=ComputeBuffer(full_offload_bytes=20, partial_offload_bytes=30, multi_device_bytes=50),
    output_compute_bytes=250,
    first_device_compute_bytes=9,
    host_output_compute_bytes=260,
)


def _layout(devices: list[tuple[str, int]], output: bool = True) -> Layout:
    return Layout(
        main_worker="m",
        n_blocks=6,
        devices=tuple(DeviceAssignment(worker=w, gpu_index=i, blocks=b) for i, (w, b) in enumerate(devices)),
        output_offloaded=output,
    )


# Each row: layout, expected compute per device, expected host compute and host output-layer bytes.
ROWS = [
    # one GPU, everything offloaded: full buffer + logits; host full buffer
    ("single full", [("m", 6)], True, (100 + 250,), 20, 0),
    # one GPU, two blocks kept: partial buffer + logits; host partial buffer
    ("single partial", [("m", 4)], True, (60 + 250,), 30, 0),
    # three devices, full: multi buffers; the first gets the input copies, the last the logits
    ("rpc, rpc, main", [("r", 2), ("r", 2), ("m", 2)], True, (130 + 9, 130, 130 + 250), 50, 0),
    # the same devices with a block kept: partial buffers, no input copies
    ("rpc, rpc, main partial", [("r", 2), ("r", 1), ("m", 2)], True, (60, 60, 60 + 250), 30, 0),
    # the main worker has no GPU: the last RPC device holds the output layer and the logits
    ("rpc only", [("r", 3), ("r", 3)], True, (130 + 9, 130 + 250), 50, 0),
    # nothing offloaded: the host keeps the output layer and computes the logits
    ("cpu only", [], False, (), 30 + 260, 5),
]


@pytest.mark.parametrize(
    ("devices", "output", "compute", "host_compute", "host_output"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_compute_per_device_position(
    devices: list[tuple[str, int]], output: bool, compute: tuple[int, ...], host_compute: int, host_output: int
) -> None:
    needed = claims(PROFILE, _layout(devices, output))
    assert tuple(d.compute_bytes for d in needed.devices) == compute
    host = needed.workers[0]
    assert host.compute_bytes == host_compute
    assert host.output_bytes == host_output


def test_profiles_without_the_new_terms_are_unchanged() -> None:
    plain = MemoryProfile.uniform(
        4, 100, 10, output_weight_bytes=50, compute=ComputeBuffer(full_offload_bytes=7, partial_offload_bytes=9)
    )
    needed = claims(
        plain,
        Layout(
            main_worker="m",
            n_blocks=4,
            devices=(DeviceAssignment(worker="m", gpu_index=0, blocks=3),),
            output_offloaded=False,
        ),
    )
    assert needed.devices[0].compute_bytes == 9
    assert needed.workers[0].output_bytes == 50
    assert plain.main.compute.bytes_for(False) == plain.main.compute.bytes_for(False, True) == 7


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    n_rpc = draw(st.integers(0, 3))
    n_local = draw(st.integers(0 if n_rpc else 1, 3))
    workers = ["r"] * n_rpc + ["m"] * n_local
    blocks = draw(st.lists(st.integers(1, 2), min_size=len(workers), max_size=len(workers)))
    while sum(blocks) > 6:
        blocks[blocks.index(max(blocks))] -= 1
    output = draw(st.booleans()) if sum(blocks) == 6 else True
    devices = [(w, b) for w, b in zip(workers, blocks, strict=True) if b or w == workers[-1]]
    return _layout(devices, output=output or not devices)


@given(layout=layouts())
def test_building_blocks_without_device_count_bound_claims(layout: Layout) -> None:
    """Engines that do not model device count or position get upper bounds of what claims charges."""
    needed = claims(PROFILE, layout)
    partial = layout.cpu_blocks > 0 or not layout.output_offloaded
    for position, device in enumerate(needed.devices):
        role = layout.role(position)
        bound = device_overhead_bytes(
            PROFILE, role, partial=partial, unified_worker=False, holds_output=device.holds_output
        )
        exact = device_overhead_bytes(
            PROFILE,
            role,
            partial=partial,
            unified_worker=False,
            holds_output=device.holds_output,
            multi_device=len(layout.devices) > 1,
            first_device=position == 0,
        )
        assert exact == device.fixed_bytes + device.compute_bytes + device.output_bytes + device.extra_bytes
        assert bound >= exact
    host = needed.workers[0]
    has_main_gpu = any(d.role is DeviceRole.MAIN for d in needed.devices)
    bound = main_host_overhead_bytes(
        PROFILE, partial=partial, output_offloaded=layout.output_offloaded, has_main_gpu=has_main_gpu
    )
    assert bound >= host.fixed_bytes + host.embedding_bytes + host.output_bytes + host.compute_bytes


def test_output_cost_does_not_depend_on_the_device_kind() -> None:
    """What holding the output layer adds is the same for every role and offload state."""
    steps = {
        device_overhead_bytes(PROFILE, role, partial=partial, unified_worker=False, holds_output=True)
        - device_overhead_bytes(PROFILE, role, partial=partial, unified_worker=False, holds_output=False)
        for role in DeviceRole
        for partial in (False, True)
    }
    assert steps == {500 + 250}
