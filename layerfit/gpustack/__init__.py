"""layerfit inside GPUStack: GPUStack's objects in, GPUStack's candidates out.

``LayerfitGGUFSelector`` has the constructor and calls of GPUStack's ``GGUFResourceFitSelector``;
``schedule_candidates`` is the same as a plain function returning dicts and the full plan. Nothing
here needs ``gpustack`` installed; with it, candidates are GPUStack's own objects.
"""

from layerfit.gpustack.candidates import candidate_dict, gpustack_available, to_gpustack_object
from layerfit.gpustack.fields import field
from layerfit.gpustack.inputs import (
    cluster_from_gpustack,
    config_from_gpustack,
    deployment_from_gpustack,
    selected_gpus,
    worker_allocation,
    worker_from_gpustack,
)
from layerfit.gpustack.resources import Allocation, allocatable, allocated_by_instances
from layerfit.gpustack.selector import LayerfitGGUFSelector, schedule_candidates

__all__ = [
    "Allocation",
    "LayerfitGGUFSelector",
    "allocatable",
    "allocated_by_instances",
    "candidate_dict",
    "cluster_from_gpustack",
    "config_from_gpustack",
    "deployment_from_gpustack",
    "field",
    "gpustack_available",
    "schedule_candidates",
    "selected_gpus",
    "to_gpustack_object",
    "worker_allocation",
    "worker_from_gpustack",
]
