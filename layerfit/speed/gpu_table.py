"""The GPU table: memory bandwidth and FP16 rate of GPUs by the name NVML, ROCm and Apple report.

Names are those the drivers report and GPUStack passes on (``NVIDIA GeForce RTX 4090``, ``NVIDIA
H100 80GB HBM3``, ``AMD Instinct MI300X``, ``Apple M2 Ultra``); ``match`` finds a row by a name's
words, case and punctuation aside. Each row names its source. The FP16 figure is the dense tensor
rate (no sparsity) as the vendor states it: FP16 accumulate for GeForce cards, FP32 accumulate for
the data-centre and workstation ones; Apple states FP32 GPU TFLOPS only (its GPUs run FP16 at that
rate) and none for M3 and M4 (``None``: the speed model states its stand-in). The same figures are
kept with the speed ground truth (``tests/gguf_fixtures/ground_truth/speed/gpu_specs.csv``), which
``benchmarks/speed_truth.py`` checks this table against.

A row named ``CPU`` is ggml's CPU backend served as a device by ``ggml-rpc-server -d CPU``: it runs
at its worker's RAM bandwidth and threads, not at figures of its own.
"""

from __future__ import annotations

import re
from functools import cache
from typing import NamedTuple


class GpuSpec(NamedTuple):
    name: str
    family: str
    """``calibration.FAMILIES`` key: how close llama.cpp comes to the spec sheet."""
    memory_bandwidth_gbps: float
    fp16_tflops: float | None
    source: str


def _row(name: str, family: str, bandwidth: float, fp16: float | None, source: str) -> GpuSpec:
    return GpuSpec(name, family, float(bandwidth), None if fp16 is None else float(fp16), source)


CPU_DEVICE = "CPU"
"""The name ``ggml-rpc-server -d CPU`` reports for its device."""

