"""Placement scores that order a strategy's candidates (higher first, ties keep search order).

Binpack follows GPUStack's placement scorer. Per GPU: ``(100 * ram_claim / ram_allocatable * 1 +
100 * vram_claim / vram_allocatable * 2) / 3``; the main worker's score is the highest over its
GPUs (CPU only: ``100 * ram_claim / ram_allocatable``). RPC servers score their GPU alone (no
RAM claim) and combine with the main worker as ``(main * 5 + rpc_sum * n) / (5 + n)`` for ``n``
servers, where ``rpc_sum`` is the *sum* of the servers' scores: GPUStack weighs it by the server
count a second time, and so does this port, so that both order candidates alike.

Spread in GPUStack ranks by counts of instances already on each worker and GPU, which a cluster
description does not carry; without them it gives every candidate the same score. The port keeps
its intent, headroom: ``100 - binpack``, so the candidate that leaves the most room wins.
"""

from __future__ import annotations

from layerfit.domain.config import Policy
from layerfit.heuristics.evaluate import Verdict

MAX_SCORE = 100.0
_RAM_WEIGHT = 1
_VRAM_WEIGHT = 2
_SERVER_WEIGHT = 5
_RPC_SERVER_WEIGHT = 1


def _fraction(claim: int, allocatable: int) -> float:
    return 0.0 if allocatable <= 0 else claim / allocatable


def _gpu_score(ram_claim: int, ram_allocatable: int, vram_claim: int, vram_allocatable: int) -> float:
    ram = _fraction(ram_claim, ram_allocatable) * MAX_SCORE * _RAM_WEIGHT
    vram = _fraction(vram_claim, vram_allocatable) * MAX_SCORE * _VRAM_WEIGHT
    return (ram + vram) / (_RAM_WEIGHT + _VRAM_WEIGHT)


def binpack(verdict: Verdict) -> float:
    """GPUStack's binpack score of a fitting placement."""
    where = verdict.placement
    need = verdict.need
    if need is None:
        return 0.0
    main_ram = need.main_ram_bytes
    main_scores: list[float] = []
    rpc_scores: list[float] = []
    for position, gpu in enumerate(where.devices):
        used = need.device_bytes[position]
        if used == 0:
            continue
        if where.tokens[position] == 0:
            main_scores.append(_gpu_score(main_ram, where.main.ram_bytes, used, gpu.vram_bytes))
        else:
            rpc_scores.append(_gpu_score(0, gpu.worker_ram_bytes, used, gpu.vram_bytes))
    main = max(main_scores) if main_scores else _fraction(main_ram, where.main.ram_bytes) * MAX_SCORE
    if not rpc_scores:
        return main
    count = len(rpc_scores)
    return (main * _SERVER_WEIGHT + sum(rpc_scores) * count * _RPC_SERVER_WEIGHT) / (
        _SERVER_WEIGHT + _RPC_SERVER_WEIGHT * count
    )


def score(verdict: Verdict, policy: Policy) -> float:
    """The candidate's score under the configured policy."""
    packed = binpack(verdict)
    return packed if policy is Policy.BINPACK else MAX_SCORE - packed
