"""GGUF header -> ModelShape -> MemoryProfile: what llama.cpp will allocate, without loading weights.

* ``read_gguf(path)`` reads a GGUF file's header and tensor table (all shards of a split model)
  and returns its ``ModelShape``; ``read_header`` gives the raw metadata and tensor table.
* ``estimate_profile(path_or_shape, params)`` turns a shape and llama.cpp options into the
  ``MemoryProfile`` the memory model (``layerfit.memory``) charges layouts with.
* ``profile_for(deployment)`` returns a deployment's own profile, or estimates it from its file.
"""

from layerfit.estimators.compute import Backend
from layerfit.estimators.estimate import estimate_profile, profile_for
from layerfit.estimators.gguf_reader import ArrayInfo, GgufHeader, TensorInfo, read_header
from layerfit.estimators.model_shape import ModelShape
from layerfit.estimators.runtime import RuntimeCosts
from layerfit.estimators.settings import Settings, resolve_settings
from layerfit.estimators.shape import read_gguf, shape_from_header

__all__ = [
    "ArrayInfo",
    "Backend",
    "GgufHeader",
    "ModelShape",
    "RuntimeCosts",
    "Settings",
    "TensorInfo",
    "estimate_profile",
    "profile_for",
    "read_gguf",
    "read_header",
    "resolve_settings",
    "shape_from_header",
]
