"""Parsing llama.cpp's memory reports, on captured output (llama8b-q4, -ngl 16, ctx 8192, H200)."""

from __future__ import annotations

import pytest

from layerfit.estimators.llamacpp_log import (
    device_key,
    parse_breakdown,
    parse_buffer_lines,
    parse_fit_print,
    parse_memory,
)

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
