"""Parse llama.cpp's own memory figures: buffer-size log lines, the memory breakdown table, and
``llama-fit-params --fit-print on`` output. Used to compare estimates with llama.cpp.

Device names are normalised: ``CUDA0 (H200)`` becomes ``CUDA0``; RPC devices are named by their
endpoint (``RPC[127.0.0.1:50052]``); every host-side buffer type (``CPU``, ``CPU_Mapped``,
``CPU_REPACK``, ``CUDA_Host``, ...) is ``Host``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from pydantic import Field

from layerfit.domain.base import Frozen
from layerfit.domain.layout import Layout
from layerfit.estimators.gguf_constants import GGMLQuantizationType
from layerfit.estimators.gguf_reader import GgufHeader, TensorInfo
from layerfit.estimators.header_access import BLOCK0_PREFIXES, OUTPUT_PREFIXES

HOST = "Host"
_HOST_BUFFERS = re.compile(r"^(CPU(_\w+)?|\w+_Host|Host)$")
_RPC = re.compile(r"^RPC\d*\[(?P<endpoint>[^\]]+)\]$")
_RPC_ROW = re.compile(r"^RPC\d*\s*\((?P<endpoint>[^)]+)\)$")
_BUFFER_LINE = re.compile(
    r"(?P<device>[\w\[\].:-]+)\s+(?P<kind>model|KV|RS|compute|output)\s+buffer size\s*=\s*(?P<mib>-?[\d.]+)\s*MiB"
)
_BREAKDOWN_GPU = re.compile(
    r"\|\s*-\s*(?P<device>[^|]+?)\s*\|\s*(?P<total>\d+)\s*=\s*(?P<free>\d+)\s*\+\s*\(\s*(?P<self>\d+)\s*=\s*"
    r"(?P<model>\d+)\s*\+\s*(?P<context>\d+)\s*\+\s*(?P<compute>\d+)\s*\)\s*\+\s*(?P<unaccounted>-?\d+)\s*\|"
)
_BREAKDOWN_OTHER = re.compile(
    r"\|\s*-\s*(?P<device>[^|]+?)\s*\|\s*(?P<self>\d+)\s*=\s*(?P<model>\d+)\s*\+\s*(?P<context>\d+)\s*\+\s*(?P<compute>\d+)\s*\|"
)
_FIT_PRINT = re.compile(
    r"^\s*(?P<device>[A-Za-z][\w\[\].:-]*(?:\s*\([^)]*\))?)\s+(?P<model>\d+)\s+(?P<context>\d+)\s+(?P<compute>\d+)\s*$"
)


class DeviceMemory(Frozen):
    """One device's memory as llama.cpp reports it, in MiB."""

    device: str
    model_mib: float = 0.0
    context_mib: float = 0.0
    compute_mib: float = 0.0
    output_mib: float = 0.0
    """Host output buffer (logits); only buffer-size lines report it."""
    unaccounted_mib: float | None = None
    details: dict[str, float] = Field(default_factory=dict)
    """Individual buffers by buffer type, e.g. ``{"CPU_REPACK model": 4025.81}``."""

    @property
    def total_mib(self) -> float:
        return self.model_mib + self.context_mib + self.compute_mib


def device_key(name: str) -> str:
    """Normalise a device or buffer-type name (``CUDA0 (H200)`` -> ``CUDA0``, ``CPU_Mapped`` -> ``Host``)."""
    name = name.strip()
    rpc_row = _RPC_ROW.match(name)
    if rpc_row is not None:
        return f"RPC[{rpc_row['endpoint']}]"
    rpc = _RPC.match(name)
    if rpc is not None:
        return f"RPC[{rpc['endpoint']}]"
    name = name.split(" (", 1)[0].strip()
    return HOST if _HOST_BUFFERS.match(name) else name


def _accumulate(entries: Iterable[tuple[str, str, float]]) -> dict[str, DeviceMemory]:
    fields = {
        "model": "model_mib",
        "KV": "context_mib",
        "RS": "context_mib",
        "compute": "compute_mib",
        "output": "output_mib",
    }
    totals: dict[str, dict[str, float]] = {}
    details: dict[str, dict[str, float]] = {}
    for buffer_type, kind, mib in entries:
        key = device_key(buffer_type)
        row = totals.setdefault(key, {})
        row[fields[kind]] = row.get(fields[kind], 0.0) + mib
        detail = details.setdefault(key, {})
        label = f"{buffer_type} {kind}"
        detail[label] = detail.get(label, 0.0) + mib
    return {key: DeviceMemory(device=key, details=details[key], **values) for key, values in totals.items()}


def parse_buffer_lines(text: str) -> dict[str, DeviceMemory]:
    """``<device> model|KV|RS|compute|output buffer size = X MiB`` lines, summed per device."""
    entries = [(m["device"], m["kind"], float(m["mib"])) for m in _BUFFER_LINE.finditer(text)]
    return _accumulate(entries)


