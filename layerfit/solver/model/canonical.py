"""Map a layout onto the equivalent one that the symmetry-breaking constraints keep.

Used to turn the heuristic's layout into a hint the symmetric model accepts: identical workers
are renamed so that the main one, then the rpc-server ones, come first in cluster order; with
blocks all alike and no ``-ts``, interchangeable devices are sorted by class.
"""

from __future__ import annotations

from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.solver.model.constraints.symmetry import ordered_from
from layerfit.solver.model.instance import Instance


def canonical_layout(instance: Instance, layout: Layout) -> Layout:
    """An equivalent layout (same memory on every device and worker) in canonical form."""
    renamed = _rename_twins(instance, layout)
    if instance.interchangeable_devices:
        return _sort_interchangeable(instance, renamed)
    return renamed


def _twin_groups(instance: Instance) -> list[list[int]]:
    groups: dict[int, list[int]] = {}
    for w, _view in enumerate(instance.workers):
        root = w
        while instance.workers[root].twin_of is not None:
            twin = instance.workers[root].twin_of
            assert twin is not None
            root = twin
        groups.setdefault(root, []).append(w)
    return [members for members in groups.values() if len(members) > 1]


def _rename_twins(instance: Instance, layout: Layout) -> Layout:
    names = [view.name for view in instance.workers]
    rpc_workers = [device.worker for device in layout.rpc_devices]
    mapping: dict[str, int] = {}
    for members in _twin_groups(instance):

        def rank(w: int) -> tuple[int, int]:
            name = names[w]
            if name == layout.main_worker:
                return (0, 0)
            if name in rpc_workers:
                return (1, rpc_workers.index(name))
            return (2, w)

        for target, source in zip(members, sorted(members, key=rank), strict=True):
            mapping[names[source]] = target
    if not mapping:
        return layout

    def rename(device: DeviceAssignment) -> DeviceAssignment:
        target = mapping.get(device.worker)
        source = instance.worker_index(device.worker)
        if target is None or source is None:
            return device
        for c_source, c_target in zip(instance.workers[source].classes, instance.workers[target].classes, strict=True):
            indexes = instance.classes[c_source].gpu_indexes
            if device.gpu_index in indexes:
                index = instance.classes[c_target].gpu_indexes[indexes.index(device.gpu_index)]
                return DeviceAssignment(worker=names[target], gpu_index=index, blocks=device.blocks)
        return device

    main_target = mapping.get(layout.main_worker)
    return Layout(
        main_worker=layout.main_worker if main_target is None else names[main_target],
        n_blocks=layout.n_blocks,
        devices=tuple(rename(device) for device in layout.devices),
        output_offloaded=layout.output_offloaded,
        host_expert_blocks=layout.host_expert_blocks,
    )


def _sort_interchangeable(instance: Instance, layout: Layout) -> Layout:
    def key(device: DeviceAssignment) -> int:
        c = instance.class_of(device.worker, device.gpu_index)
        return len(instance.classes) if c is None else c

    rpc, local = list(layout.rpc_devices), list(layout.local_devices)
    skip = ordered_from(instance)  # the first device kept in place when it has a cost of its own
    if local:
        rpc[skip:] = sorted(rpc[skip:], key=key)
        local[skip:-1] = sorted(local[skip:-1], key=key)
    elif rpc:
        rpc[skip:-1] = sorted(rpc[skip:-1], key=key)
    return Layout(
        main_worker=layout.main_worker,
        n_blocks=layout.n_blocks,
        devices=(*rpc, *local),
        output_offloaded=layout.output_offloaded,
    )
