"""GGUF headers over HTTP: the bytes and requests one header costs, and the time, beside reading
the same file locally in the same run.

A local server redirects like Hugging Face's resolve endpoint to a second, "CDN" server that
answers range requests with an ETag (``tests/http_fixtures.py``); it serves the ground-truth
models, and one with a full Llama-3 vocabulary (128,256 tokens, 50,000 merges), as virtual
full-size files. Per model: the header's bytes, the bytes and requests the CDN served, the time of
a first read (cold: no cache), of a second one (the header cache: one conditional request, 304),
and of the local file. Targets: the bytes served stay within the header plus one step of the
growing window (``MAX_STEP``) and never reach the tensor data; a cached read sends no body.

Usage: ``python benchmarks/remote_headers.py [--repeat 5]`` (needs the test extra).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from http_fixtures import REPO, Server, serve_header, serving, sparse_model

from layerfit.estimators import read_gguf
from layerfit.remote import cache
from layerfit.remote.source import MAX_STEP
from layerfit.testing.synthetic import GROUND_TRUTH_MODELS

MODELS: tuple[tuple[str, str, dict[str, int | bool]], ...] = (
    *((name, name, {}) for name in sorted(GROUND_TRUTH_MODELS)),
    ("llama8b-vocab", "llama8b-q4", {"tokenizer": True, "merges": 50_000}),
)


def _median_ms(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory() as scratch, serving(Server()) as cdn, serving(Server()) as front:
        front.redirect_to = cdn.base
        os.environ["HF_ENDPOINT"] = front.base
        os.environ["XDG_CACHE_HOME"] = str(Path(scratch) / "xdg")
        os.environ.pop("HF_TOKEN", None)
        print(
            f"{'model':16} {'file GB':>8} {'header KiB':>10} {'served KiB':>10} {'requests':>8}"
            f" {'cold ms':>8} {'cached ms':>9} {'local ms':>8}"
        )
        for label, model, options in MODELS:
            folder = Path(scratch) / label
            folder.mkdir()
            local, size, header_bytes = sparse_model(folder, model, **options)  # type: ignore[arg-type]
            serve_header((front, cdn), local, f"{label}.gguf", size, header_bytes)
            location = f"hf://{REPO}/{label}.gguf"
            before_bytes, before_requests = cdn.body_bytes, len(cdn.log)
            cache.clear()
            read_gguf(location)
            served, requests = cdn.body_bytes - before_bytes, len(cdn.log) - before_requests

            def cold(location: str = location) -> None:
                cache.clear()
                read_gguf(location)

            cold_ms = _median_ms(cold, args.repeat)
            read_gguf(location)
            body_before = cdn.body_bytes
            cached_ms = _median_ms(lambda location=location: read_gguf(location), args.repeat)  # type: ignore[misc]
            cached_body = cdn.body_bytes - body_before
            local_ms = _median_ms(lambda local=local: read_gguf(str(local)), args.repeat)  # type: ignore[misc]
            ok = header_bytes <= served <= max(header_bytes + MAX_STEP, 256 << 10) and cached_body == 0
            failed |= not ok
            print(
                f"{label:16} {size / 1e9:8.1f} {header_bytes / 1024:10.1f} {served / 1024:10.1f} {requests:8d}"
                f" {cold_ms:8.1f} {cached_ms:9.1f} {local_ms:8.1f}{'' if ok else '  FAILED'}"
            )
    print(
        "target: served within header + 4 MiB, never the tensor data; a cached read sends no body:",
        "FAILED" if failed else "met",
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
