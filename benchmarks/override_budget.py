"""Tensor overrides over a whole model (``layerfit.estimators.overrides``): how long the work the
budget accepts takes, before and after.

1. Rate: random accepted ``-ot`` patterns (``override_patterns.random_pattern``), each searched by
   its core (``pattern_cost.search_core``) on adversarial names of 16 to 63 bytes; the slowest
   time per counted path (``overrides.name_cost``: ``SEARCH_CALL_PATHS``, plus ``names_paths`` of the
   core on a name holding its key literal) times
   ``SEARCH_BUDGET`` is the longest the accepted searches can take. Checked against ``--target``.
2. At the budget: the slowest pattern of step 1 on as many adversarial names as the budget
   admits, timed end to end (``search_cores`` and every search).
3. Real models: the share of the budget llama.cpp's documented patterns take on the tensor names
   of ``REAL_MODELS`` (the largest, Qwen3-235B, has 1,131 tensors).
4. Before/after on ``MAX_TENSORS`` crafted names (512 blocks, names of 40 bytes):
   ``--n-cpu-moe 512`` searched as 512 regexes (the old way, timed on a sample and scaled) against
   ``match_expert_name``; and the slowest pattern the old code accepted, searched in full on
   adversarial names.

Timings on a shared machine are inflated by its load.
Usage: ``python benchmarks/override_budget.py [--patterns 1000] [--seed 1] [--target 1.0]``
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from layerfit.estimators.gguf_reader import MAX_TENSORS
from layerfit.estimators.overrides import (
    SEARCH_BUDGET,
    SEARCH_CALL_PATHS,
    _first_hit,
    name_cost,
    search_cores,
    search_cost,
)
from layerfit.llamacpp.expert_flags import DOCUMENTED_OVERRIDES, ExpertFlags
from layerfit.llamacpp.pattern_cost import anchors, cost_problem, search_core
from layerfit.testing.synthetic_catalogue import REAL_MODELS
from layerfit.testing.synthetic_spec import tensor_table

sys.path.insert(0, str(Path(__file__).parent))
from override_patterns import random_pattern

LENGTHS = (16, 32, 48, 63)


def adversarial_names(pattern: str, length: int) -> list[str]:
    """Names that make backtracking work: one repeated character, and the pattern's own literals."""
    literals = "".join(c for c in pattern if c.isalnum()) or "a"
    built = (literals * length)[: length - 1]
    names = [
        "a" * length,
        ("1." * length)[: length - 1] + "1",
        built + "!",
        built[:-1] + ".!",
        "." * length,
        ("ab" * length)[:length],
    ]
    found = anchors(search_core(pattern))
    if found.required:  # names a search is not spared: its literals, the first one many times
        joined = "".join(found.required)
        names += [(joined + "a" * length)[:length], (joined * length)[:length]]
        names.append((found.required[0] * length)[: max(0, length - len(joined))] + joined)
    return [name for name in names if len(name) <= length]


