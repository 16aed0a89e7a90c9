"""Layout -> llama.cpp command lines: one ``llama-server`` and one ``rpc-server`` per RPC device.

The main command pins the layout exactly: integer per-device layer counts as ``-ts`` with the
matching ``-ngl``, the device list in llama.cpp order (RPC servers first), and, on builds that have
it, ``--fit off`` so that llama.cpp does not re-fit what was decided here. Which flags a build has
(``--fit``, ``--n-cpu-moe``, ``-ot``, ``-lm``, ``-fa``'s value) follows ``PlannerConfig.llama_cpp_build``
(``layerfit.llamacpp.builds``). Device names follow ggml: ``CUDA0``, ``ROCm1``,
``Vulkan0``, ... for local GPUs, ``RPC0``, ``RPC1``, ... for the ``--rpc`` endpoints in order.

The CUDA, HIP, MUSA and CANN backends abort at start-up when they see more than 16 devices
(``GGML_ASSERT(physical_device_count <= GGML_CUDA_MAX_DEVICES)``, ``GGML_CANN_MAX_DEVICES``, llama.cpp
b11434's source). On a worker with more GPUs than that, every process is given only the GPUs it uses
through the backend's visibility variable (``CUDA_VISIBLE_DEVICES=16,17``), and ``--device`` names
them by their place in that list (``CUDA0,CUDA1``).

A GPU's index is the one its worker reports (GPUStack takes it from NVML: PCI bus order). CUDA
numbers devices fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so on a worker whose CUDA
GPUs differ (name or size) ``CUDA1`` may be another GPU than index 1; a process there that uses a
CUDA GPU, and every process shown CUDA GPUs by ``CUDA_VISIBLE_DEVICES``, gets ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from functools import lru_cache

from layerfit.domain.choices import ModelKind
from layerfit.domain.cluster import Cluster, Worker
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.domain.params import LlamaParams
from layerfit.domain.plan import Command
from layerfit.errors import InputError
from layerfit.llamacpp.builds import check_flags, flash_attn_args, load_mode_args
from layerfit.llamacpp.expert_launch import expert_args
from layerfit.llamacpp.flags import kind_switches
from layerfit.memory import gpu_layers_flag, tensor_split_counts

_BACKEND_NAMES = {
    "cuda": "CUDA",
    "rocm": "ROCm",
    "dcu": "ROCm",
    "musa": "MUSA",
    "metal": "MTL",
    "mps": "MTL",
    "vulkan": "Vulkan",
    "sycl": "SYCL",
    "cann": "CANN",
    "npu": "CANN",
    "mlu": "MLU",
}


BACKEND_MAX_DEVICES = 16
"""Devices the CUDA/HIP/MUSA and CANN backends take; more visible ones abort the process at start-up."""
_VISIBILITY = {
    "cuda": "CUDA_VISIBLE_DEVICES",
    "rocm": "HIP_VISIBLE_DEVICES",
    "dcu": "HIP_VISIBLE_DEVICES",
    "musa": "MUSA_VISIBLE_DEVICES",
    "cann": "ASCEND_RT_VISIBLE_DEVICES",
    "npu": "ASCEND_RT_VISIBLE_DEVICES",
}
"""The variable that limits what each capped backend sees, by GPU type."""
CUDA_ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
"""What makes CUDA number a worker's GPUs as NVML (and so GPUStack) does."""


def device_name(gpu_type: str, index: int) -> str:
    """ggml's name for a local GPU: ``CUDA0``, ``ROCm1``, ..."""
    return f"{_BACKEND_NAMES.get(gpu_type, gpu_type.upper())}{index}"


def visibility(worker: Worker, gpu_indexes: Sequence[int]) -> dict[str, str]:
    """The environment that keeps a process on ``worker`` that uses ``gpu_indexes`` under its
    backends' device cap: for each capped backend of which the worker has a GPU at index 16 or
    above, the GPUs of that backend the process uses (none: an empty list, so that the backend's
    start-up sees no device). With a CUDA list that is not empty, or where the process uses a CUDA
    GPU of a worker whose CUDA GPUs differ, ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (see the module's
    docstring). Empty otherwise."""
    env: dict[str, str] = {}
    for gpu_type in sorted({gpu.type for gpu in worker.gpus} & _VISIBILITY.keys()):
        if max(gpu.index for gpu in worker.gpus if gpu.type == gpu_type) >= BACKEND_MAX_DEVICES:
            shown = [index for index in gpu_indexes if worker.gpu(index).type == gpu_type]
            env[_VISIBILITY[gpu_type]] = ",".join(str(index) for index in shown)
    uses_cuda = any(worker.gpu(index).type == "cuda" for index in gpu_indexes)
    if env.get("CUDA_VISIBLE_DEVICES") or (uses_cuda and mixed_cuda_gpus(worker)):
        env.update(CUDA_ORDER)
    return env


