"""Comparing both sides of ``gpustack_diff.py``: the kinds of divergence, the documented difference
(README, "Differences from GPUStack's selector") that explains a divergent scenario, and its
description for ``--verbose``."""

from __future__ import annotations

from gpustack.policies.resource_view import ResourceView
from gpustack_diff_scenarios import Scenario, gpustack_instance
from gpustack_diff_sides import Normal, Outcome
from vs_gpustack import gpustack_worker

from layerfit.domain import GiB
from layerfit.domain.limits import MAX_DEVICES


def compare(case: Scenario, theirs: Outcome, ours: Outcome) -> list[str]:
    """The kinds of divergence between GPUStack's answer and layerfit's (empty: identical)."""
    kinds: list[str] = []
    if theirs.refused or ours.refused:
        if bool(theirs.refused) != bool(ours.refused):
            kinds.append("refused-" + ("gpustack" if theirs.refused else "layerfit"))
        return kinds
    if bool(theirs.candidates) != bool(ours.candidates):
        kinds.append("found-only-" + ("gpustack" if theirs.candidates else "layerfit"))
    elif theirs.candidates:
        their_layers = max(c.layers for c in theirs.candidates)
        our_layers = max(c.layers for c in ours.candidates)
        if their_layers != our_layers:
            kinds.append("layers-" + ("more" if our_layers > their_layers else "fewer"))
        their_keys = {c.key for c in theirs.candidates}
        our_keys = {c.key for c in ours.candidates}
        if their_keys != our_keys and their_layers == our_layers:
            if our_keys < their_keys:
                kinds.append("set-subset")
            elif our_keys > their_keys:
                kinds.append("set-superset")
            else:
                kinds.append("set-different")
        theirs_by_key = {c.key: c for c in theirs.candidates}
        for candidate in ours.candidates:
            other = theirs_by_key.get(candidate.key)
            if other is None:
                continue
            if other.gpus != candidate.gpus:
                kinds.append("gpu-order")
            if (other.ram, other.vram, other.rpc_vram) != (candidate.ram, candidate.vram, candidate.rpc_vram):
                kinds.append("claims")
            if other.rpc_layers != candidate.rpc_layers:
                kinds.append("rpc-layers")
            if other.split != candidate.split:
                kinds.append("split")
        common = their_keys & our_keys
        if case.model["placement_strategy"] == "binpack" and common:
            for key in common:
                if abs(theirs.scores.get(key, -1) - ours.scores.get(key, -2)) > 1e-6:
                    kinds.append("score")
                    break
            their_best = max(theirs.scores.values())
            best_keys = {k for k, v in theirs.scores.items() if abs(v - their_best) <= 1e-9}
            if ours.candidates[0].key not in best_keys and our_keys >= best_keys:
                kinds.append("best")
        if case.model["placement_strategy"] == "spread" and their_layers == our_layers:
            kinds += _spread_kinds(theirs, ours)
    if theirs.messages != ours.messages:
        kinds.append("messages")
    return sorted(set(kinds))


def _spread_kinds(theirs: Outcome, ours: Outcome) -> list[str]:
    """``spread-best``: GPUStack's spread scorer, run over layerfit's candidates as GPUStack's
    scheduler runs it over the adapter's, finds a worse best than over its own; ``spread-order``:
    layerfit's first candidate is not the best of its own by GPUStack's spread score."""
    if not theirs.spread or not ours.spread:
        return []
    kinds = []
    our_best = max(ours.spread.values())
    if our_best < max(theirs.spread.values()) - 1e-9:
        kinds.append("spread-best")
    if ours.spread[ours.candidates[0].key] < our_best - 1e-9:
        kinds.append("spread-order")
    return kinds


def documented(case: Scenario, theirs: Outcome, ours: Outcome, kinds: list[str]) -> str:
    """The documented difference (README, "Differences from GPUStack's selector") that explains a
    divergent scenario, or ``unexplained``. Checked in this order; the first that applies names it.
    The spread kinds follow from the others (a different candidate set) or from layerfit's own
    spread order alone."""
    total = case.profile.n_blocks + 1
    kinds = [kind for kind in kinds if not kind.startswith("spread-")]
    if not kinds:
        return "spread-headroom"
    their_keys, our_keys = {c.key for c in theirs.candidates}, {c.key for c in ours.candidates}
    only_theirs = [c for c in theirs.candidates if c.key not in our_keys]
    only_ours = [c for c in ours.candidates if c.key not in their_keys]
    if "mps-unflagged" in case.tags:
        return "mps-is-unified"
    if "ts" in case.tags:
        return "tensor-split"
    if only_theirs and all(len(c.gpus) + len(c.rpc) > MAX_DEVICES for c in only_theirs):
        return "too-many-devices"  # llama.cpp does not start a process of 16 devices: layerfit drops them
    if any(0 in c.vram or 0 in c.rpc_vram for c in only_theirs):
        return "idle-gpu"  # GPUStack's split left a GPU of its candidate without a layer
    idle_selected = [c for c in theirs.candidates if c.key in our_keys and (0 in c.vram or 0 in c.rpc_vram)]
    if idle_selected and set(kinds) <= {"claims", "split", "rpc-layers", "score", "best"}:
        return "idle-gpu"  # the same candidate, its idle selected GPU given a layer
    unified = {w["name"] for w in case.workers if w["unified"]}
    if only_theirs and all(c.rpc and ({c.main} | {w for w, _ in c.rpc}) & unified for c in only_theirs):
        return "unified-pool"  # GPUStack's distributed check leaves a unified worker's RAM out of its pool
    partial = theirs.candidates and max(c.layers for c in theirs.candidates) < total
    if kinds == ["set-superset"] and not partial and all(len(c.gpus) >= 2 and not c.rpc for c in only_ours):
        return "equal-gpu-combinations"
    if kinds == ["set-superset"] and not partial and all(len(c.gpus) == 1 and not c.rpc for c in only_ours):
        return "single-gpu-ram-stop"
    if set(kinds) <= {"set-superset", "set-different", "best"} and partial and not only_theirs:
        return "partial-every-candidate"
    if kinds == ["layers-more"] and ours.candidates and not ours.candidates[0].rpc and len(ours.candidates[0].gpus) > 2:
        return "partial-every-candidate"  # GPUStack stops at a GPU count that adds no layers
    if _more_gpus_at_gpu_layers(case, ours, kinds):
        return "partial-every-candidate"  # with -ngl GPUStack tries one GPU count, and it found nothing
    if "distributed" in case.tags and (
        set(kinds) & {"found-only-layerfit", "layers-more"}
        or (only_ours and all(c.rpc for c in only_ours) and not any(c.rpc for c in theirs.candidates))
    ):
        return _distributed_main_label(case, [c for c in ours.candidates if c.rpc])
    return "unexplained"


