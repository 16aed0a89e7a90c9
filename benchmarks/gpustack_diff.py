"""A differential test of layerfit's GPUStack-order heuristic against GPUStack 2.3.0's own selector.

Both run on the same randomly generated inputs: GPUStack's real ``Worker``/``Model``/
``ModelInstance`` objects (1-20 workers, mixed GPU counts and sizes, unified-memory and CPU-only
workers, running instances and system reserves, GPUStack's ``ResourceView``), deployments with
distribution and CPU offloading on or off, manual selections (one GPU, several on one worker,
across workers), ``-ngl``/``-ts``/``-c``/``--parallel``/``-ctk``, dense and MoE models, models
that fit nowhere. GPUStack's gguf-parser call is answered from the same memory profile layerfit
plans with (``layerfit.gpustack.parser_table``, output layer last as gguf-parser offloads it); the
profile is layerfit's estimate of a header-only GGUF of a real model shape under the scenario's
flags, so both sides see identical numbers. layerfit's side goes through the adapter's
conversions (``cluster_from_gpustack`` ...) and its candidates through ``candidate_dict``, so the
adapter's output is what is compared.

Compared per scenario: whether a candidate is found; the candidate sets (main worker, GPU indexes,
RPC servers, offload layers); for candidates both return: GPU order, RAM and per-device VRAM
claims, the layer split (GPUStack's ``tensor_split`` of VRAM bytes turned into llama.cpp's layer
counts), RPC servers' layers; GPUStack's binpack score of each candidate (its own scorer) against
layerfit's, and the best by it; the messages when nothing fits. Every divergence is printed with
its kind; ``--verbose`` prints the inputs too.

Modules: ``gpustack_diff_scenarios`` (the random inputs), ``gpustack_diff_sides`` (running each
side), ``gpustack_diff_compare`` (divergences and their documented labels).

Needs the gpustack extra (a separate venv, see .ci/run):
``PYTHONPATH=. .venv-gpustack/bin/python benchmarks/gpustack_diff.py --count 200 --seed 0``
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gpustack_diff_compare import compare, describe, documented
from gpustack_diff_scenarios import scenario
from gpustack_diff_sides import run_gpustack, run_layerfit

from layerfit.testing.synthetic import REAL_MODELS, write_gguf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0, help="skip the scenarios before this number")
    parser.add_argument("--verbose", action="store_true", help="print each divergent scenario's inputs")
    parser.add_argument("--only", default="", help="comma-separated divergence kinds or labels to print")
    args = parser.parse_args()
    logging.getLogger("gpustack").setLevel(logging.CRITICAL)
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        gguf_dir = Path(folder)
        for name, spec in REAL_MODELS.items():
            write_gguf(gguf_dir / f"{name}.gguf", spec, tokenizer=False)
        tally: Counter[str] = Counter()
        tags: Counter[str] = Counter()
        labels: Counter[str] = Counter()
        identical = 0
        gpustack_s = layerfit_s = 0.0
        only = set(filter(None, args.only.split(",")))
        for number in range(args.first, args.first + args.count):
            case = scenario(number, random.Random(f"{args.seed}-{number}"), gguf_dir)
            tags.update(case.tags)
            theirs, ours = run_gpustack(case), run_layerfit(case)
            gpustack_s += theirs.seconds
            layerfit_s += ours.seconds
            kinds = compare(case, theirs, ours)
            identical += not kinds
            tally.update(kinds)
            label = documented(case, theirs, ours, kinds) if kinds else ""
            if kinds:
                labels[label] += 1
            if kinds and (not only or only & {*kinds, label}):
                print(f"#{number}: {', '.join(kinds)}  [{label}]  tags {case.tags}")
                if args.verbose:
                    print(describe(case, theirs, ours))
                sys.stdout.flush()
    print(f"\nscenarios {args.count} (seed {args.seed}, from #{args.first}), identical {identical}")
    for kind, count in sorted(tally.items()):
        print(f"  {kind:<22} {count}")
    print("divergent scenarios by documented difference:")
    for label, count in sorted(labels.items()):
        print(f"  {label:<22} {count}")
    print("coverage: " + ", ".join(f"{tag} {count}" for tag, count in sorted(tags.items())))
    print(f"time: gpustack {gpustack_s:.1f} s (estimator in-process), layerfit heuristic {layerfit_s:.1f} s")


if __name__ == "__main__":
    main()
