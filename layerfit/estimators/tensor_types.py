"""Tensor types llama.cpp loads and then cannot compute with, on any backend.

llama.cpp takes a tensor of any ggml type at load and fails at the first decode when no backend
runs the operation the graph gives it (b11434's source, measured with its CPU build by
``benchmarks/loader_diff.py``):

* norms and biases are multiplied with or added to F32 activations (``GGML_OP_MUL``/``ADD``): the
  CPU backend computes that for an F32 second operand only and aborts otherwise ("binary_op:
  unsupported types"); CUDA also takes F16, no backend a quantized or integer type, so one of those
  is refused (F16 and BF16 are left alone: some backends run them);
* a weight matrix in an integer type or F64 (``I8`` to ``I64``) is multiplied (``GGML_OP_MUL_MAT``):
  no backend has that product and the CPU build crashes in the first decode. The embedding tables
  are looked up by row (``GET_ROWS``), not multiplied, and are left alone.

Files written by llama.cpp's converters and ``llama-quantize`` keep one-dimensional tensors in F32
and matrices in float or quantized types, so this refuses only files made otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerfit.errors import EstimationError
from layerfit.estimators.gguf_constants import GGMLQuantizationType as T

if TYPE_CHECKING:
    from layerfit.estimators.gguf_types import TensorInfo
    from layerfit.estimators.header_access import TensorGroups
    from layerfit.estimators.model_shape import ModelShape

ELEMENTWISE_TYPES = frozenset({T.F32, T.F16, T.BF16})
"""Types a norm or bias may have: F32 everywhere, F16 and BF16 on some backends."""
NO_PRODUCT_TYPES = frozenset({T.I8, T.I16, T.I32, T.I64, T.F64})
"""Types no backend multiplies a matrix in."""
LOOKUP_TABLES = frozenset(
    {"token_embd.weight", "per_layer_token_embd.weight", "token_types.weight", "position_embd.weight"}
)
"""Matrices llama.cpp reads rows of, never multiplies."""


def check_tensor_types(shape: ModelShape, tensors: TensorGroups) -> None:
    """Refuse, naming the tensor, a norm or bias in a type no backend adds or multiplies with F32
    activations, and a weight matrix in a type no backend multiplies."""
    for tensor in tensors.all():
        problem = type_problem(tensor)
        if problem is not None:
            raise EstimationError(shape.path, tensor.name, problem)


def type_problem(tensor: TensorInfo) -> str | None:
    """Why llama.cpp cannot compute with the tensor in its type, or ``None``."""
    kind = tensor.ggml_type
    if elementwise(tensor.name) and kind not in ELEMENTWISE_TYPES:
        return (
            f"a norm or bias in {kind.name}: llama.cpp adds or multiplies it with F32 activations, which no "
            "backend does for that type (the CPU build aborts in the first decode: binary_op: unsupported types)"
        )
    if multiplied(tensor) and kind in NO_PRODUCT_TYPES:
        return (
            f"a weight matrix in {kind.name}: no llama.cpp backend multiplies a matrix of that type "
            "(the CPU build crashes in the first decode)"
        )
    return None


def elementwise(name: str) -> bool:
    """A bias, or a norm's weight: what the graph adds to or multiplies with activations."""
    base, _, suffix = name.rpartition(".")
    return suffix == "bias" or (suffix == "weight" and base.endswith("norm"))


def multiplied(tensor: TensorInfo) -> bool:
    """A weight matrix the graph multiplies activations by (not an embedding table)."""
    return (
        tensor.name.endswith(".weight")
        and sum(1 for size in tensor.shape if size > 1) >= 2
        and tensor.name not in LOOKUP_TABLES
        and not elementwise(tensor.name)
        and "conv" not in tensor.name  # convolutions (SSM, ...): another operation, not measured
    )