GPUS: tuple[GpuSpec, ...] = (
    _row("NVIDIA GeForce RTX 3060", "ampere", 360, 51.0, "GeForce RTX 3060 family product page"),
    _row(
        "NVIDIA GeForce RTX 3070",
        "ampere",
        448,
        81.3,
        "NVIDIA Ampere GA102 architecture whitepaper; GeForce RTX 30 series product pages",
    ),
    _row(
        "NVIDIA GeForce RTX 3080",
        "ampere",
        760,
        119.0,
        "NVIDIA Ampere GA102 architecture whitepaper; GeForce RTX 30 series product pages",
    ),
    _row(
        "NVIDIA GeForce RTX 3090",
        "ampere",
        936,
        142.0,
        "NVIDIA Ampere GA102 architecture whitepaper; GeForce RTX 30 series product pages",
    ),
    _row("NVIDIA GeForce RTX 3090 Ti", "ampere", 1008, 160.0, "GeForce RTX 3090 Ti product page"),
    _row("NVIDIA GeForce RTX 4060", "ada", 272, 60.5, "GeForce RTX 4060 family product page"),
    _row("NVIDIA GeForce RTX 4060 Ti", "ada", 288, 88.3, "GeForce RTX 4060 family product page"),
    _row("NVIDIA GeForce RTX 4070", "ada", 504, 116.6, "GeForce RTX 4070 family product page"),
    _row("NVIDIA GeForce RTX 4070 Ti SUPER", "ada", 672, 176.4, "GeForce RTX 4070 family product page"),
    _row(
        "NVIDIA GeForce RTX 4080",
        "ada",
        716.8,
        194.9,
        "NVIDIA Ada Lovelace architecture whitepaper; GeForce RTX 40 series product pages",
    ),
    _row("NVIDIA GeForce RTX 4080 SUPER", "ada", 736, 208.9, "GeForce RTX 4080 family product page"),
    _row(
        "NVIDIA GeForce RTX 4090",
        "ada",
        1008,
        330.3,
        "NVIDIA Ada Lovelace architecture whitepaper; GeForce RTX 40 series product pages",
    ),
    _row("NVIDIA GeForce RTX 4090 D", "ada", 1008, 294.2, "GeForce RTX 4090 D product page (China)"),
    _row("NVIDIA GeForce RTX 5070", "blackwell", 672, 123.5, "NVIDIA GeForce RTX 50 series product pages"),
    _row("NVIDIA GeForce RTX 5070 Ti", "blackwell", 896, 175.8, "NVIDIA GeForce RTX 50 series product pages"),
    _row("NVIDIA GeForce RTX 5080", "blackwell", 960, 225.1, "NVIDIA GeForce RTX 50 series product pages"),
    _row(
        "NVIDIA GeForce RTX 5090",
        "blackwell",
        1792,
        419.0,
        "NVIDIA GeForce RTX 50 series product pages (AI TOPS 3352 FP4 sparse = 419 FP16 dense)",
    ),
    _row("NVIDIA RTX A6000", "ampere", 768, 154.8, "NVIDIA RTX A6000 datasheet"),
    _row(
        "NVIDIA RTX 6000 Ada Generation",
        "ada",
        960,
        364.2,
        "NVIDIA RTX 6000 Ada Generation datasheet (1457 FP8 sparse)",
    ),
    _row("NVIDIA A10", "ampere", 600, 125.0, "NVIDIA A10 Tensor Core GPU datasheet"),
    _row("NVIDIA A100-SXM4-40GB", "ampere_hbm", 1555, 312.0, "NVIDIA A100 Tensor Core GPU datasheet"),
    _row("NVIDIA A100-PCIE-40GB", "ampere_hbm", 1555, 312.0, "NVIDIA A100 Tensor Core GPU datasheet"),
    _row("NVIDIA A100-SXM4-80GB", "ampere_hbm", 2039, 312.0, "NVIDIA A100 Tensor Core GPU datasheet"),
    _row("NVIDIA A100 80GB PCIe", "ampere_hbm", 1935, 312.0, "NVIDIA A100 Tensor Core GPU datasheet"),
    _row("NVIDIA H100 PCIe", "hopper", 2000, 756.0, "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe column)"),
    _row("NVIDIA H100 80GB HBM3", "hopper", 3350, 989.4, "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column)"),
    _row("NVIDIA H200", "hopper", 4800, 989.4, "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column)"),
    _row("NVIDIA L4", "ada", 300, 121.0, "NVIDIA L4 Tensor Core GPU datasheet"),
    _row("NVIDIA L40", "ada", 864, 181.05, "NVIDIA L40 datasheet"),
    _row("NVIDIA L40S", "ada", 864, 362.05, "NVIDIA L40S datasheet"),
    _row("Tesla T4", "turing", 320, 65.0, "NVIDIA T4 Tensor Core GPU datasheet"),
    _row("Tesla V100-SXM2-16GB", "volta", 900, 125.0, "NVIDIA V100 Tensor Core GPU datasheet (SXM2)"),
    _row("Tesla V100-SXM2-32GB", "volta", 900, 125.0, "NVIDIA V100 Tensor Core GPU datasheet (SXM2)"),
    _row("Tesla V100-PCIE-16GB", "volta", 900, 112.0, "NVIDIA V100 Tensor Core GPU datasheet (PCIe)"),
    _row("Tesla V100-PCIE-32GB", "volta", 900, 112.0, "NVIDIA V100 Tensor Core GPU datasheet (PCIe)"),
    _row("AMD Instinct MI100", "cdna", 1228.8, 184.6, "AMD Instinct MI100 accelerator product page"),
    _row("AMD Instinct MI210", "cdna", 1638.4, 181.0, "AMD Instinct MI210 accelerator product page"),
    _row("AMD Instinct MI250", "cdna", 3276.8, 362.1, "AMD Instinct MI250 accelerator product page"),
    _row("AMD Instinct MI250X", "cdna", 3276.8, 383.0, "AMD Instinct MI250X accelerator product page"),
    _row("AMD Instinct MI300X", "cdna", 5300, 1307.4, "AMD Instinct MI300X accelerator product page"),
    _row("AMD Radeon RX 7900 XTX", "rdna", 960, 122.8, "AMD Radeon RX 7900 XTX product specifications page"),
    _row("AMD Radeon RX 7900 XT", "rdna", 800, 103.0, "AMD Radeon RX 7900 XT product specifications page"),
    _row("AMD Radeon PRO W7900", "rdna", 864, 122.6, "AMD Radeon PRO W7900 product specifications page"),
    _row("Apple M1", "apple", 68.25, 2.6, "Apple M1 press release (Nov 2020); MacBook Air (M1) tech specs"),
    _row("Apple M1 Pro", "apple", 200, 5.2, "Apple M1 Pro and M1 Max press release (Oct 2021)"),
    _row("Apple M1 Max", "apple", 400, 10.4, "Apple M1 Pro and M1 Max press release (Oct 2021)"),
    _row("Apple M1 Ultra", "apple", 800, 21.0, "Apple M1 Ultra press release (Mar 2022)"),
    _row("Apple M2", "apple", 100, 3.6, "Apple M2 press release (Jun 2022)"),
    _row("Apple M2 Pro", "apple", 200, 6.8, "Apple M2 Pro and M2 Max press release (Jan 2023)"),
    _row("Apple M2 Max", "apple", 400, 13.6, "Apple M2 Pro and M2 Max press release (Jan 2023)"),
    _row("Apple M2 Ultra", "apple", 800, 27.2, "Apple M2 Ultra press release (Jun 2023)"),
    _row("Apple M3", "apple", 100, None, "MacBook Pro (M3) tech specs"),
    _row("Apple M3 Pro", "apple", 150, None, "MacBook Pro (M3 Pro) tech specs"),
    _row("Apple M3 Max", "apple", 400, None, "MacBook Pro (M3 Max) tech specs"),
    _row("Apple M3 Ultra", "apple", 819, None, "Mac Studio (2025) tech specs"),
    _row("Apple M4", "apple", 120, None, "Mac mini (M4) tech specs"),
    _row("Apple M4 Pro", "apple", 273, None, "Mac mini (M4 Pro) tech specs"),
    _row("Apple M4 Max", "apple", 546, None, "MacBook Pro (M4 Max) tech specs"),
    _row("NVIDIA A100", "ampere_hbm", 1555, 312.0, "the slower of the A100's variants (40 GB), for a name without one"),
    _row("NVIDIA H100", "hopper", 2000, 756.0, "the slower of the H100's variants (PCIe), for a name without one"),
    _row(
        CPU_DEVICE, "cpu", 0, None, "ggml's CPU backend behind ggml-rpc-server: the worker's RAM bandwidth and threads"
    ),
)
"""Every known GPU, one row each; the ground truth's ``gpu_specs.csv`` holds the same figures."""

VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla", "amd", "radeon", "instinct", "apple", "ati"})
"""Words a driver may put before the model name or leave out."""
HARMLESS_WORDS = frozenset({"gpu", "graphics"})
"""Words a reported name may add to a row's without naming another product."""
_MEMORY_SIZE = re.compile(r"^\d+gb$")


def words(name: str) -> tuple[str, ...]:
    """A name as lower-case words, vendor words dropped: ``NVIDIA A100-SXM4-80GB`` -> ``a100 sxm4 80gb``."""
    return tuple(word for word in re.split(r"[^a-z0-9]+", name.lower()) if word and word not in VENDOR_WORDS)


@cache
def _by_words() -> dict[tuple[str, ...], GpuSpec]:
    return {words(spec.name): spec for spec in GPUS}


def match(name: str) -> GpuSpec | None:
    """The row of a reported GPU name: the one with the same words, or the one whose words the name
    has with only ``HARMLESS_WORDS`` or a memory size (``24GB``) added; ``None`` for any other name
    (a laptop or a cut-down part of a known GPU is not taken for it)."""
    given = words(name)
    if not given:
        return None
    rows = _by_words()
    if given in rows:
        return rows[given]
    kept = tuple(word for word in given if word not in HARMLESS_WORDS and not _MEMORY_SIZE.match(word))
    return rows.get(kept)
