"""The manual GPU selection and the ``-ts`` that applies with it: one reading for every engine.

A selection is never left: every device of a layout is a selected GPU and its main worker a
selected worker. By default (GPUStack's rule) the selection is the set of GPUs to use, all of
them; ``PlannerConfig.selection_is_pool`` makes it a pool to choose from. A ``-ts`` maps onto the
layout's devices in llama.cpp order; a device it leaves without a layer at a low ``-ngl`` is idle,
not one of them (``memory.used_device_blocks``), except over a selection used whole. Over a
selection used whole, llama.cpp is given exactly the selected GPUs and reads only as many shares
as it has devices, so extra shares are dropped; when the shares it reads are all zero it splits
by free memory, as without ``-ts``. With no layer on a
GPU llama.cpp ignores ``-ts``, so a split alone never rules out a CPU-only layout; a selection
used whole does, with or without a split (as without one: its GPUs are the ones to use).
"""

from __future__ import annotations

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Reason, ReasonKind


def whole_selection(deployment: Deployment, config: PlannerConfig) -> bool:
    """The deployment has a selection and every selected GPU must be used."""
    return deployment.gpu_selection is not None and not config.selection_is_pool


def tensor_split_in_force(deployment: Deployment, config: PlannerConfig) -> tuple[float, ...] | None:
    """The user's ``-ts`` as llama.cpp reads it over the devices it is given (``None``: no split)."""
    shares = deployment.params.tensor_split
    if shares is None:
        return None
    if whole_selection(deployment, config) and deployment.gpu_selection is not None:
        shares = shares[: len(deployment.gpu_selection)]
    return shares if any(share > 0 for share in shares) else None


def selection_reasons(
    cluster: Cluster, deployment: Deployment, layout: Layout, config: PlannerConfig
) -> tuple[Reason, ...]:
    """Devices or a main worker outside the selection, and selected GPUs left unused."""
    refs = deployment.gpu_selection
    if refs is None:
        return ()
    selected = {(ref.worker, ref.index) for ref in refs}
    reasons = [
        Reason(
            kind=ReasonKind.SELECTION_IGNORED,
            message=f"GPU {cluster.gpu_id(device.worker, device.gpu_index)} is used but not in the manual selection",
            worker=device.worker,
            gpu_index=device.gpu_index,
        )
        for device in layout.devices
        if (device.worker, device.gpu_index) not in selected
    ]
    if layout.main_worker not in deployment.selected_workers:
        reasons.append(
            Reason(
                kind=ReasonKind.SELECTION_IGNORED,
                message=f"main worker {layout.main_worker} has no selected GPU",
                worker=layout.main_worker,
            )
        )
    split = tensor_split_in_force(deployment, config)
    if not whole_selection(deployment, config):
        return tuple(reasons)
    if split is None and len(layout.devices) != len(selected):
        reasons.append(
            Reason(
                kind=ReasonKind.SELECTION_IGNORED,
                resource="gpu_selection",
                message=f"the layout uses {len(layout.devices)} of the {len(selected)} selected GPUs; every selected "
                "GPU is used unless the planner's selection_is_pool is set",
            )
        )
    elif split is not None and not layout.devices:  # a wrong non-zero device count is the split's reason
        reasons.append(
            Reason(
                kind=ReasonKind.SELECTION_IGNORED,
                resource="gpu_selection",
                message=f"the layout uses none of the {len(selected)} selected GPUs; with --tensor-split it uses one "
                "per non-zero share, unless the planner's selection_is_pool is set",
            )
        )
    return tuple(reasons)
