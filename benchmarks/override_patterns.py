"""The ``-ot`` search bound (``layerfit.llamacpp.pattern_cost``): how long the patterns it accepts take.

Draws random patterns from the portable subset (literals, ``.``, classes, ``\\d``, groups,
alternations, ``* + ? {m,n}``), keeps those ``cost_problem`` accepts and times one ``re.search``
of each against adversarial 63-byte tensor names (one repeated character, and names built from the
pattern's own literals), so that backtracking is at its worst. Prints the slowest accepted search.
For comparison, in the same run, a few refused patterns are timed in a child process cut at
``--cut`` seconds. Timings on a shared machine are inflated by its load.

Usage: ``python benchmarks/override_patterns.py [--patterns 3000] [--seed 1] [--cut 5]``
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys
import time

from layerfit.llamacpp.pattern_cost import LONGEST_TENSOR_NAME, cost_problem, search_paths

ATOMS = ["a", "b", ".", r"\.", "[ab]", r"\d", "[^b]", "1"]
REFUSED = ["(a+)+$", "(.*)*x", "(a|a)*$", r"(\w|\d)+$", ".*.*.*.*.*.*x"]


def random_pattern(rng: random.Random, depth: int = 0) -> str:
    parts = []
    for _ in range(rng.randint(1, 4)):
        if depth < 2 and rng.random() < 0.3:
            inner = "|".join(random_pattern(rng, depth + 1) for _ in range(rng.randint(1, 3)))
            atom = f"(?:{inner})"
        else:
            atom = rng.choice(ATOMS)
        parts.append(atom + rng.choice(["", "", "*", "+", "?", "{1,3}", "{2,}", "*?"]))
    return "".join(parts)


def names_for(pattern: str) -> list[str]:
    literals = [c for c in pattern if c.isalnum()] or ["a"]
    cycle = "".join(literals)
    built = (cycle * LONGEST_TENSOR_NAME)[: LONGEST_TENSOR_NAME - 1]
    return ["a" * LONGEST_TENSOR_NAME, "1." * 31 + "1", built + "!", built[:-1] + ".!"]


def time_search(pattern: str, name: str) -> float:
    compiled = re.compile(pattern, re.ASCII)
    start = time.perf_counter()
    compiled.search(name)
    return time.perf_counter() - start


def timed_in_child(pattern: str, cut: float) -> str:
    code = f"import re,time;t=time.perf_counter();re.search({pattern!r},'a'*63+'!');print(time.perf_counter()-t)"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=cut)
    except subprocess.TimeoutExpired:
        return f"> {cut:g} s (cut)"
    return f"{float(done.stdout):.4f} s"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--patterns", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cut", type=float, default=5.0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    accepted = refused = 0
    slowest = (0.0, "", "")
    for _ in range(args.patterns):
        pattern = random_pattern(rng)
        if cost_problem(pattern) is not None:
            refused += 1
            continue
        accepted += 1
        for name in names_for(pattern):
            seconds = time_search(pattern, name)
            slowest = max(slowest, (seconds, pattern, name))
    print(f"{args.patterns} random patterns: {accepted} accepted, {refused} refused")
    seconds, pattern, name = slowest
    paths = search_paths(pattern)
    print(f"slowest accepted search: {seconds * 1000:.2f} ms  {pattern!r} on {name!r} ({paths:,} paths)")
    for known in (r".*ffn_.*exps.*", ".*.*.*x"):
        worst = max(time_search(known, name) for name in names_for(known))
        print(f"accepted {known!r}: {worst * 1000:.2f} ms")
    for bad in REFUSED:
        print(f"refused {bad!r}: {timed_in_child(bad, args.cut)}")


if __name__ == "__main__":
    main()
