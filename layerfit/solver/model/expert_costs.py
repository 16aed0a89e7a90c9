"""Experts on the host as a decision of the CP-SAT model: which GPU blocks keep their experts in RAM.

Each block with expert tensors gets a boolean "its experts stay in host RAM" (``-ot``). It may be
true only for a block on a GPU; it saves its device the block's expert bytes, costs the main
worker their host size (``memory.host_expert_bytes``), and switches the compute buffers to their
partial-offload size (tensor overrides turn off pipeline parallelism), as ``memory.claims`` prices it.

Any set, not the first ``k``: llama.cpp's ``-ot`` can keep the experts of any blocks on the host
(``launch`` writes ``--n-cpu-moe N`` when the set is the first ``N``). On one device with blocks
whose experts cost the same, only the number of host-expert blocks matters, so the first ``k``
are as good as any ``k``. Over several devices they are not, even with identical blocks: the
first blocks sit on the first device, and when that device is large and the last one (the main
GPU, with the output layer) is small, the blocks that must lose their experts are the last
device's. Example: blocks of dense part ``d`` and experts ``e = 10 d``, a first device that holds
two whole blocks and a last device that holds two dense parts and the output layer: four blocks
fit with two host-expert blocks (the last device's), while the first ``k`` need ``k = 3``
(``tests/test_solver_experts.py`` holds this case). So the model chooses any set.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from layerfit.domain.profile import MemoryProfile
from layerfit.solver.model.scale import Scale


@dataclass(frozen=True)
class ExpertCosts:
    """Per block: VRAM saved and host RAM taken when its experts stay on the host (bytes or units)."""

    blocks: tuple[int, ...]
    """Blocks with expert tensors."""
    saved: tuple[int, ...]
    host: tuple[int, ...]

    @property
    def uniform(self) -> bool:
        """Every expert block saves and costs the same."""
        return len({(self.saved[b], self.host[b]) for b in self.blocks}) <= 1

    def sizes(self) -> tuple[int, ...]:
        return (*self.saved, *self.host)

    def scaled(self, scale: Scale) -> ExpertCosts:
        """Savings rounded down and host costs up, so the model never under-counts."""
        return ExpertCosts(
            blocks=self.blocks,
            saved=tuple(scale.capacity(size) for size in self.saved),
            host=tuple(scale.claim(size) for size in self.host),
        )

    def on_gpus_from(self, cpu_blocks: int) -> int:
        """Expert blocks at or after ``cpu_blocks`` (those on GPUs)."""
        return sum(1 for block in self.blocks if block >= cpu_blocks)


def expert_costs(profile: MemoryProfile) -> ExpertCosts:
    """The profile's expert figures in bytes."""
    n = profile.n_blocks
    return ExpertCosts(
        blocks=profile.expert_blocks,
        saved=tuple(profile.expert_bytes(block) for block in range(n)),
        host=tuple(profile.host_expert_bytes(block) for block in range(n)),
    )


def dense_prefix(block_prefix: tuple[int, ...], experts: ExpertCosts) -> tuple[int, ...]:
    """GPU prefix sums with every block's experts on the host: the least a run of blocks costs."""
    lightest = [b - a - experts.saved[block] for block, (a, b) in enumerate(pairwise(block_prefix))]
    prefix = [0]
    for size in lightest:
        prefix.append(prefix[-1] + size)
    return tuple(prefix)
