"""Compute by the layer kinds a device holds: the one place that looks them up.

A device's compute buffer depends on which kinds of layer its blocks include: the masks of the
attention kinds it runs (4 copies each when a full offload spans several devices), a recurrent
layer's scan, the experts' activations, the feed-forward. ``range_kinds`` gives the kinds of a
block range, ``kinds_entry`` the profile's figures for them; without either the role costs apply,
which are the upper bound over every kind (what the solver's linear encoding uses).
"""

from __future__ import annotations

from functools import reduce
from operator import or_

from layerfit.domain.profile import KindsCompute, MemoryProfile


def range_kinds(profile: MemoryProfile, first: int, end: int) -> int | None:
    """The union of the kinds of blocks ``first .. end-1``; ``None``: not modelled or no block."""
    if profile.block_kinds is None or end <= first:
        return None
    return reduce(or_, profile.block_kinds[first:end], 0)


def kinds_entry(profile: MemoryProfile, kinds: int | None) -> KindsCompute | None:
    """The profile's compute figures for a device holding only these kinds, if it has them."""
    if kinds is None:
        return None
    return next((entry for entry in profile.kinds_compute if entry.kinds == kinds), None)


def keeps_scan(profile: MemoryProfile, first: int, end: int) -> bool | None:
    """Whether a device holding blocks ``first .. end-1`` of a multi-device full offload keeps a
    recurrent scan: one of its boundaries falls between two recurrent blocks without attention
    (measured: granitehybrid, mamba2, jamba; elsewhere llama.cpp's buffers hold none). ``None``:
    not modelled (the profile has no scan, or no blocks)."""
    if not profile.scan_bytes or end <= first:
        return None
    return first in profile.scan_crossings or end in profile.scan_crossings
