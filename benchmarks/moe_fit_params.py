"""layerfit beside llama.cpp's own fit (``llama-fit-params``) on one RPC device.

One CPU ``ggml-rpc-server`` is the only device; it reports the host's RAM as its free memory, so
``--fit-target`` (the margin llama.cpp's fit leaves free) is set to that minus the device size under
test. layerfit plans the same device as an rpc-server GPU of that size (CPU-build runtime costs:
no per-process VRAM on an RPC device, one sequence), main process on a GPU-less worker with
unlimited RAM, as llama.cpp's fit assumes. Both at a fixed ``-c``. Printed per device size: layers
on the device, and blocks whose experts are all on it (llama.cpp's fit may leave a fraction of one
block's experts, e.g. its ``ffn_gate``/``ffn_down``, on the host: counted as not on the device).
Used by ``moe_bench.py --fit-params BUILD_DIR``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

from layerfit.domain import Cluster, Deployment, Gpu, LlamaParams, MemoryProfile, PlannerConfig, Worker
from layerfit.estimators import RuntimeCosts, estimate_profile
from layerfit.estimators.shape import read_gguf
from layerfit.planning.planner import plan
from layerfit.testing.arch_fixtures import TOKENIZER, arch_tensor_table
from layerfit.testing.synthetic import REAL_MODELS, write_gguf

MiB = 1024**2
FREE = re.compile(r"RPC0 \([^)]*\) \| +(\d+) = +(\d+) \+")
WHOLE_BLOCK = re.compile(r"blk\\\.(\d+)\\\.ffn_\(up\|down\|gate_up\|gate\)_\(ch\|\)exps=CPU")
ANY_BLOCK = re.compile(r"blk\\\.(\d+)\\\.")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write_model(directory: Path, name: str) -> Path:
    """The model as a full-size sparse GGUF llama.cpp loads (llama.cpp's tensor set, a tokenizer)."""
    spec = REAL_MODELS[name]
    path = directory / f"{name}.gguf"
    write_gguf(path, spec, data="sparse", tokenizer=True, tensors=arch_tensor_table(spec), tokenizer_model=TOKENIZER)
    return path


def llama_fit(build: Path, model: Path, ctx: int, port: int, target_mib: int) -> tuple[str, str]:
    """llama-fit-params' suggested arguments (the last line it prints to stdout) and its whole log."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(build)}
    command = [str(build / "llama-fit-params"), "-m", str(model), "-c", str(ctx)]
    command += ["--rpc", f"127.0.0.1:{port}", "--fit-target", str(target_mib), "-lv", "4"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=True)
    return done.stdout.strip().splitlines()[-1], done.stdout + done.stderr


def llama_counts(args: str, n_blocks: int, expert_blocks: tuple[int, ...]) -> tuple[int, int, int]:
    """(layers on the device, expert blocks wholly on it, blocks with part of their experts on it)."""
    tokens = args.split()
    ngl = int(tokens[tokens.index("-ngl") + 1])
    layers = n_blocks + 1 if ngl < 0 else min(ngl, n_blocks + 1)
    first_gpu = n_blocks + 1 - layers
    overrides = tokens[tokens.index("-ot") + 1].strip('"').split(",") if "-ot" in tokens else []
    whole = {int(m.group(1)) for o in overrides if (m := WHOLE_BLOCK.fullmatch(o))}
    touched = {int(m.group(1)) for o in overrides if (m := ANY_BLOCK.match(o))}
    on_device = [b for b in expert_blocks if b >= first_gpu]
    return layers, sum(1 for b in on_device if b not in touched), len(touched - whole)


def layerfit_counts(profile: MemoryProfile, name: str, device_mib: int) -> tuple[int, int, str]:
    host = Worker(id="h", name="h", total_ram_bytes=1 << 50, allocatable_ram_bytes=1 << 50)
    gpu = Gpu(index=0, total_vram_bytes=device_mib * MiB, allocatable_vram_bytes=device_mib * MiB)
    remote = Worker(id="r", name="r", total_ram_bytes=1 << 50, allocatable_ram_bytes=1 << 50, gpus=(gpu,))
    deployment = Deployment(name=name, profile=profile, distributed_inference_across_workers=True)
    result = plan(Cluster(workers=(host, remote)), deployment, PlannerConfig(time_limit_s=10), explain=False)
    layout = result.layout
    if layout is None:
        return 0, 0, result.status.value
    on_gpus = sum(1 for b in profile.expert_blocks if b >= layout.cpu_blocks and b not in layout.host_expert_blocks)
    return layout.gpu_layers, on_gpus, result.status.value


def _verdict(ours: tuple[int, int], theirs: tuple[int, int]) -> str:
    """layerfit against llama.cpp on the tiers in order (layers, then expert blocks on the device)."""
    return "same" if ours == theirs else "layerfit ahead" if ours > theirs else "llama.cpp ahead"


def compare(build: Path, scratch: Path, name: str, ctx: int, sizes_mib: list[int]) -> None:
    model = write_model(scratch, name)
    runtime = RuntimeCosts(backend="cpu", default_slots=1)
    profile = estimate_profile(read_gguf(str(model)), LlamaParams(ctx_size=ctx), runtime=runtime)
    port = _free_port()
    env = {**os.environ, "LD_LIBRARY_PATH": str(build)}
    server = subprocess.Popen(
        [str(build / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port), "-d", "CPU"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.0)
        _, probe = llama_fit(build, model, ctx, port, 0)
        found = FREE.search(probe)
        if found is None:
            raise RuntimeError("no RPC0 row in llama-fit-params' memory breakdown")
        free = int(found.group(2))
        experts = len(profile.expert_blocks)
        print(f"{name} -c {ctx}: {profile.n_layers} layers, {experts} expert blocks; RPC0 free {free} MiB")
        for size in sizes_mib:
            started = time.perf_counter()
            args, _ = llama_fit(build, model, ctx, port, free - size)
            fit_s = time.perf_counter() - started
            layers, experts, partial = llama_counts(args, profile.n_blocks, profile.expert_blocks)
            started = time.perf_counter()
            our_layers, our_experts, status = layerfit_counts(profile, name, size)
            ours_s = time.perf_counter() - started
            print(
                f"  {size:6d} MiB  llama-fit-params: layers {layers:3d}, expert blocks {experts:3d} (+{partial} part) "
                f"{fit_s:5.1f} s | layerfit: layers {our_layers:3d}, expert blocks {our_experts:3d} ({status}) "
                f"{ours_s:5.1f} s | {_verdict((our_layers, our_experts), (layers, experts))}"
            )
    finally:
        server.terminate()
        server.wait(timeout=10)
