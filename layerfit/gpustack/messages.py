"""The messages GPUStack shows a user for a placement (its scheduling events), from a layerfit plan.

The heuristic leaves GPUStack's notes and shows them by GPUStack's rule (all errors; otherwise,
when nothing fits, the first strategy's advice, then the warnings). Here each is written the way
GPUStack writes its events: one ``- sentence`` per line, sizes in GiB rounded to two places as
Python prints them (``47.0 GiB``). When a plan that found nothing carries no message at all,
GPUStack's own last word is used.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from layerfit.domain.plan import Plan, Status

NOTHING_FITS = "Cannot find a suitable worker combination to run the model."
SELECTION_DOES_NOT_FIT = "Selected GPUs do not meet the requirements to run the model."

_SENTENCE_BREAK = re.compile(r"(?<=[.!?]) +(?=[A-Z])(?!Try offloading fewer layers to lower|Use manual scheduling)")
"""Where GPUStack starts a new ``- `` line: at each sentence, except the last sentences of the
partial-offload advice and of the too-many-RPC-servers warning, which it writes on the line before."""
_PLAIN = re.compile(
    r"The parameter --gpu-layers \d+ requires CPU offloading\.|Selected GPU \S+ lacks enough VRAM\. "
    r"|No available resources for workers\.|Selected GPUs need at least \S+ GiB of available VRAM\."
    r"|Insufficient resources for the model\. "
)
"""GPUStack's pre-check errors, which it writes as plain text, not as a list."""
_GIB = re.compile(r"\b(\d+\.\d+) GiB\b")


def as_list_message(lines: Sequence[str]) -> str:
    """GPUStack's list message format: one ``- line`` per line."""
    return "\n".join(f"- {line}" for line in lines)


def gpustack_text(message: str) -> str:
    """A layerfit message in GPUStack's event format."""
    if _PLAIN.match(message.strip()):
        return _GIB.sub(lambda found: f"{round(float(found[1]), 2)} GiB", message.strip())
    lines = _SENTENCE_BREAK.split(message.strip())
    return as_list_message([_GIB.sub(lambda found: f"{round(float(found[1]), 2)} GiB", line) for line in lines])


def gpustack_messages(plan: Plan, selected: Sequence[str] | None = None) -> list[str]:
    """The plan's messages as GPUStack would show them."""
    if plan.messages:
        return [gpustack_text(message) for message in plan.messages]
    if plan.status in (Status.INFEASIBLE, Status.UNKNOWN):
        return [as_list_message([SELECTION_DOES_NOT_FIT if selected else NOTHING_FITS])]
    return []