def mixed_cuda_gpus(worker: Worker) -> bool:
    """Whether the worker's CUDA GPUs are not all of one kind (name and total VRAM), so that CUDA's
    fastest-first numbering may differ from their indexes."""
    return len({(gpu.name, gpu.total_vram_bytes) for gpu in worker.gpus if gpu.type == "cuda"}) > 1


def local_device_names(worker: Worker, gpu_indexes: Sequence[int]) -> tuple[str, ...]:
    """What a process on ``worker`` that uses ``gpu_indexes`` calls them: ggml's name of each GPU's
    index, or of its place in the visibility list that ``visibility`` gives the process."""
    restricted = visibility(worker, gpu_indexes)
    names = []
    for index in gpu_indexes:
        gpu_type = worker.gpu(index).type
        shown = restricted.get(_VISIBILITY.get(gpu_type, ""))
        llama_index = index if shown is None else [int(i) for i in shown.split(",")].index(index)
        names.append(device_name(gpu_type, llama_index))
    return tuple(names)


def rpc_endpoints(cluster: Cluster, layout: Layout, config: PlannerConfig = PlannerConfig()) -> tuple[str, ...]:
    """``host:port`` of each RPC device, in layout order; ports count up per worker from the base."""
    next_port: dict[str, int] = {}
    endpoints: list[str] = []
    for device in layout.rpc_devices:
        port = next_port.get(device.worker, config.rpc_port_base)
        next_port[device.worker] = port + 1
        endpoints.append(f"{cluster.worker(device.worker).host}:{port}")
    return tuple(endpoints)


def llama_device_names(cluster: Cluster, layout: Layout) -> tuple[str, ...]:
    """What ``--device`` calls each device of the layout, in layout order: ``RPC0``.., then ``CUDA0``.."""
    main = cluster.worker(layout.main_worker)
    local = local_device_names(main, [device.gpu_index for device in layout.local_devices])
    return (*(f"RPC{i}" for i in range(len(layout.rpc_devices))), *local)


def check_deployment_flags(deployment: Deployment, config: PlannerConfig) -> None:
    """Refuse, before any search, the deployment's own settings that ``config.llama_cpp_build`` cannot
    be given: its tensor overrides, flash attention, load mode (``InputError`` names the deployment
    and says why). The flags a layout adds (experts kept on the host) are checked with its commands."""
    try:
        _check_own_flags(deployment.params, config.build)
    except InputError as error:
        raise InputError(f"deployment[{deployment.name}] {error.field}", error.problem) from None


def _check_own_flags(params: LlamaParams, build: int) -> None:
    check_flags(params.extra, build, "a tensor override of the deployment")
    flash_attn_args(params.flash_attn, build)
    load_mode_args(params.load_mode, build)


@lru_cache(maxsize=1024)
def _own_args(params: LlamaParams) -> tuple[str, ...]:
    """The deployment's own flags but load mode and flash attention (written per build), once per
    deployment: a fleet writes thousands of commands from a few parameter sets."""
    return tuple(params.model_copy(update={"load_mode": None, "flash_attn": "auto"}).to_args())


def model_args(location: str) -> list[str]:
    """How ``llama-server`` is told the model: ``-m PATH``; a Hugging Face file at its default
    revision by ``-hfr ORG/REPO -hff FILE`` (llama.cpp fetches it, reading ``HF_TOKEN`` and
    ``HF_ENDPOINT`` itself); any other URL (``ms://``, another revision, ``https://``) by
    ``-mu URL``, its resolved download URL."""
    from layerfit.io.files import is_remote

    if not is_remote(location):
        return ["-m", location]
    from layerfit.remote.locations import DEFAULT_REVISION, parse_location

    remote = parse_location(location)
    if remote.hub == "hf" and remote.revision == DEFAULT_REVISION["hf"] and remote.repo and remote.file:
        return ["-hfr", remote.repo, "-hff", remote.file]
    return ["-mu", remote.url]


