"""Where a GPUStack model's GGUF files are, read from GPUStack 2.3.0's own ``Model`` fields.

GPUStack's selector runs gguf-parser on the source its ``Model.source`` names
(``scheduler/calculator.py``, ``_gguf_parser_command_args_from_source``): ``local_path``;
``huggingface`` (``huggingface_repo_id`` + ``huggingface_filename``); ``model_scope``
(``model_scope_model_id`` + ``model_scope_file_path``); any other source it refuses. For a hub
model it first lists the repository (``layerfit.remote.listing``): the file name may be a pattern
(the first match in sorted order is used), and the first ``*mmproj*.gguf`` (or the bare file name
a ``--mmproj`` backend parameter gives) is added as the multimodal projector. Here each becomes a
layerfit location (a path, ``hf://REPO/FILE``, ``ms://REPO/FILE``), read by its header.

Not supported, and said so: an Ollama library model (GPUStack 2.3.0 has no such source and
resolves none to a URL).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from layerfit.domain.base import Frozen
from layerfit.domain.cluster import Cluster
from layerfit.domain.params import LlamaParams
from layerfit.domain.profile import MemoryProfile, RoleCosts
from layerfit.errors import InputError
from layerfit.gpustack.fields import UNIFIED_MEMORY_GPU_TYPES, field
from layerfit.remote.listing import MS_LISTING_CAP, Listing, repo_files
from layerfit.remote.locations import Hub, check_repo, hub_location, is_pattern

_HUBS: dict[str, tuple[Hub, str, str]] = {
    "huggingface": ("hf", "huggingface_repo_id", "huggingface_filename"),
    "model_scope": ("ms", "model_scope_model_id", "model_scope_file_path"),
}
NO_SOURCE = "give profile= (a MemoryProfile or a function of the model) or gguf_path="
DEFAULT_PROJECTOR = "*mmproj*.gguf"
"""The projector GPUStack looks for in a GGUF model's repository (``schemas/models.py``,
``get_mmproj_filename``)."""


class ModelFiles(Frozen):
    """The GGUF files a GPUStack model runs with."""

    model: str
    """A path or a remote location."""
    mmproj: str | None = None
    """The projector found in the model's repository; ``None``: the backend parameters' own
    ``--mmproj``, if any."""


def _source(model: Any) -> str:
    value = field(model, "source", None)
    return str(getattr(value, "value", value) or "")


def model_files(model: Any) -> ModelFiles:
    """The GGUF files a GPUStack model names: a local path, or ``hf://``/``ms://`` locations found
    by listing its repository (network I/O: call it off the event loop). ``InputError`` naming the
    model and the field when it names none layerfit can read; ``EstimationError`` when the
    repository cannot be listed."""
    name = field(model, "name", "?")
    source = _source(model)
    if field(model, "ollama_library_model_name", None) is not None or source.startswith("ollama"):
        raise InputError(
            f"model {name}",
            "an Ollama library model is not supported: GPUStack 2.3.0 resolves no Ollama model to a GGUF"
            f" file (its selector refuses the source); {NO_SOURCE}",
        )
    if source in _HUBS:
        return _hub_files(model, name, source)
    path = field(model, "local_path", None)
    if source not in ("", "local_path"):
        expected = "expected local_path, huggingface or model_scope"
        raise InputError(f"model {name}.source", f"unknown source {source!r}: {expected}")
    if path is None or not os.path.exists(str(path)):
        problem = f"no memory profile and no readable GGUF file (local_path {path!r}); {NO_SOURCE}"
        raise InputError(f"model {name}", problem)
    return ModelFiles(model=str(path))


def _hub_files(model: Any, name: str, source: str) -> ModelFiles:
    hub, repo_field, file_field = _HUBS[source]
    repo, file = field(model, repo_field, None), field(model, file_field, None)
    for key, value in ((repo_field, repo), (file_field, file)):
        if not value:
            raise InputError(f"model {name}.{key}", f"missing for source {source}; {NO_SOURCE}")
    repo = check_repo(f"model {name}.{repo_field}", str(repo))
    listing = repo_files(hub, repo)
    chosen = _listed(listing, str(file), f"model {name}.{file_field}", repo)
    projector = _projector(model, name, listing, repo) if str(file).endswith(".gguf") else None
    return ModelFiles(
        model=hub_location(hub, repo, chosen),
        mmproj=None if projector is None else hub_location(hub, repo, projector),
    )


def _listed(listing: Listing, name: str, what: str, repo: str) -> str:
    """The file ``name`` (a pattern: its first match) in the listing; an exact name is used as
    written where the listing may be cut short (the header read says whether it exists)."""
    if not is_pattern(name) and (name in listing.files or not listing.complete):
        return name
    found = listing.first_match(name)
    if found is None:
        cut = "" if listing.complete else f" among the first {MS_LISTING_CAP:,} files the hub lists"
        problem = f"no file of {repo} matches {name!r}" if is_pattern(name) else f"{name!r} is not a file of {repo}"
        raise InputError(what, problem + cut)
    return found


def _projector(model: Any, name: str, listing: Listing, repo: str) -> str | None:
    """The projector GPUStack adds: the bare file name a ``--mmproj`` backend parameter gives, else
    the first ``*mmproj*.gguf`` of the repository; ``None`` for none (or a ``--mmproj`` path,
    which stays as given)."""
    given = _given_projector(field(model, "backend_parameters", None))
    if given is not None and os.path.basename(given) != given:
        return None
    if given is None:
        return listing.first_match(DEFAULT_PROJECTOR)
    return _listed(listing, given, f"model {name}.backend_parameters --mmproj", repo)


def _given_projector(backend_parameters: Any) -> str | None:
    if isinstance(backend_parameters, str | bytes) or not isinstance(backend_parameters, Sequence):
        return None  # deployment_from_gpustack names the problem
    try:
        return LlamaParams.from_args([str(item) for item in backend_parameters]).mmproj
    except InputError:
        return None  # as above


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
