"""The estimate table the CLI prints: runs of equal blocks, and totals taken from memory.claims."""

from __future__ import annotations

from pathlib import Path

from fixtures_gguf import write_tiny

from layerfit.domain import DeviceAssignment, Layout, LlamaParams, format_bytes
from layerfit.estimators import estimate_profile, read_gguf
from layerfit.estimators.report import estimate_report, estimate_table
from layerfit.memory import claims, make_layout


def test_table_groups_equal_blocks_and_reports_claims(tmp_path: Path) -> None:
    # openelm sizes each layer by its own KV heads (llama tensors this uniform are refused)
    overrides = {"architecture": "openelm", "metadata": {"{arch}.attention.head_count_kv": (2, 2, 0, 2)}}
    shape = read_gguf(str(write_tiny(tmp_path, data="header", **overrides)))
    profile = estimate_profile(shape, LlamaParams(ctx_size=4096))
    text = estimate_table(shape, estimate_report(shape, LlamaParams(ctx_size=4096)))
    lines = text.splitlines()
    # blocks 0-1 alike, block 2 without KV, block 3 like the first two
    rows = [line.split()[0] for line in lines if line.strip() and line.split()[0][0].isdigit()]
    assert rows == ["0-1", "2", "3"]
    full = claims(profile, make_layout("gpu", 4, [DeviceAssignment(worker="gpu", gpu_index=0, blocks=4)]))
    cpu = claims(profile, Layout(main_worker="host", n_blocks=4))
    assert f"VRAM {format_bytes(full.devices[0].total_bytes)}" in text
    assert f"CPU only: RAM {format_bytes(cpu.workers[0].ram_bytes)}" in text
    assert "tiny (openelm): 4 blocks" in lines[0]


def test_table_lists_warnings(tmp_path: Path) -> None:
    shape = read_gguf(str(write_tiny(tmp_path, data="header", architecture="mystery")))
    text = estimate_table(shape, estimate_report(shape))
    assert "warnings:" in text
    assert "'mystery' is not modelled" in text
