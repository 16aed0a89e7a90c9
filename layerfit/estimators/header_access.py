"""Typed reads of a GGUF header: its metadata keys and its tensor table grouped by block.

``MetaReader`` reads ``{arch}``-templated keys with their types checked (a wrong type or a missing
required key raises ``EstimationError`` naming the key); ``TensorGroups`` sorts the tensor table
into blocks, host-side inputs and the output layer. ``shape.shape_from_header`` builds on both.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from layerfit.errors import EstimationError
from layerfit.estimators.gguf_reader import ArrayInfo, MetaValue, TensorInfo

BLOCK_PREFIX = re.compile(r"^blk\.(\d+)\.")
EXPERT_TENSOR = re.compile(r"^ffn_(up|down|gate|gate_up)_(ch|)exps")
"""A block's routed-expert tensors, named after ``blk.N.``: llama.cpp's ``LLM_FFN_EXPS_REGEX``."""
OUTPUT_PREFIXES = ("output.", "output_norm.", "cls.", "altup_proj.", "altup_unembd_proj.")
"""Tensors llama.cpp loads with the output layer (gemma3n's AltUp projections among them)."""
BLOCK0_PREFIXES = ("per_layer_model_proj.", "per_layer_proj_norm.")
"""Tensors without a block number that llama.cpp files as repeating-layer tensors of block 0."""


# ---------------------------------------------------------------------------------------------
# Typed metadata access
# ---------------------------------------------------------------------------------------------


class MetaReader:
    """Typed reads of metadata keys; a wrong type raises ``EstimationError`` naming the key."""

    def __init__(self, path: str, metadata: Mapping[str, MetaValue], arch: str) -> None:
        self.path = path
        self.metadata = metadata
        self.arch = arch

    def key(self, template: str) -> str:
        return template.format(arch=self.arch)

    def has(self, template: str) -> bool:
        return self.key(template) in self.metadata

    def integer(self, template: str, default: int | None = None) -> int:
        key = self.key(template)
        value = self.metadata.get(key)
        if value is None:
            if default is None:
                raise EstimationError(self.path, key, "required key missing")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise EstimationError(self.path, key, f"expected an integer, got {describe(value)}")
        if value < 0:
            raise EstimationError(self.path, key, f"expected a non-negative integer, got {value}")
        return value

    def flag(self, template: str, default: bool) -> bool:
        key = self.key(template)
        value = self.metadata.get(key, default)
        if not isinstance(value, bool | int):
            raise EstimationError(self.path, key, f"expected a boolean, got {describe(value)}")
        return bool(value)

    def text(self, template: str) -> str | None:
        value = self.metadata.get(self.key(template))
        return value if isinstance(value, str) else None

    def per_layer(self, template: str, n: int, default: int | None) -> tuple[int, ...]:
        """A scalar broadcast to every layer, or an array with one value per layer."""
        key = self.key(template)
        value = self.metadata.get(key)
        if isinstance(value, tuple):
            if len(value) != n:
                raise EstimationError(self.path, key, f"has {len(value)} entries for {n} blocks")
            if not all(isinstance(item, int) and item >= 0 for item in value):  # booleans read as 0 and 1
                raise EstimationError(self.path, key, "expected non-negative integers")
            return tuple(int(item) for item in value)
        if isinstance(value, ArrayInfo):
            raise EstimationError(self.path, key, f"array of {value.length} entries for {n} blocks")
        return (self.integer(template, default),) * n

    def pattern(self, template: str) -> int | tuple[bool, ...] | None:
        key = self.key(template)
        value = self.metadata.get(key)
        if value is None:
            return None
        if isinstance(value, tuple):
            return tuple(bool(item) for item in value)
        if isinstance(value, int):
            return int(value)
        raise EstimationError(self.path, key, f"expected a period or one flag per layer, got {describe(value)}")


def describe(value: MetaValue) -> str:
    if isinstance(value, ArrayInfo):
        return f"an array of {value.length} {value.item_type.name} items"
    return f"{type(value).__name__} {value!r}"


# ---------------------------------------------------------------------------------------------
# Tensor table
# ---------------------------------------------------------------------------------------------


class TensorGroups:
    """The tensor table grouped into blocks, host-side inputs and the output layer."""

    def __init__(self, tensors: tuple[TensorInfo, ...], n_blocks: int) -> None:
        self.blocks: list[dict[str, TensorInfo]] = [{} for _ in range(n_blocks)]
        self.inputs: dict[str, TensorInfo] = {}
        self.outputs: dict[str, TensorInfo] = {}
        self.stray: list[str] = []
        for tensor in tensors:
            match = BLOCK_PREFIX.match(tensor.name)
            if match is not None:
                index = int(match[1])
                if index < n_blocks:
                    self.blocks[index][tensor.name[match.end() :]] = tensor
                    continue
                self.stray.append(tensor.name)
                self.inputs[tensor.name] = tensor
            elif tensor.name.startswith(OUTPUT_PREFIXES):
                self.outputs[tensor.name] = tensor
            elif tensor.name.startswith(BLOCK0_PREFIXES) and n_blocks:
                self.blocks[0][tensor.name] = tensor
            else:
                self.inputs[tensor.name] = tensor

    def all(self) -> Iterator[TensorInfo]:
        """Every tensor of the table: the inputs, the outputs, then block by block."""
        yield from self.inputs.values()
        yield from self.outputs.values()
        for block in self.blocks:
            yield from block.values()

    def block_bytes(self) -> tuple[int, ...]:
        return tuple(sum(t.n_bytes for t in block.values()) for block in self.blocks)

    def expert_bytes(self) -> tuple[int, ...]:
        return tuple(sum(t.n_bytes for name, t in block.items() if EXPERT_TENSOR.match(name)) for block in self.blocks)

    def matrix_elements(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Per block, the elements of its weight matrices (2-D or more): those every token uses, and
        the routed experts' (all experts together)."""
        dense, experts = [], []
        for block in self.blocks:
            sizes = [(EXPERT_TENSOR.match(name) is not None, _elements(t)) for name, t in block.items() if _matrix(t)]
            dense.append(sum(size for expert, size in sizes if not expert))
            experts.append(sum(size for expert, size in sizes if expert))
        return tuple(dense), tuple(experts)

    def dim(self, block: int, name: str, axis: int) -> int:
        tensor = self.blocks[block].get(name) if block < len(self.blocks) else None
        return tensor.shape[axis] if tensor is not None and len(tensor.shape) > axis else 0

    def ffn_width(self, block: int, fused_gate_up: bool) -> int:
        dense = self.dim(block, "ffn_up.weight", 1) or self.dim(block, "ffn_gate.weight", 1)
        if fused_gate_up and "ffn_gate.weight" not in self.blocks[block]:
            dense //= 2  # gate and up stacked in ffn_up: the feed-forward is half as wide
        return dense + self.dim(block, "ffn_up_shexp.weight", 1)


def _matrix(tensor: TensorInfo) -> bool:
    """A weight matrix the graph multiplies by (not a norm, bias or scale vector)."""
    return len(tensor.shape) >= 2 and tensor.name.endswith(".weight")


def _elements(tensor: TensorInfo) -> int:
    count = 1
    for extent in tensor.shape:
        count *= extent
    return count


def output_matrix_elements(tensor: TensorInfo | None) -> int:
    """The elements of the output projection (or of the token embedding it ties to)."""
    return _elements(tensor) if tensor is not None and _matrix(tensor) else 0
