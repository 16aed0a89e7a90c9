"""Parsing llama.cpp's memory reports, on captured output (llama8b-q4, -ngl 16, ctx 8192, H200)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from gguf import GGMLQuantizationType

from layerfit.estimators import read_header
from layerfit.estimators.llamacpp_log import (
    device_key,
    parse_breakdown,
    parse_buffer_lines,
    parse_fit_print,
    parse_memory,
    reported_host_weight_offset,
)
from layerfit.memory import layout_from_flags
from layerfit.testing.synthetic import GROUND_TRUTH_MODELS, write_gguf

COMPLETION_LOG = """\
load_tensors: offloading output layer to GPU
load_tensors: offloading 15 repeating layers to GPU
load_tensors: offloaded 16/33 layers to GPU
load_tensors:   CPU_Mapped model buffer size =  2553.17 MiB
load_tensors:        CUDA0 model buffer size =  2037.30 MiB
llama_context:  CUDA_Host  output buffer size =     0.49 MiB
llama_kv_cache:        CPU KV buffer size =   544.00 MiB
llama_kv_cache:      CUDA0 KV buffer size =   480.00 MiB
llama_kv_cache: size = 1024.00 MiB (  8192 cells,  32 layers,  1/1 seqs), K (f16):  512.00 MiB, V (f16):  512.00 MiB
sched_reserve:      CUDA0 compute buffer size =   282.50 MiB
sched_reserve:  CUDA_Host compute buffer size =    40.02 MiB
sched_reserve: graph nodes  = 999
llama_memory_breakdown_print: | memory breakdown [MiB] | total free self model context compute unaccounted |
llama_memory_breakdown_print: |   - CUDA0 (H200) | 143771 = 140362 + (2799 = 2037 + 480 + 282) + 609 |
llama_memory_breakdown_print: |   - Host         |                  3137 = 2553 + 544 + 40        |
"""

RPC_LOG = """\
load_tensors: RPC0[127.0.0.1:50152] model buffer size =  1287.34 MiB
load_tensors: RPC0[127.0.0.1:50153] model buffer size =  1287.34 MiB
sched_reserve: RPC0[127.0.0.1:50153] compute buffer size =   172.04 MiB
llama_memory_breakdown_print: |   - RPC1 (127.0.0.1:50153) | 143771 = 138000 + (1811 = 1287 + 352 + 172) + 0 |
"""

FIT_PRINT = """\
llama_params_fit: projected memory use per device
CUDA0 18467 1248 326
Host 19385 1312 72
"""


def test_buffer_lines_are_summed_per_device() -> None:
    memory = parse_buffer_lines(COMPLETION_LOG)
    assert set(memory) == {"CUDA0", "Host"}
    gpu, host = memory["CUDA0"], memory["Host"]
    assert (gpu.model_mib, gpu.context_mib, gpu.compute_mib) == (2037.30, 480.00, 282.50)
    assert (host.model_mib, host.context_mib, host.compute_mib, host.output_mib) == (2553.17, 544.00, 40.02, 0.49)
    assert host.details == {
        "CPU_Mapped model": 2553.17,
        "CUDA_Host output": 0.49,
        "CPU KV": 544.00,
        "CUDA_Host compute": 40.02,
    }
    assert gpu.total_mib == pytest.approx(2799.80)


def test_breakdown_table() -> None:
    memory = parse_breakdown(COMPLETION_LOG)
    assert memory["CUDA0"].model_dump(include={"model_mib", "context_mib", "compute_mib", "unaccounted_mib"}) == {
        "model_mib": 2037,
        "context_mib": 480,
        "compute_mib": 282,
        "unaccounted_mib": 609,
    }
    assert (memory["Host"].model_mib, memory["Host"].unaccounted_mib) == (2553, None)


def test_rpc_devices_are_named_by_endpoint() -> None:
    assert device_key("RPC0[127.0.0.1:50153]") == device_key("RPC1 (127.0.0.1:50153)") == "RPC[127.0.0.1:50153]"
    lines = parse_buffer_lines(RPC_LOG)
    assert lines["RPC[127.0.0.1:50153]"].compute_mib == 172.04
    assert lines["RPC[127.0.0.1:50152]"].model_mib == 1287.34
    assert parse_breakdown(RPC_LOG)["RPC[127.0.0.1:50153]"].context_mib == 352


def test_fit_print() -> None:
    memory = parse_fit_print(FIT_PRINT)
    assert set(memory) == {"CUDA0", "Host"}
    assert (memory["CUDA0"].model_mib, memory["CUDA0"].context_mib, memory["CUDA0"].compute_mib) == (18467, 1248, 326)
    assert memory["Host"].model_mib == 19385


def test_most_precise_source_wins() -> None:
    assert parse_memory(COMPLETION_LOG)["CUDA0"].model_mib == 2037.30  # buffer lines, not the table
    assert parse_memory(FIT_PRINT)["Host"].compute_mib == 72
    assert parse_memory("nothing here") == {}


def _truth_benchmark() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "llamacpp_truth.py"
    spec = importlib.util.spec_from_file_location("llamacpp_truth", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_truth_benchmark_compares_a_captured_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "llama8b-q4.gguf"
    write_gguf(model, GROUND_TRUTH_MODELS["llama8b-q4"])
    log = tmp_path / "completion.log"
    log.write_text(COMPLETION_LOG)
    status = _truth_benchmark().main(["--log", str(log), "--model", str(model), "--", "-c", "8192", "-ngl", "16"])
    out = capsys.readouterr().out
    assert "8 of 8 figures within tolerance" in out
    assert status == 0
    # the same log read as if 16 more blocks were offloaded: the device estimate no longer matches
    status = _truth_benchmark().main(["--log", str(log), "--model", str(model), "--", "-c", "8192", "-ngl", "32"])
    assert status == 1
    assert "underestimates out of tolerance" in capsys.readouterr().out


def test_mapped_range_spans_the_gpu_output_layer(tmp_path: Path) -> None:
    model = tmp_path / "llama8b-q4.gguf"
    write_gguf(model, GROUND_TRUTH_MODELS["llama8b-q4"])
    header = read_header(model)
    partial = layout_from_flags("m", [("m", 0)], 32, 16)  # blocks 0-16 on the host
    full = layout_from_flags("m", [("m", 0)], 32, 99)
    output = next(t.n_bytes for t in header.tensors if t.name == "output.weight")
    norm = next(t.n_bytes for t in header.tensors if t.name == "output_norm.weight")
    # file order: token_embd, output, output_norm, blk.0 ...: the range from token_embd to blk.16
    assert reported_host_weight_offset(header, partial, repack=False, projection=False, mmap=True) == output + norm
    assert reported_host_weight_offset(header, full, repack=False, projection=False, mmap=True) == 0
    assert reported_host_weight_offset(header, partial, repack=False, projection=False, mmap=False) == 0
    # a CPU build keeping everything: Q4_0 blocks and output are repacked; the projection omits them
    cpu = layout_from_flags("m", [], 32, 0)
    repacked = sum(
        t.n_bytes for t in header.tensors if t.ggml_type == GGMLQuantizationType.Q4_0 and "token_embd" not in t.name
    )
    assert reported_host_weight_offset(header, cpu, repack=True, projection=True, mmap=True) == -repacked