def parse_breakdown(text: str) -> dict[str, DeviceMemory]:
    """The ``memory breakdown [MiB]`` table printed at exit."""
    result: dict[str, DeviceMemory] = {}
    for line in text.splitlines():
        gpu = _BREAKDOWN_GPU.search(line)
        other = None if gpu is not None else _BREAKDOWN_OTHER.search(line)
        match = gpu or other
        if match is None:
            continue
        key = device_key(match["device"])
        unaccounted = float(gpu["unaccounted"]) if gpu is not None else None
        previous = result.get(key)
        memory = DeviceMemory(
            device=key,
            model_mib=float(match["model"]),
            context_mib=float(match["context"]),
            compute_mib=float(match["compute"]),
            unaccounted_mib=unaccounted,
        )
        if previous is not None:  # host-side rows (Host, CPU_REPACK) add up
            memory = memory.model_copy(
                update={
                    "model_mib": previous.model_mib + memory.model_mib,
                    "context_mib": previous.context_mib + memory.context_mib,
                    "compute_mib": previous.compute_mib + memory.compute_mib,
                }
            )
        result[key] = memory
    return result


def parse_fit_print(text: str) -> dict[str, DeviceMemory]:
    """``llama-fit-params --fit-print on``: one ``<device> <model> <context> <compute>`` line each (MiB)."""
    result: dict[str, DeviceMemory] = {}
    for line in text.splitlines():
        match = _FIT_PRINT.match(line)
        if match is None:
            continue
        key = device_key(match["device"])
        result[key] = DeviceMemory(
            device=key,
            model_mib=float(match["model"]),
            context_mib=float(match["context"]),
            compute_mib=float(match["compute"]),
        )
    return result


def parse_memory(text: str) -> dict[str, DeviceMemory]:
    """The most precise figures the text holds: buffer lines, else the breakdown, else fit-print."""
    for parse in (parse_buffer_lines, parse_breakdown, parse_fit_print):
        found = parse(text)
        if found:
            return found
    return {}


# ---------------------------------------------------------------------------------------------
# How llama.cpp reports host weights
# ---------------------------------------------------------------------------------------------

REPACKED_TYPES = frozenset(
    {GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_K, GGMLQuantizationType.IQ4_NL, GGMLQuantizationType.MXFP4}
)
"""Types the x86 CPU backend with AVX2 repacks (``CPU_REPACK``) when a CPU build keeps the tensor on
the host: matrix-multiplication weights (2-D, or 3-D expert stacks) whose row count is a multiple of
``REPACK_ROWS`` (ggml-cpu ``repack.cpp``; AVX-512 builds also repack Q2_K, ARM builds others)."""
REPACK_ROWS = 8


def _repacked(tensor: TensorInfo) -> bool:
    return (
        tensor.ggml_type in REPACKED_TYPES
        and len(tensor.shape) >= 2
        and tensor.shape[1] % REPACK_ROWS == 0
        and "token_embd" not in tensor.name
    )


def _on_host(tensor: TensorInfo, layout: Layout) -> bool:
    if tensor.name.startswith("blk."):
        return int(tensor.name.split(".")[1]) < layout.cpu_blocks
    if tensor.name.startswith(BLOCK0_PREFIXES):
        return layout.cpu_blocks > 0
    if tensor.name.startswith(OUTPUT_PREFIXES):
        return not layout.output_offloaded
    return True


def reported_host_weight_offset(
    header: GgufHeader,
    layout: Layout,
    *,
    repack: bool,
    projection: bool,
    mmap: bool,
    overridden: Collection[str] = (),
) -> int:
    """What llama.cpp's host ``model`` figure adds to the weights the host really holds (bytes).

    With mmap the ``CPU_Mapped`` buffer is the file range from the first to the last host tensor,
    so it also spans tensors that went to a GPU (``output.weight`` often sits between
    ``token_embd`` and ``blk.0``). A CPU build (``repack``) copies Q4_0/Q4_K tensors it keeps
    into ``CPU_REPACK``, outside that range; ``llama-fit-params`` (``projection``) leaves the
    repacked copies out of its ``Host`` figure. ``overridden`` names tensors that tensor overrides
    keep on the host although their block is on a GPU.
    """
    kept = frozenset(overridden)
    host = [t for t in header.tensors if t.name in kept or _on_host(t, layout)]
    logical = sum(t.n_bytes for t in host)
    repacked = [t for t in host if repack and _repacked(t)]
    plain = [t for t in host if t not in repacked]
    if projection:
        return sum(t.n_bytes for t in plain) - logical
    if not mmap or not plain:
        return 0
    span = max(t.data_offset + t.n_bytes for t in plain) - min(t.data_offset for t in plain)
    return span + sum(t.n_bytes for t in repacked) - logical
