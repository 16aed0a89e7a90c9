"""``objective: speed`` in the heuristic: every strategy's layouts ranked by predicted decode time.

GPUStack's order takes the first strategy with a candidate. Under ``objective: speed`` every
strategy the rules leave runs, and all their layouts are ranked by their predicted decode time for
one sequence (``speed.deployment.deployment_decode_ms``), then fewer workers, fewer GPUs, then the
placement score. A fast path, not a proof: the strategies search GPUStack's shapes only (its
splits, the main worker's GPUs all used, at most ``max_rpc_candidate_gpus`` remote GPUs); the
solver proves the answer and takes this one as its hint.

Layouts that take the same time (the same GPU speeds, roles, blocks and links:
``speed.deployment.layout_speed_key``) are predicted once, so ranking the single-GPU layouts of
a thousand GPUs of a few kinds costs a few predictions.
"""

from __future__ import annotations

from collections.abc import Sequence

from layerfit.check import check_layout
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Candidate, Reason
from layerfit.heuristics.context import Context
from layerfit.heuristics.evaluate import Verdict
from layerfit.heuristics.scoring import score
from layerfit.heuristics.strategies.base import Strategy
from layerfit.speed.deployment import deployment_decode_ms, layout_speed_key


class DecodeTimes:
    """Predicted decode times of one deployment's layouts, each kind of layout predicted once."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._known: dict[tuple[object, ...], float] = {}

    def ms(self, layout: Layout) -> float:
        key = layout_speed_key(self.ctx.cluster, layout)
        if key not in self._known:
            self._known[key] = deployment_decode_ms(self.ctx.cluster, self.ctx.deployment, self.ctx.profile, layout)
        return self._known[key]


def fastest(
    ctx: Context, found: Sequence[tuple[Strategy, Verdict]]
) -> tuple[tuple[Candidate, ...], tuple[Reason, ...], Strategy | None]:
    """The fastest verdicts of every strategy as candidates (ties: fewer workers, fewer GPUs, the
    better score, then search order), each checked; the reasons of those dropped; the best one's
    strategy."""
    times = DecodeTimes(ctx)
    policy = ctx.config.policy
    ranked = []
    seen: set[Layout] = set()
    for position, (strategy, verdict) in enumerate(found):
        layout = ctx.evaluator.layout(verdict.placement, verdict.n_gpu_layers)
        if layout in seen:
            continue
        seen.add(layout)
        value = score(verdict, policy)
        key = (times.ms(layout), len(layout.workers), len(layout.devices), -value, position)
        ranked.append((key, strategy, layout, value))
    ranked.sort(key=lambda entry: entry[0])
    wanted = 1 + ctx.config.alternatives
    candidates: list[Candidate] = []
    dropped: list[Reason] = []
    winner: Strategy | None = None
    for _, strategy, layout, value in ranked:
        if len(candidates) == wanted:
            break
        problems = check_layout(ctx.cluster, ctx.deployment, ctx.profile, layout, ctx.config)
        if problems:
            dropped.extend(reason.model_copy(update={"strategy": strategy.action.value}) for reason in problems)
            continue
        winner = winner or strategy
        needed = ctx.evaluator.claims(layout, ctx.unified_workers)
        candidates.append(Candidate(layout=layout, claims=needed, strategy=strategy.kind, score=value))
    return tuple(candidates), tuple(dropped), winner