def server_command(
    cluster: Cluster,
    layout: Layout,
    model_path: str,
    params: LlamaParams,
    config: PlannerConfig = PlannerConfig(),
    *,
    program: str = "llama-server",
    extra_args: tuple[str, ...] = (),
    expertless_blocks: Collection[int] = (),
    kind: ModelKind = ModelKind.LLM,
) -> Command:
    """The ``llama-server`` command on the main worker that reproduces ``layout`` exactly.

    Experts kept on the host get ``--n-cpu-moe``/``-ot`` (``expertless_blocks``: blocks without
    expert tensors, which ``--n-cpu-moe`` may cover); the user's own tensor overrides are passed on
    as given instead (the layout then follows them). An embedding or reranker ``kind`` gets
    ``--embedding``/``--rerank`` unless the deployment's own flags carry one. Every flag suits
    ``config.llama_cpp_build``: ``InputError`` names a flag the build lacks (or may lack) and why.
    """
    main = cluster.worker(layout.main_worker)
    build = config.build
    _check_own_flags(params, build)
    own_args = _own_args(params)
    argv: list[str] = [*model_args(model_path), *own_args, *kind_switches(kind, params.extra)]
    argv += flash_attn_args(params.flash_attn, build)
    argv += load_mode_args(params.load_mode, build)
    argv += ["-ngl", str(gpu_layers_flag(layout))]
    if not layout.devices:
        argv += ["--device", "none"]
    else:
        endpoints = rpc_endpoints(cluster, layout, config)
        argv += ["-ts", ",".join(str(count) for count in tensor_split_counts(layout))]
        argv += ["--device", ",".join(llama_device_names(cluster, layout))]
        if endpoints:
            argv += ["--rpc", ",".join(endpoints)]
    if not params.expert_flags().given:
        experts = expert_args(layout, expertless_blocks)
        check_flags(experts, build, "the layout keeps experts of GPU blocks in host RAM")
        argv += experts
    if config.emits_fit_off:
        argv += ["--fit", "off"]
    argv += list(extra_args)
    env = visibility(main, [device.gpu_index for device in layout.local_devices])
    return Command(worker=main.name, program=program, argv=tuple(argv), env=env)


def unknown_bind_host(worker: str) -> str:
    """What stands for the listen address of a worker whose IPv4 address the cluster does not give."""
    return f"<IPv4-of-{worker}>"


def rpc_server_command(
    cluster: Cluster, device: DeviceAssignment, port: int, *, program: str = "rpc-server", bind_host: str | None = None
) -> Command:
    """One ``rpc-server`` serving one GPU of a non-main worker, listening on that worker's own address only.

    llama.cpp's rpc-server has no authentication, so it never binds 0.0.0.0; the address is the
    worker's ``rpc_host``, else its ``address`` (an IPv4 literal: rpc-server accepts no host names).
    Without either, the command carries a placeholder (``unknown_bind_host``) that rpc-server rejects:
    it fails closed rather than listening everywhere.
    """
    worker = cluster.worker(device.worker)
    host = bind_host or worker.rpc_bind_host or unknown_bind_host(worker.name)
    (name,) = local_device_names(worker, [device.gpu_index])
    argv = ("--host", host, "--port", str(port), "--device", name)
    return Command(worker=device.worker, program=program, argv=argv, env=visibility(worker, [device.gpu_index]))


def commands(
    cluster: Cluster,
    layout: Layout,
    model_path: str,
    params: LlamaParams,
    config: PlannerConfig = PlannerConfig(),
    *,
    programs: Mapping[str, str] | None = None,
    expertless_blocks: Collection[int] = (),
    server_args: tuple[str, ...] = (),
    kind: ModelKind = ModelKind.LLM,
) -> tuple[Command, ...]:
    """RPC servers first (they must be up before the main process connects), then ``llama-server``."""
    names = {"server": "llama-server", "rpc": "rpc-server", **(programs or {})}
    unknown = set(names) - {"server", "rpc"}
    if unknown:
        raise InputError("programs", f"unknown keys {sorted(unknown)}; use 'server' and 'rpc'")
    endpoints = rpc_endpoints(cluster, layout, config)
    rpc = tuple(
        rpc_server_command(cluster, device, int(endpoint.rsplit(":", 1)[1]), program=names["rpc"])
        for device, endpoint in zip(layout.rpc_devices, endpoints, strict=True)
    )
    server = server_command(
        cluster,
        layout,
        model_path,
        params,
        config,
        program=names["server"],
        expertless_blocks=expertless_blocks,
        extra_args=server_args,
        kind=kind,
    )
    return (*rpc, server)
