"""Symmetry breaking keeps every layout's memory: ``canonical_layout`` and the class order.

The symmetric model orders interchangeable devices by class and ``canonical_layout`` maps a layout
onto that order; both rest on a swap of two devices (with their blocks) changing no GPU's figures.
The first device of a full offload over several devices carries its own compute
(``first_device_compute_bytes``), so it stays in place: the canonical form of every layout of a
small random cluster gives the same VRAM to GPUs of the same size. (Before, a layout with a smaller
GPU first was hinted as one with that GPU moved behind, and lost its figures:
``test_solver_known_layouts``.)
"""

from __future__ import annotations

from itertools import islice

from hypothesis import given, settings
from hypothesis import strategies as st
from test_solver_properties import SLOW, all_layouts, clusters, profiles

from layerfit.domain import (
    Cluster,
    Deployment,
    Layout,
    MemoryProfile,
    MiB,
    PlannerConfig,
)
from layerfit.memory import claims
from layerfit.solver.model.canonical import canonical_layout
from layerfit.solver.model.instance import build_instance


def _memory(where: Cluster, profile: MemoryProfile, layout: Layout) -> list[tuple[int, int]]:
    """Each device's (GPU size, VRAM claimed), sorted: what a swap of interchangeable GPUs keeps."""
    sizes = {(w.name, g.index): g.allocatable_vram_bytes for w in where.workers for g in w.gpus}
    unified = frozenset(w.name for w in where.workers if w.unified_memory)
    needed = claims(profile, layout, unified)
    return sorted((sizes[d.worker, d.gpu_index], d.total_bytes) for d in needed.devices)


@settings(SLOW, max_examples=60)
@given(data=st.data())
def test_the_canonical_form_of_a_layout_keeps_its_memory(data: st.DataObject) -> None:
    profile = data.draw(profiles(max_blocks=3, unit=MiB))
    profile = profile.model_copy(update={"first_device_compute_bytes": data.draw(st.integers(0, 2)) * 64 * MiB})
    where = data.draw(clusters(max_gpus=4, max_workers=3, top=400, unit=MiB))
    dep = Deployment(name="d", profile=profile, distributed_inference_across_workers=True)
    instance = build_instance(where, dep, profile, PlannerConfig())
    for layout in islice(all_layouts(where, profile.n_blocks), 400):
        if any(instance.class_of(d.worker, d.gpu_index) is None for d in layout.devices):
            continue  # a GPU the model leaves out (no VRAM): the layout is not one of its solutions
        canonical = canonical_layout(instance, layout)
        assert _memory(where, profile, canonical) == _memory(where, profile, layout), (layout, canonical)