def _allocatable_vram(case: Scenario) -> dict[str, dict[int, int]]:
    """Each worker's allocatable VRAM per GPU, by GPUStack's own ``ResourceView``."""
    view = ResourceView([gpustack_instance(i) for i in case.instances])
    return {w["name"]: dict(view.allocatable(gpustack_worker(w)).vram) for w in case.workers}


def _distributed_main_label(case: Scenario, distributed: list[Normal]) -> str:
    """Why only layerfit's distributed search found these: its main worker is not GPUStack's (the
    most allocatable VRAM, short of RAM), or it is and they leave out some of its GPUs (too small
    for a layer: GPUStack splits over all of them, and such a GPU given a layer sinks every
    combination). GPUStack's main is taken here as the most VRAM over all GPUs (it counts the GPUs
    that hold a layer): a worker whose small GPUs alone make it the richest shows as unexplained."""
    if not distributed:
        return "unexplained"
    vram = _allocatable_vram(case)
    richest = max(vram, key=lambda name: sum(vram[name].values()))  # the first of equals, as GPUStack
    if all(c.main != richest for c in distributed):
        return "distributed-main-ram"
    left_out = [{i for i, v in vram[c.main].items() if v > 0} - set(c.gpus) for c in distributed]
    if all(c.main == richest for c in distributed) and all(left_out):
        return "distributed-main-small-gpu"
    return "unexplained"


def _more_gpus_at_gpu_layers(case: Scenario, ours: Outcome, kinds: list[str]) -> bool:
    """Only layerfit places a partial ``-ngl``, every candidate on more than two GPUs of one worker:
    with ``-ngl`` GPUStack's multi-GPU partial search ends after the first GPU count whose GPUs
    could hold the layers, whether that count found a candidate or not (seed 12 #25: four GPUs
    tried, five needed)."""
    total = case.profile.n_blocks + 1
    return (
        "ngl-some" in case.tags
        and "found-only-layerfit" in kinds
        and set(kinds) <= {"found-only-layerfit", "messages"}
        and all(c.layers < total and not c.rpc and len(c.gpus) > 2 for c in ours.candidates)
    )


def describe(case: Scenario, theirs: Outcome, ours: Outcome) -> str:
    def few(outcome: Outcome) -> str:
        if outcome.refused:
            return "refused " + outcome.refused
        shown = [
            f"{c.main}{list(c.gpus)}+{list(c.rpc)} L{c.layers} ram={c.ram} vram={list(c.vram)} rpc={list(c.rpc_vram)}"
            f" split={c.split}"
            for c in outcome.candidates[:3]
        ]
        more = f" (+{len(outcome.candidates) - 3})" if len(outcome.candidates) > 3 else ""
        return "; ".join(shown) + more + f" | messages {outcome.messages}"

    workers = " ".join(
        f"{w['name']}({'U' if w['unified'] else ''}{w['type']} ram{w['ram'] // GiB} gpus{[g // GiB for g in w['gpus']]}"
        f" res{[r / GiB for r in w['reserved']]})"
        for w in case.workers
    )
    model = {k: v for k, v in case.model.items() if k != "name"}
    their_keys, our_keys = {c.key for c in theirs.candidates}, {c.key for c in ours.candidates}
    only_theirs = sorted(their_keys - our_keys)[:4]
    only_ours = sorted(our_keys - their_keys)[:4]
    scores = [
        (key, round(theirs.scores[key], 4), round(ours.scores[key], 4))
        for key in sorted(their_keys & our_keys)
        if key in theirs.scores and key in ours.scores and abs(theirs.scores[key] - ours.scores[key]) > 1e-6
    ][:3]
    return (
        f"  scenario {case.number} [{case.shape}, {case.profile.n_blocks} blocks] {model}\n"
        f"  workers: {workers}\n  running: {case.instances}\n"
        f"  gpustack: {few(theirs)}\n  layerfit: {few(ours)}\n"
        f"  only gpustack: {only_theirs} ({len(their_keys - our_keys)})\n"
        f"  only layerfit: {only_ours} ({len(our_keys - their_keys)})\n  scores (key, gpustack, layerfit): {scores}"
    )
