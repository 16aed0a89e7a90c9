"""layerfit candidates in GPUStack's ``ModelInstanceScheduleCandidate`` shape: dicts, or GPUStack's
own objects when ``gpustack`` can be imported."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerfit.domain.cluster import Cluster
from layerfit.domain.layout import Claims, Layout
from layerfit.domain.plan import Candidate
from layerfit.gpustack.fields import field
from layerfit.memory import tensor_split_counts


def _gpu_addresses(worker: Any, indexes: list[int]) -> list[str] | None:
    """Addresses of the GPUs' own network links (Ascend-style), when the worker reports any."""
    addresses = []
    for device in field(worker, "status.gpu_devices", []) or []:
        if field(device, "index", None) not in indexes:
            continue
        if field(device, "network.status", "") == "up" and field(device, "network.inet", ""):
            addresses.append(str(field(device, "network.inet")))
    return addresses or None


def _claim(
    claims: Claims, layout: Layout, worker: str, gpu_indexes: list[int], layers: int, unified: bool
) -> dict[str, Any]:
    worker_claim = claims.worker(worker)
    return {
        "is_unified_memory": unified,
        "offload_layers": layers,
        "total_layers": layout.n_blocks + 1,
        "vram": {index: claims.vram_bytes(worker, index) for index in gpu_indexes},
        "ram": 0 if worker_claim is None else worker_claim.ram_bytes,
    }


def candidate_dict(candidate: Candidate, cluster: Cluster, gpustack_workers: Mapping[str, Any]) -> dict[str, Any]:
    """One layout as a dict with ``ModelInstanceScheduleCandidate``'s fields.

    ``tensor_split`` holds integer layer counts per device in llama.cpp order (RPC servers first),
    which llama.cpp reads as proportions; ``None`` for a single device.
    """
    layout, claims = candidate.layout, candidate.claims
    main = cluster.worker(layout.main_worker)
    main_source = gpustack_workers[main.name]
    local = [device.gpu_index for device in layout.local_devices]
    main_claim = _claim(claims, layout, main.name, local, layout.gpu_layers, main.unified_memory)
    main_claim["tensor_split"] = list(tensor_split_counts(layout)) if len(layout.devices) > 1 else None
    subordinates = []
    output_on_last = layout.output_offloaded
    for position, device in enumerate(layout.rpc_devices):
        worker = cluster.worker(device.worker)
        source = gpustack_workers[worker.name]
        holds_output = output_on_last and position == len(layout.devices) - 1
        claim = _claim(claims, layout, worker.name, [device.gpu_index], device.blocks + holds_output, False)
        claim["is_unified_memory"] = worker.unified_memory
        subordinates.append(
            {
                "worker_id": worker.id,
                "worker_name": worker.name,
                "worker_ip": worker.address,
                "worker_ifname": field(source, "ifname", None),
                "total_gpus": len(worker.gpus),
                "gpu_type": worker.gpu(device.gpu_index).type,
                "gpu_indexes": [device.gpu_index],
                "gpu_addresses": _gpu_addresses(source, [device.gpu_index]) or [],
                "computed_resource_claim": claim,
            }
        )
    return {
        "worker": main_source,
        "gpu_indexes": local or None,
        "gpu_type": main.gpu(local[0]).type if local else None,
        "gpu_addresses": _gpu_addresses(main_source, local),
        "computed_resource_claim": main_claim,
        "score": candidate.score,
        "overcommit": False,
        "subordinate_workers": subordinates or None,
    }


def gpustack_available() -> bool:
    """Whether GPUStack's own candidate types can be imported here."""
    try:
        import gpustack.policies.base  # noqa: F401
    except ImportError:
        return False
    return True


def to_gpustack_object(candidate: Mapping[str, Any]) -> Any:
    """A candidate dict as GPUStack's own ``ModelInstanceScheduleCandidate`` (needs ``gpustack``)."""
    from gpustack.policies.base import ModelInstanceScheduleCandidate
    from gpustack.schemas.models import ComputedResourceClaim, ModelInstanceSubordinateWorker

    subordinates = candidate["subordinate_workers"]
    return ModelInstanceScheduleCandidate(
        worker=candidate["worker"],
        gpu_indexes=candidate["gpu_indexes"],
        computed_resource_claim=ComputedResourceClaim(**candidate["computed_resource_claim"]),
        gpu_type=candidate["gpu_type"],
        gpu_addresses=candidate["gpu_addresses"],
        score=candidate["score"],
        overcommit=candidate["overcommit"],
        subordinate_workers=None
        if subordinates is None
        else [
            ModelInstanceSubordinateWorker(
                **{**sub, "computed_resource_claim": ComputedResourceClaim(**sub["computed_resource_claim"])}
            )
            for sub in subordinates
        ],
    )
