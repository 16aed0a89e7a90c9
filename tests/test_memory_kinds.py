"""Compute by the layer kinds a device holds (``estimators.layer_kinds``, ``memory.kinds``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerfit.domain import DeviceAssignment, Layout, LlamaParams, MemoryProfile
from layerfit.domain.profile import ComputeBuffer, DeviceRole, KindsCompute, RoleCosts
from layerfit.estimators import RuntimeCosts, estimate_profile, read_gguf
from layerfit.estimators.layer_kinds import LayerKind, layer_kinds, range_unions, scan_crossings
from layerfit.memory import claims, device_compute_bytes, keeps_scan, kinds_entry, range_kinds
from layerfit.testing.arch_fixtures import write_arch_model

MiB = 1024**2
CPU = RuntimeCosts(backend="cpu", default_slots=1)
K = LayerKind


def profile_of(tmp_path: Path, name: str, ctx: int) -> tuple[MemoryProfile, int]:
    shape = read_gguf(str(write_arch_model(tmp_path, name)))
    return estimate_profile(shape, LlamaParams.from_args(["-c", str(ctx)]), runtime=CPU), shape.block_count


def two_devices(n_blocks: int, first: int) -> Layout:
    devices = (
        DeviceAssignment(worker="w", gpu_index=0, blocks=first),
        DeviceAssignment(worker="w", gpu_index=1, blocks=n_blocks - first),
    )
    return Layout(main_worker="w", n_blocks=n_blocks, devices=devices, output_offloaded=True)


def test_layer_kinds_follow_the_blocks(tmp_path: Path) -> None:
    shape = read_gguf(str(write_arch_model(tmp_path, "nemotron_h-q8_0")))  # blocks M F M A M F
    recurrent, ffn, attention = int(K.RECURRENT), int(K.FEED_FORWARD), int(K.FULL_ATTENTION)
    assert layer_kinds(shape) == (recurrent, ffn, recurrent, attention, recurrent, ffn)
    unions = range_unions(layer_kinds(shape))
    assert recurrent | ffn in unions and recurrent in unions and attention | recurrent in unions
    assert recurrent | ffn | attention not in unions  # every kind: the role costs already say it


def test_range_unions_of_one_kind_are_empty() -> None:
    assert range_unions((5, 5, 5)) == ()
    assert range_unions((1, 2, 1)) == (1, 2)


def test_first_device_without_full_attention_keeps_no_full_mask(tmp_path: Path) -> None:
    """gemma3: the first device of a split over two holds only sliding-window blocks (measured:
    llama.cpp's buffer is 51.56 MiB; the per-role bound was 83.50, 4 copies of the 8 MiB mask more)."""
    profile, n_blocks = profile_of(tmp_path, "gemma3-q4_k", 8192)
    layout = two_devices(n_blocks, 4)
    first = claims(profile, layout).devices[0]
    bound = device_compute_bytes(
        profile,
        DeviceRole.RPC,
        partial=False,
        unified_worker=False,
        holds_output=False,
        multi_device=True,
        first_device=True,
    )
    full_mask = 8192 * 512 * 2  # cells x ubatch, F16 with flash attention
    assert bound - first.compute_bytes == 4 * full_mask
    assert range_kinds(profile, 0, 4) == int(K.WINDOW_ATTENTION | K.FEED_FORWARD)


@pytest.mark.parametrize("name", ["gemma3-q4_k", "llama4-q4_k", "jamba-q8_0", "nemotron_h-q8_0", "modern-bert-f16"])
def test_kinds_never_exceed_the_role_bound(tmp_path: Path, name: str) -> None:
    """Every split over two devices: the per-kind figure is at most the per-role upper bound the
    solver encodes, and the host's buffer is unchanged."""
    profile, n_blocks = profile_of(tmp_path, name, 2048)
    assert profile.kinds_compute
    unbounded = profile.model_copy(update={"block_kinds": None})
    for first in range(1, n_blocks):
        layout = two_devices(n_blocks, first)
        by_kinds, by_role = claims(profile, layout), claims(unbounded, layout)
        for ours, bound in zip(by_kinds.devices, by_role.devices, strict=True):
            assert ours.compute_bytes <= bound.compute_bytes
        assert by_kinds.workers[0].compute_bytes == by_role.workers[0].compute_bytes


def hand_profile(entry_bytes: int) -> MemoryProfile:
    role = RoleCosts(compute=ComputeBuffer(full_offload_bytes=100, partial_offload_bytes=200))
    return MemoryProfile(
        block_weight_bytes=(1, 1, 1),
        block_kv_bytes=(0, 0, 0),
        main=role,
        local=role,
        rpc=role,
        block_kinds=(1, 2, 2),
        kinds_compute=(
            KindsCompute(
                kinds=2, device=ComputeBuffer(full_offload_bytes=entry_bytes, partial_offload_bytes=entry_bytes)
            ),
        ),
    )


def test_kinds_entry_lowers_only_devices_within_it() -> None:
    profile = hand_profile(30)
    assert kinds_entry(profile, range_kinds(profile, 1, 3)) is not None
    assert kinds_entry(profile, range_kinds(profile, 0, 2)) is None  # kinds 1|2 = every kind: no entry
    assert range_kinds(profile, 2, 2) is None
    layout = Layout(
        main_worker="w",
        n_blocks=3,
        devices=(
            DeviceAssignment(worker="w", gpu_index=0, blocks=1),
            DeviceAssignment(worker="w", gpu_index=1, blocks=2),
        ),
        output_offloaded=True,
    )
    assert [device.compute_bytes for device in claims(profile, layout).devices] == [100, 30]


def test_an_entry_above_the_role_bound_is_not_taken() -> None:
    assert (
        claims(
            hand_profile(500),
            Layout(
                main_worker="w",
                n_blocks=3,
                devices=(DeviceAssignment(worker="w", gpu_index=0, blocks=2),),
                output_offloaded=False,
            ),
        )
        .devices[0]
        .compute_bytes
        == 200
    )


def test_kinds_rejects_a_wrong_length() -> None:
    with pytest.raises(ValueError, match="block_kinds"):
        MemoryProfile(block_weight_bytes=(1, 1), block_kv_bytes=(0, 0), block_kinds=(1,))


def test_a_split_that_turns_flash_attention_off_keeps_the_role_bound(tmp_path: Path) -> None:
    """nemotron_h with blocks 0-3 on the host: the host's last block attends, the device's first is
    recurrent, flash attention goes off and the device runs block 3's attention although it holds
    no attention layer, so its kinds do not lower its buffer."""
    profile, n_blocks = profile_of(tmp_path, "nemotron_h-q8_0", 8192)
    assert profile.flash_attn_fallback is not None and 4 in profile.flash_attn_fallback.host_blocks
    layout = Layout(
        main_worker="w",
        n_blocks=n_blocks,
        devices=(DeviceAssignment(worker="w", gpu_index=0, blocks=2),),
        output_offloaded=True,
    )
    unbounded = profile.model_copy(update={"block_kinds": None})
    assert claims(profile, layout).devices[0].compute_bytes == claims(unbounded, layout).devices[0].compute_bytes
    shifted = layout.model_copy(update={"devices": (DeviceAssignment(worker="w", gpu_index=0, blocks=1),)})
    assert claims(profile, shifted).devices[0].compute_bytes < claims(unbounded, shifted).devices[0].compute_bytes


def test_scan_crossings_are_boundaries_between_plain_recurrent_blocks() -> None:
    recurrent, attention = int(K.RECURRENT | K.FEED_FORWARD), int(K.FULL_ATTENTION | K.FEED_FORWARD)
    both = int(K.RECURRENT | K.FULL_ATTENTION)  # falcon-h1's parallel blocks
    assert scan_crossings((recurrent, recurrent, attention, recurrent, recurrent, attention)) == (1, 4)
    assert scan_crossings((both, both, both)) == ()


def test_a_later_device_keeps_the_scan_only_at_a_recurrent_boundary(tmp_path: Path) -> None:
    """granitehybrid (M M A M M A). Measured at -ts 7,2,4: the device holding block 4 alone (after
    block 3, both Mamba-2) keeps the scan (66.83 MiB); at -ts 2,1,4 the last device, blocks 3-5
    after an attention block, does not (104.55 MiB with the logits, the scan is 32.5 MiB)."""
    profile, n_blocks = profile_of(tmp_path, "granitehybrid-q8_0", 8192)
    assert profile.scan_crossings == (1, 4) and profile.scan_bytes > 0
    assert keeps_scan(profile, 4, 5) is True and keeps_scan(profile, 3, 6) is False
    assert keeps_scan(profile, 0, 4) is True  # its last block and the next device's first are recurrent
    devices = tuple(DeviceAssignment(worker="w", gpu_index=i, blocks=b) for i, b in enumerate((2, 1, 3)))
    layout = Layout(main_worker="w", n_blocks=n_blocks, devices=devices, output_offloaded=True)
    unmodelled = profile.model_copy(update={"scan_crossings": tuple(range(1, n_blocks))})
    ours, bound = claims(profile, layout).devices, claims(unmodelled, layout).devices
    assert bound[2].compute_bytes - ours[2].compute_bytes == profile.scan_bytes
    assert ours[0].compute_bytes == bound[0].compute_bytes  # the first device keeps the upper bound
    assert abs(ours[2].compute_bytes / MiB - 104.55) < 0.1  # llama.cpp's buffer at -ts 2,1,4
