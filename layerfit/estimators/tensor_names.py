"""Tensor names llama.cpp's loader creates: every architecture's, and each modelled architecture's.

llama.cpp creates the tensors its architecture's ``load_arch_tensors`` names and then refuses a file
holding any other ("done_getting_tensors: wrong number of tensors; expected N, got N-1"). Two checks,
from b11434's source (``LLM_TENSOR_NAMES`` in ``src/llama-arch.cpp``, ``src/models/*.cpp``; the tables
are printed by ``benchmarks/tensor_names_source.py`` and were checked by hand):

* every architecture: a name that is no pattern of ``LLM_TENSOR_NAMES`` (``%d`` a decimal number) with
  one of the suffixes the loader passes (``SUFFIXES``, or none) is refused;
* the modelled architectures (``ARCH_TENSORS``): a name the architecture's model file never names, in
  any branch (optional tensors, the ``create_tensor_qkv``/``create_tensor_gate_up_exps`` helpers and
  the graph code included), is refused; ``load_tensors``' generic pass adds ``.scale`` and
  ``.input_scale`` to the weights of ``SCALED`` and to ``output``.

A name an architecture creates only in some blocks or under some hyperparameters is allowed in every
block: false refusals cost more than false acceptances.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from layerfit.errors import EstimationError
from layerfit.estimators.header_access import TensorGroups
from layerfit.estimators.tensor_name_tables import ARCH_TENSORS, PATTERNS, SCALED, SUFFIXES

if TYPE_CHECKING:
    from layerfit.estimators.model_shape import ModelShape

_NUMBER = re.compile(r"(?<![^.])[0-9]+(?![^.])")


def pattern(name: str) -> str:
    """The name with every dot-separated decimal number as ``%d`` (``blk.%d.attn_q.weight`` for block 3's)."""
    return _NUMBER.sub("%d", name)


def known_to_llama_cpp(name: str) -> bool:
    """A name some llama.cpp architecture may create: an ``LLM_TENSOR_NAMES`` pattern, bare or suffixed."""
    full = pattern(name)
    base, _, suffix = full.rpartition(".")
    return full in PATTERNS or (suffix in SUFFIXES and base in PATTERNS)


def created_by(arch: str, name: str) -> bool:
    """A name the architecture's loader may create (always, for an architecture without a table)."""
    made = ARCH_TENSORS.get(arch)
    if made is None:
        return True
    full = pattern(name)
    base, _, suffix = full.rpartition(".")
    scaled = suffix in ("scale", "input_scale") and base in SCALED
    return full in made or (scaled and (base == "output" or f"{base}.weight" in made))


def check_tensor_names(shape: ModelShape, tensors: TensorGroups) -> None:
    """Refuse, naming the tensor, one no llama.cpp loader creates, or (for a modelled architecture) one
    the architecture's loader never creates."""
    arch = shape.architecture
    for name in (tensor.name for tensor in tensors.all()):
        if not known_to_llama_cpp(name):
            problem = "no llama.cpp architecture has a tensor of this name"
        elif not created_by(arch, name):
            problem = f"llama.cpp's {arch} loader never creates this tensor"
        else:
            continue
        reason = f"{problem} and refuses a file that has one (wrong number of tensors)"
        raise EstimationError(shape.path, name, reason)