def per_call(search: Callable[[str], object], name: str, calls: int = 10, repeats: int = 3) -> float:
    """Seconds per search of ``name``, the best of ``repeats`` runs of ``calls`` searches."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            search(name)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


class Rate(NamedTuple):
    seconds_per_path: float
    pattern: str
    name: str


def rate_of(pattern: str, name: str, calls: int, repeats: int) -> Rate:
    """Seconds per counted path of one search of ``name``, as ``overrides`` runs and counts it."""
    core = search_core(pattern)
    regex, key = re.compile(core, re.ASCII), anchors(core).key([name])
    seconds = per_call(lambda text: key in text and regex.search(text), name, calls, repeats)
    return Rate(seconds / name_cost(core, name), pattern, name)


def slowest_rates(count: int, seed: int, keep: int = 5) -> list[Rate]:
    """The ``keep`` slowest patterns per counted path, each at its slowest name; the candidates
    are timed again with more calls so that one pause of the machine does not decide."""
    rng = random.Random(seed)
    rates: dict[str, Rate] = {}
    for _ in range(count):
        pattern = random_pattern(rng)
        if cost_problem(pattern) is None:
            for length in LENGTHS:
                for name in adversarial_names(pattern, length):
                    rates[pattern] = max(rates.get(pattern, Rate(0.0, "", "")), rate_of(pattern, name, 10, 3))
    candidates = sorted(rates.values(), reverse=True)[: keep * 4]
    return sorted((rate_of(rate.pattern, rate.name, 100, 7) for rate in candidates), reverse=True)[:keep]


def at_budget(pattern: str, name: str) -> tuple[float, int, int]:
    """Seconds to check and search as many copies of ``name`` as the budget admits."""
    most = SEARCH_BUDGET // max(SEARCH_CALL_PATHS, search_cost([name], [search_core(pattern)]))  # the floor too
    names = [name] * most
    start = time.perf_counter()
    searches = search_cores(names, [pattern], "bench")
    regex, key = searches[0]
    for name in names:
        _ = key in name and regex.search(name)
    return time.perf_counter() - start, len(names), search_cost(names, [search_core(pattern)])


def real_share() -> tuple[float, str, str]:
    worst = (0.0, "", "")
    for model, spec in REAL_MODELS.items():
        names = [tensor.name for tensor in tensor_table(spec)]
        for pattern in DOCUMENTED_OVERRIDES:
            worst = max(worst, (search_cost(names, [search_core(pattern)]) / SEARCH_BUDGET, model, pattern))
    return worst


def crafted_names(blocks: int = 512, length: int = 40) -> list[str]:
    kinds = ("ffn_up_exps", "ffn_gate_exps", "ffn_down_exps", "attn_q", "x")
    return [f"blk.{i % blocks}.{kinds[i % len(kinds)]}.{i}".ljust(length, "a") for i in range(MAX_TENSORS)]


def before_after_n_cpu_moe(names: list[str], sample: int = 4096) -> tuple[float, float]:
    flags = ExpertFlags(n_cpu_moe=512)
    regexes = [re.compile(pattern, re.ASCII) for _, pattern in flags.patterns()]
    start = time.perf_counter()
    for name in names[:sample]:
        next((k for k, regex in enumerate(regexes) if regex.search(name)), None)
    old = (time.perf_counter() - start) * len(names) / sample
    start = time.perf_counter()
    for name in names:
        _first_hit(name, [], flags)
    return old, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--patterns", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--target", type=float, default=1.0, help="seconds the budget may take at worst")
    args = parser.parse_args()
    slowest = slowest_rates(args.patterns, args.seed)
    rate, pattern, name = slowest[0]
    bound = rate * SEARCH_BUDGET
    print(f"slowest rate: {rate * 1e9:.1f} ns per counted path ({pattern!r}, core {search_core(pattern)!r}, {name!r})")
    print(f"budget {SEARCH_BUDGET:,} paths at that rate: {bound:.2f} s (target {args.target:g} s)")
    seconds = 0.0
    for _, pattern, name in slowest:
        took, count, paths = at_budget(pattern, name)
        seconds = max(seconds, took)
        print(f"at the budget: {count:,} x {name!r} against {pattern!r} ({paths:,} paths): {took:.2f} s")
    share, model, documented = real_share()
    print(f"real models: at most {share:.2%} of the budget ({documented!r} on {model})")
    names = crafted_names()
    old, new = before_after_n_cpu_moe(names)
    print(f"--n-cpu-moe 512 on {len(names):,} names: {old:.1f} s as 512 regexes (scaled), {new:.2f} s now")
    slow = r"[^b]*?.*?1+"  # among the slowest the old code accepted: ~0.8 ms per 63-byte name
    compiled = re.compile(slow, re.ASCII)
    per_name = max(per_call(compiled.search, name, 1) for name in adversarial_names(slow, 63))
    core_paths = search_cost(["x" * 63] * MAX_TENSORS, [search_core(slow)])
    print(f"-ot {slow!r} in full on {MAX_TENSORS:,} adversarial 63-byte names: {per_name * MAX_TENSORS:.0f} s")
    print(f"  (scaled); its core {search_core(slow)!r} counts {core_paths:,} paths: refused")
    if bound > args.target * 1.5 or seconds > args.target * 1.5:
        sys.exit(f"over the target: {bound:.2f} s by rate, {seconds:.2f} s measured")


if __name__ == "__main__":
    main()
