"""Flash attention ``auto`` that llama.cpp turns off for one layer split of a recurrent hybrid.

Measured (``cpu-architectures-recurrent.csv``, ``rpc1split_*`` runs): granitehybrid at ``-ngl 4``,
jamba at ``-ngl 2`` and nemotron_h at ``-ngl 3`` log "Flash Attention not supported, set to
disabled", and no other split does. The estimator names those splits, ``memory.claims`` charges
the fallback only there, and the engines' per-device functions take it as an upper bound when
they do not say which split they price.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from layerfit.domain import LlamaParams
from layerfit.estimators import RuntimeCosts, estimate_profile, read_header, shape_from_header
from layerfit.estimators.compute import flash_attn_off_splits
from layerfit.estimators.model_shape import ModelShape
from layerfit.memory import claims, device_overhead_bytes, layout_from_flags, main_host_overhead_bytes
from layerfit.solver.model.costs import memory_costs
from layerfit.testing.arch_fixtures import write_arch_model

CPU = RuntimeCosts(backend="cpu", default_slots=1)
MEASURED_OFF = {"granitehybrid-q8_0": 4, "jamba-q8_0": 2, "nemotron_h-q8_0": 3}
"""The only ``-ngl`` of each hybrid whose run disabled flash attention."""


def _shape(tmp_path: Path, name: str) -> ModelShape:
    return shape_from_header(read_header(str(write_arch_model(tmp_path, name))))


@pytest.mark.parametrize("name", [*MEASURED_OFF, "falcon-h1-f16", "mamba2-f16", "llama-q4_0"])
def test_the_splits_named_are_the_measured_ones(tmp_path: Path, name: str) -> None:
    shape = _shape(tmp_path, name)
    off = {shape.block_count - kept + 1 for kept in flash_attn_off_splits(shape)}  # as -ngl
    assert off == ({MEASURED_OFF[name]} if name in MEASURED_OFF else set())


def test_only_auto_falls_back(tmp_path: Path) -> None:
    shape = _shape(tmp_path, "granitehybrid-q8_0")
    assert estimate_profile(shape, LlamaParams.from_args(["-c", "8192"]), runtime=CPU).flash_attn_fallback
    for value in ("on", "off"):
        params = LlamaParams.from_args(["-c", "8192", "-fa", value])
        assert estimate_profile(shape, params, runtime=CPU).flash_attn_fallback is None


def test_claims_charge_the_fallback_at_its_split_and_engines_get_an_upper_bound(tmp_path: Path) -> None:
    shape = _shape(tmp_path, "granitehybrid-q8_0")
    profile = estimate_profile(shape, LlamaParams.from_args(["-c", "8192"]), runtime=CPU)
    fallback = profile.flash_attn_fallback
    assert fallback is not None and fallback.host_blocks == (3,)
    computes = {}
    for ngl in range(2, 7):
        layout = layout_from_flags("main", [("remote", 0)], shape.block_count, ngl, None)
        found = claims(profile, layout)
        device, host = found.devices[0], found.workers[0]
        computes[ngl] = device.compute_bytes
        bound = device_overhead_bytes(
            profile, layout.role(0), partial=True, unified_worker=False, holds_output=True, multi_device=False
        )
        assert device.compute_bytes + device.fixed_bytes + device.output_bytes <= bound
        host_bound = main_host_overhead_bytes(profile, partial=True, output_offloaded=True, has_main_gpu=False)
        assert host.compute_bytes + host.fixed_bytes + host.embedding_bytes <= host_bound
    assert computes[4] - computes[3] == fallback.output_device_extra_bytes > 0
    assert len({value for ngl, value in computes.items() if ngl != 4}) == 1
    memory_costs(profile)  # the solver's encoding still sees constant add-ons
