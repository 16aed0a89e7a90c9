"""Where a GPUStack model's GGUF file is, read from GPUStack 2.3.0's own ``Model`` fields.

GPUStack's selector runs gguf-parser on the source its ``Model.source`` names
(``scheduler/calculator.py``, ``_gguf_parser_command_args_from_source``): ``local_path``;
``huggingface`` (``huggingface_repo_id`` + ``huggingface_filename``); ``model_scope``
(``model_scope_model_id`` + ``model_scope_file_path``); any other source it refuses. Here each
becomes a layerfit location (a path, ``hf://REPO/FILE``, ``ms://REPO/FILE``), read by its header.

Not supported, and said so: an Ollama library model (GPUStack 2.3.0 has no such source and
resolves none to a URL), and a file name that is a pattern (GPUStack picks the first match of a
repository listing; layerfit needs the file named).
"""

from __future__ import annotations

import os
from typing import Any

from layerfit.domain.cluster import Cluster
from layerfit.domain.profile import MemoryProfile, RoleCosts
from layerfit.errors import InputError
from layerfit.gpustack.fields import UNIFIED_MEMORY_GPU_TYPES, field
from layerfit.remote.locations import Hub, hub_location, is_pattern

_HUBS: dict[str, tuple[Hub, str, str]] = {
    "huggingface": ("hf", "huggingface_repo_id", "huggingface_filename"),
    "model_scope": ("ms", "model_scope_model_id", "model_scope_file_path"),
}
NO_SOURCE = "give profile= (a MemoryProfile or a function of the model) or gguf_path="


def _source(model: Any) -> str:
    value = field(model, "source", None)
    return str(getattr(value, "value", value) or "")


def model_location(model: Any) -> str:
    """The GGUF file a GPUStack model names: a local path or an ``hf://``/``ms://`` location.
    ``InputError`` naming the model and the field when it names none layerfit can read."""
    name = field(model, "name", "?")
    source = _source(model)
    if field(model, "ollama_library_model_name", None) is not None or source.startswith("ollama"):
        raise InputError(
            f"model {name}",
            "an Ollama library model is not supported: GPUStack 2.3.0 resolves no Ollama model to a GGUF"
            f" file (its selector refuses the source); {NO_SOURCE}",
        )
    if source in _HUBS:
        hub, repo_field, file_field = _HUBS[source]
        repo, file = field(model, repo_field, None), field(model, file_field, None)
        for key, value in ((repo_field, repo), (file_field, file)):
            if not value:
                raise InputError(f"model {name}.{key}", f"missing for source {source}; {NO_SOURCE}")
        if is_pattern(str(file)):
            raise InputError(
                f"model {name}.{file_field}",
                f"{file!r} is a pattern: GPUStack takes the first match of the repository's listing, layerfit"
                f" needs the file named; {NO_SOURCE}",
            )
        return hub_location(hub, str(repo), str(file))
    path = field(model, "local_path", None)
    if source not in ("", "local_path"):
        expected = "expected local_path, huggingface or model_scope"
        raise InputError(f"model {name}.source", f"unknown source {source!r}: {expected}")
    if path is None or not os.path.exists(str(path)):
        problem = f"no memory profile and no readable GGUF file (local_path {path!r}); {NO_SOURCE}"
        raise InputError(f"model {name}", problem)
    return str(path)


def with_unified_costs(profile: MemoryProfile, cluster: Cluster) -> MemoryProfile:
    """The profile with its own costs for the cluster's unified-memory GPUs, where they differ.

    GPUStack charges a unified-memory worker its gguf-parser ``uma`` figures, which leave out the
    per-process GPU runtime footprint that its ``nonuma`` figures add. On Apple GPUs (``mps``)
    there is no CUDA context or cuBLAS workspace: their fixed cost is 0, their compute buffers stay
    (llama.cpp allocates them in the shared memory; gguf-parser's ``uma`` figure leaves them out).
    A unified worker with a CUDA GPU (GB10, Jetson) runs CUDA: it keeps the discrete costs, as does
    a profile that already has ``unified`` costs.
    """
    unified = [worker for worker in cluster.workers if worker.unified_memory]
    if profile.unified is not None or not unified:
        return profile
    if not all(gpu.type in UNIFIED_MEMORY_GPU_TYPES for worker in unified for gpu in worker.gpus):
        return profile
    return profile.model_copy(update={"unified": RoleCosts(fixed_bytes=0, compute=profile.main.compute)})
