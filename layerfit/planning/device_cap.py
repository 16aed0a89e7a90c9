"""When llama.cpp's limit on the devices of one process (``domain.limits``) cut a deployment's search.

Every engine keeps layouts to ``MAX_DEVICES`` devices (``check.device_cap_reasons``). When nothing
fits and the cluster offered more GPUs to one layout than that, the plan says so with a typed
reason (``TOO_MANY_DEVICES``): more devices might have held the model, but llama.cpp would not
start with them. This counts GPUs, not memory: it names the limit as a cause, it does not prove
that lifting it would fit.
"""

from __future__ import annotations

from layerfit.domain.base import counted
from layerfit.domain.cluster import Cluster, Worker
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.limits import MAX_DEVICES
from layerfit.domain.plan import Reason, ReasonKind
from layerfit.domain.selection import whole_selection


def offered_devices(cluster: Cluster, deployment: Deployment, config: PlannerConfig, n_layers: int) -> int:
    """The most devices one layout could have but for the limit: a selection used whole has its
    GPUs; otherwise the best main worker's GPUs and, with distribution, at most ``max_rpc_servers``
    GPUs of other workers (within the selection when there is one), and no more than GPU layers."""
    if deployment.kind is ModelKind.IMAGE:
        return 1
    if deployment.params.tensor_split is not None:  # one device per share, at most MAX_DEVICES shares
        return len(deployment.params.tensor_split)
    refs = deployment.gpu_selection
    if refs is not None and whole_selection(deployment, config):
        return len(refs)
    selected = None if refs is None else {(ref.worker, ref.index) for ref in refs}

    def usable(worker: Worker) -> int:
        return sum(1 for gpu in worker.gpus if selected is None or (worker.name, gpu.index) in selected)

    counts = [usable(worker) for worker in cluster.workers]
    total = sum(counts)
    distributed = deployment.distributed_inference_across_workers
    best = max(
        (local + (min(config.max_rpc_servers, total - local) if distributed else 0) for local in counts), default=0
    )
    wanted = n_layers if deployment.params.n_gpu_layers is None else min(deployment.params.n_gpu_layers, n_layers)
    return min(best, wanted)


def device_cap_reason(
    cluster: Cluster, deployment: Deployment, config: PlannerConfig, n_layers: int
) -> Reason | None:
    """The typed reason of a search the limit cut (``None`` when no layout could exceed it)."""
    offered = offered_devices(cluster, deployment, config, n_layers)
    if offered <= MAX_DEVICES:
        return None
    message = (
        f"{counted(offered, 'GPUs')} could take part in one layout, but one llama.cpp process runs at most "
        f"{MAX_DEVICES} devices (RPC servers + local GPUs): no layout used more"
    )
    return Reason(kind=ReasonKind.TOO_MANY_DEVICES, message=message, resource="devices")
