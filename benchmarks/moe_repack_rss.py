"""Host RAM of experts kept on the host by a CPU build that repacks them (``CPU_REPACK``).

The x86 CPU backend with AVX2 copies the Q4_0, Q4_K, IQ4_NL and MXFP4 matrices it keeps into a
repacked buffer of the same size (``estimators.llamacpp_log.REPACKED_TYPES``). This runs
``llama-completion`` on the gpt-oss MXFP4 architecture model (experts in MXFP4) with one CPU
rpc-server device, all layers on it, with and without ``--cpu-moe``, with and without
``--no-repack``, under mmap and ``--load-mode none``, and prints llama.cpp's host buffers beside
the peak RSS of the main process (``/usr/bin/time -v``) and layerfit's host expert bytes::

    python benchmarks/moe_repack_rss.py --llama-cpp ~/.cache/llamacpp-cpu-11434
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from pathlib import Path

from truth_recording import PROMPT, _binary, _environment, rpc_servers

from layerfit.domain import LlamaParams
from layerfit.estimators import estimate_profile
from layerfit.testing.arch_fixtures import write_arch_model

MODEL = "gpt-oss-mxfp4"
MiB = 1024**2
HOST_BUFFER = re.compile(r"load_tensors:\s+(CPU(?:_Mapped|_REPACK)?) model buffer size\s*=\s*([\d.]+) MiB")
MAX_RSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")


def run(build: Path, model: Path, endpoint: str, flags: list[str]) -> tuple[dict[str, float], float]:
    """llama.cpp's host model buffers (MiB) and the peak RSS (MiB) of one run."""
    command = ["/usr/bin/time", "-v", str(_binary(build, "llama-completion")), "-m", str(model), "-c", "2048"]
    command += ["-ngl", "99", "--rpc", endpoint, *flags, "-no-cnv", "-n", "2", "--ignore-eos", "-p", PROMPT]
    command += ["-lv", "4", "-s", "1", "-t", "1"]
    done = subprocess.run(command, env=_environment(build), capture_output=True, text=True, timeout=600, check=True)
    log = done.stdout + done.stderr
    found = MAX_RSS.search(log)
    assert found is not None
    return {name: float(size) for name, size in HOST_BUFFER.findall(log)}, int(found.group(1)) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-cpp", type=Path, required=True, help="directory of the CPU build")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        model = write_arch_model(scratch, MODEL, data="sparse")
        profile = estimate_profile(str(model), LlamaParams(ctx_size=2048))
        experts = sum(profile.host_expert_bytes(block) for block in profile.expert_blocks) / MiB
        print(f"{MODEL}: layerfit's host expert bytes for --cpu-moe: {experts:.2f} MiB")
        with rpc_servers(args.llama_cpp, 1) as endpoints:
            for load in ([], ["-lm", "none"]):
                for moe in ([], ["--cpu-moe"]):
                    for repack in ([], ["--no-repack"]):
                        flags = [*load, *moe, *repack]
                        buffers, rss = run(args.llama_cpp, model, endpoints[0], flags)
                        shown = ", ".join(f"{name} {size:.2f}" for name, size in buffers.items())
                        label = " ".join(flags) or "(defaults)"
                        print(f"  {label:32s} host buffers MiB: {shown:40s} peak RSS {rss:7.1f} MiB")


if __name__ == "__main__":
    main()
