"""The GPUStack adapter on GPUStack-shaped dicts and attribute objects (no ``gpustack`` needed).

Allocatable resources are worked out by hand from tests/fixtures/gpustack_instances.json.
"""

from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace
from typing import Any

import pytest
from gpustack_fixtures import INSTANCES, MODEL, WORKERS

from layerfit.domain import DeviceAssignment, GiB, MemoryProfile, ModelKind, Policy
from layerfit.errors import InputError
from layerfit.gpustack import (
    LayerfitGGUFSelector,
    candidate_dict,
    cluster_from_gpustack,
    config_from_gpustack,
    deployment_from_gpustack,
    schedule_candidates,
)
from layerfit.gpustack.messages import gpustack_text
from layerfit.gpustack.parser_table import table_rows
from layerfit.gpustack.resources import allocated_by_instances
from layerfit.memory import make_layout
from layerfit.planning.planner import evaluate


def as_objects(value: Any) -> Any:
    """The same data as attribute objects, the way GPUStack's own classes expose it."""
    if isinstance(value, dict):
        if value and all(key.isdigit() for key in value):
            return {int(key): as_objects(item) for key, item in value.items()}
        return SimpleNamespace(**{key: as_objects(item) for key, item in value.items()})
    if isinstance(value, list):
        return [as_objects(item) for item in value]
    return value


@pytest.mark.parametrize("shape", ["dicts", "objects"])
def test_allocatable_from_running_instances(shape: str) -> None:
    workers = WORKERS if shape == "dicts" else as_objects(WORKERS)
    instances = INSTANCES if shape == "dicts" else as_objects(INSTANCES)
    a, b, mac, d = cluster_from_gpustack(workers, instances).workers
    # a: instance 1 holds 4 GiB RAM and 10 GiB on GPU 1; instance 2's RPC server holds 5 GiB on GPU 0
    #    (its 1 GiB RAM is not counted: GPUStack counts only VRAM for subordinate workers).
    #    RAM 64 - 4 - 2 reserved = 58; GPU 0: 24 - 5 - 1 reserved = 18; GPU 1: 24 - 10 - 1 = 13.
    assert a.allocatable_ram_bytes == 58 * GiB and a.address == "192.168.1.11" and a.labels == {"gpu": "4090"}
    assert [g.allocatable_vram_bytes for g in a.gpus] == [18 * GiB, 13 * GiB]
    # b: instances 2 (3 GiB RAM, 2 GiB VRAM) and 3 (6 GiB RAM; CPU only, so its VRAM claim is not
    #    counted): RAM 32 - 9 = 23, GPU 16 - 2 = 14.
    assert b.allocatable_ram_bytes == 23 * GiB and b.gpus[0].allocatable_vram_bytes == 14 * GiB
    # mac (mps, unified): RAM 64 - 2 = 62, less 1 reserved VRAM and 8 allocated VRAM = 53;
    #    GPU 48 - 8 - 1 = 39, capped by the pool (53): 39.
    assert mac.unified_memory and mac.gpus[0].type == "mps"
    assert (mac.gpus[0].allocatable_vram_bytes, mac.allocatable_ram_bytes) == (39 * GiB, 53 * GiB)
    # d: GPUStack's default GPU type "" is accepted; nothing runs there: RAM 16 - 1 = 15, GPU 8.
    assert d.gpus[0].type == "" and (d.allocatable_ram_bytes, d.gpus[0].allocatable_vram_bytes) == (15 * GiB, 8 * GiB)


def test_unified_pool_caps_the_gpu() -> None:
    mac = json.loads(json.dumps(WORKERS[2]))
    busy = [{"worker_id": 13, "gpu_indexes": [], "computed_resource_claim": {"ram": 40 * GiB}}]
    (worker,) = cluster_from_gpustack([mac], busy).workers
    # RAM 64 - 40 = 24, less 1 reserved VRAM = 23; GPU 48 - 1 = 47, capped by the pool: 23.
    assert (worker.allocatable_ram_bytes, worker.gpus[0].allocatable_vram_bytes) == (23 * GiB, 23 * GiB)


def test_mps_gpu_means_unified_memory_even_without_the_flag() -> None:
    mac = json.loads(json.dumps(WORKERS[2]))
    mac["status"]["memory"]["is_unified_memory"] = False
    (worker,) = cluster_from_gpustack([mac], INSTANCES).workers
    assert worker.unified_memory and worker.allocatable_ram_bytes == 53 * GiB


def test_no_instances_means_everything_but_the_reserve_is_free() -> None:
    a = cluster_from_gpustack(WORKERS).workers[0]
    assert a.allocatable_ram_bytes == 62 * GiB and [g.allocatable_vram_bytes for g in a.gpus] == [23 * GiB] * 2


def test_instance_claims_add_up_per_gpu() -> None:
    twice = [INSTANCES[0], INSTANCES[0], INSTANCES[1]]
    allocated = allocated_by_instances(twice, 11)
    assert allocated.ram == 8 * GiB and dict(allocated.vram) == {1: 20 * GiB, 0: 5 * GiB}


class _CountedInstance:
    """A model instance that counts how often its ``worker_id`` is read."""

    def __init__(self, worker_id: int) -> None:
        self._worker_id = worker_id
        self.reads = 0
        self.gpu_indexes = [0]
        self.computed_resource_claim = {"ram": GiB, "vram": {0: GiB}}

    @property
    def worker_id(self) -> int:
        self.reads += 1
        return self._worker_id


def test_running_instances_are_read_once_whatever_the_number_of_workers() -> None:
    """Each worker's allocation was added up over every instance: 10,000 workers and as many
    instances took minutes (8 s at 2,000); now one pass over the instances."""
    workers = [
        {"id": i, "name": f"w{i}", "status": {"memory": {"total": 4 * GiB}, "gpu_devices": [_gpu(0, 2)]}}
        for i in range(300)
    ]
    instances = [_CountedInstance(i) for i in range(300)]
    cluster = cluster_from_gpustack(workers, instances)
    assert max(instance.reads for instance in instances) == 1
    assert all(w.allocatable_ram_bytes == 3 * GiB and w.gpus[0].allocatable_vram_bytes == GiB for w in cluster.workers)


def _gpu(index: int, gib: int) -> dict[str, Any]:
    return {"index": index, "type": "cuda", "name": "g", "memory": {"total": gib * GiB}}


def test_bad_claims_name_the_field() -> None:
    bad = [{"worker_id": 11, "gpu_indexes": [0], "computed_resource_claim": {"ram": 1, "vram": {"0": -5}}}]
    with pytest.raises(InputError, match=r"model_instances\[0\]\.computed_resource_claim\.vram"):
        cluster_from_gpustack(WORKERS, bad)
    with pytest.raises(InputError, match=r"status\.memory\.total"):
        cluster_from_gpustack([{"name": "x", "status": {}}])


def _with(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """A deep copy of ``value`` with the item at ``path`` replaced."""
    copy = json.loads(json.dumps(value))
    target = copy
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = new
    return copy


@pytest.mark.parametrize(
    ("workers", "instances", "message"),
    [
        (-1, [], "workers: expected a list, got int -1"),
        (WORKERS, True, "model_instances: expected a list, got bool True"),
        (
            _with(WORKERS, (1, "status", "gpu_devices"), 1.5),
            [],
            r"worker\[gpustack-b\]\.status\.gpu_devices: expected a list",
        ),
        (_with(WORKERS, (0, "labels"), [None]), [], r"worker\[gpustack-a\]\.labels: expected a mapping, got list"),
        (
            _with(WORKERS, (1, "system_reserved", "ram"), float("inf")),
            [],
            r"system_reserved\.ram: expected an integer, got inf",
        ),
        (
            _with(WORKERS, (0, "status", "gpu_devices", 0, "memory", "total"), 1.5),
            [],
            r"memory\.total: expected an integer, got 1\.5",
        ),
        (
            _with(WORKERS, (0, "status", "gpu_devices", 0, "index"), True),
            [],
            r"gpu_devices\[0\]\.index: expected an integer, got True",
        ),
        # GPUStack only warns on a GPU without an index, then fails building the claim; its position
        # in the list was taken as its index, naming a GPU the worker does not report
        (
            _with(WORKERS, (0, "status", "gpu_devices", 1, "index"), None),
            [],
            r"worker\[gpustack-a\]\.status\.gpu_devices\[1\]\.index: missing",
        ),
        (_with(WORKERS, (1, "status"), None), [], r"worker\[gpustack-b\]\.status\.memory\.total: missing"),
        (_with(WORKERS, (0, "name"), ""), [], r"worker\[id=11\]\.name: missing or empty"),
        # not GPUStack objects at all: every field read as absent, so an instance was ignored
        (WORKERS, [*INSTANCES, "instance-9"], r"model_instances\[4\]: expected a GPUStack object or a mapping"),
        ([*WORKERS, 5], [], r"workers\[4\]: expected a GPUStack object or a mapping, got int 5"),
        (WORKERS, _with(INSTANCES, (0, "computed_resource_claim", "vram"), 7), r"vram: expected a mapping, got int 7"),
        (
            WORKERS,
            _with(INSTANCES, (1, "computed_resource_claim", "vram", "0"), float("nan")),
            r"vram\['0'\]: expected an integer, got nan",
        ),
        (
            WORKERS,
            _with(INSTANCES, (1, "distributed_servers", "subordinate_workers"), "x"),
            r"model_instances\[1\]\.distributed_servers: expected a list",
        ),
    ],
)
def test_mistyped_gpustack_fields_are_refused_naming_them(workers: Any, instances: Any, message: str) -> None:
    """Every kind of wrong value the GPUStack fuzzing found raised TypeError or OverflowError."""
    with pytest.raises(InputError, match=message):
        cluster_from_gpustack(workers, instances)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"categories": -1}, "categories: expected a list, got int -1"),
        ({"gpu_selector": {"gpu_ids": 5}}, r"gpu_selector\.gpu_ids: expected a list, got int 5"),
        (
            {"gpu_selector": {"gpu_ids": ["gpustack-a:cuda:0"], "gpus_per_replica": "two"}},
            "gpus_per_replica: expected an",
        ),
        ({"replicas": "many"}, "replicas: expected an integer, got 'many'"),
    ],
)
def test_mistyped_gpustack_model_fields_are_refused_naming_them(change: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        deployment_from_gpustack({**MODEL, **change}, profile=MemoryProfile.uniform(4, GiB, 0))


def test_model_to_deployment_and_config() -> None:
    profile = MemoryProfile.uniform(4, GiB, 0)
    deployment = deployment_from_gpustack(as_objects(MODEL), profile=profile)
    assert deployment.name == "llama-70b-q4" and deployment.params.ctx_size == 8192 and deployment.params.parallel == 2
    assert deployment.distributed_inference_across_workers and deployment.cpu_offloading
    assert config_from_gpustack(MODEL).policy is Policy.SPREAD
    assert config_from_gpustack({**MODEL, "placement_strategy": "binpack"}).policy is Policy.BINPACK
    with pytest.raises(InputError, match="placement_strategy"):
        config_from_gpustack({**MODEL, "placement_strategy": "random"})
    selected = deployment_from_gpustack(
        {**MODEL, "gpu_selector": {"gpu_ids": ["gpustack-a:cuda:1"]}, "categories": ["image"]}, profile=profile
    )
    assert selected.gpu_selection is not None and str(selected.gpu_selection[0]) == "gpustack-a:cuda:1"
    assert selected.kind is ModelKind.IMAGE
    # GPUStack leaves cpu_offloading None when unset, and its selector reads None as "not allowed".
    unset = deployment_from_gpustack({**MODEL, "cpu_offloading": None}, profile=profile)
    assert not unset.cpu_offloading


def test_gpus_per_replica_takes_the_freest_selected_gpus() -> None:
    cluster = cluster_from_gpustack(WORKERS, INSTANCES)
    ids = ["gpustack-a:cuda:0", "gpustack-a:cuda:1", "gpustack-b:cuda:0"]
    model = {**MODEL, "gpu_selector": {"gpu_ids": ids, "gpus_per_replica": 2}}
    deployment = deployment_from_gpustack(model, profile=MemoryProfile.uniform(4, GiB, 0), cluster=cluster)
    # free: a:0 18 GiB, a:1 13 GiB, b:0 14 GiB -> a:0 and b:0
    assert [str(ref) for ref in deployment.gpu_selection or ()] == ["gpustack-a:cuda:0", "gpustack-b:cuda:0"]
    every = deployment_from_gpustack(
        {**model, "gpu_selector": {"gpu_ids": ids}}, profile=MemoryProfile.uniform(4, 1, 0)
    )
    assert len(every.gpu_selection or ()) == 3


def test_selection_keeps_the_models_order() -> None:
    # GPUStack's pre-check takes the selection grouped by worker in the model's order and names the
    # first GPU too small for a layer; sorted ids named a:0 where GPUStack names b:1.
    ids = ["gpustack-b:cuda:0", "gpustack-a:cuda:0", "gpustack-a:cuda:1"]
    model = {**MODEL, "gpu_selector": {"gpu_ids": ids}}
    deployment = deployment_from_gpustack(model, profile=MemoryProfile.uniform(4, GiB, 0))
    assert [str(ref) for ref in deployment.gpu_selection or ()] == ids


def test_candidate_shape() -> None:
    cluster = cluster_from_gpustack(WORKERS)
    profile = MemoryProfile.uniform(10, GiB, 0, output_weight_bytes=GiB // 2, rpc_host_fixed_bytes=100)
    deployment = deployment_from_gpustack(MODEL, profile=profile)
    layout = make_layout(
        "gpustack-a",
        10,
        [
            DeviceAssignment(worker="gpustack-b", gpu_index=0, blocks=4),
            DeviceAssignment(worker="gpustack-a", gpu_index=0, blocks=6),
        ],
    )
    plan = evaluate(cluster, deployment, layout)
    assert plan.best is not None
    candidate = candidate_dict(plan.best, cluster, {w["name"]: w for w in WORKERS})
    assert candidate["worker"]["id"] == 11 and candidate["gpu_indexes"] == [0]
    assert (candidate["gpu_type"], candidate["overcommit"]) == ("cuda", False)
    claim = candidate["computed_resource_claim"]
    # 11 layers on GPUs of 11; -ts as integer layer counts in llama.cpp order (RPC first)
    assert (claim["offload_layers"], claim["total_layers"], claim["tensor_split"]) == (11, 11, [4, 7])
    assert claim["vram"] == {0: 6 * GiB + GiB // 2}
    (sub,) = candidate["subordinate_workers"]
    assert (sub["worker_id"], sub["worker_ip"], sub["worker_ifname"], sub["gpu_indexes"]) == (
        12,
        "192.168.1.12",
        "eth1",
        [0],
    )
    assert sub["gpu_type"] == "cuda" and sub["computed_resource_claim"]["offload_layers"] == 4
    assert sub["computed_resource_claim"]["vram"] == {0: 4 * GiB}
    assert sub["computed_resource_claim"]["ram"] == 100


def test_running_instances_keep_a_placement_off_busy_gpus() -> None:
    # 17 GiB of blocks. Free, it fits either 4090 (23 GiB each) and not the 4080 (16 GiB). With the
    # instances running, a:0 has 18 GiB, a:1 13 GiB and b:0 14 GiB: only a:0 can take it.
    profile = MemoryProfile.uniform(17, GiB, 0)
    model = {**MODEL, "distributed_inference_across_workers": False, "placement_strategy": "binpack"}
    workers = WORKERS[:2]
    free, _ = schedule_candidates(workers, model, profile=profile)
    busy, plan = schedule_candidates(workers, model, INSTANCES, profile=profile)
    placed = {(c["worker"]["name"], tuple(c["gpu_indexes"])) for c in free}
    assert placed and placed <= {("gpustack-a", (0,)), ("gpustack-a", (1,))}
    assert [(c["worker"]["name"], c["gpu_indexes"]) for c in busy] == [("gpustack-a", [0])]
    assert plan.claims is not None and plan.claims.vram_bytes("gpustack-a", 0) == 17 * GiB


def test_selector_interface_with_dicts() -> None:
    profile = MemoryProfile.uniform(12, GiB, 0)
    selector = LayerfitGGUFSelector(MODEL, INSTANCES, None, profile=profile, output="dicts")
    candidates = asyncio.run(selector.select_candidates(WORKERS))
    assert candidates and all(c["computed_resource_claim"]["offload_layers"] == 13 for c in candidates)
    assert selector.get_messages() == [] and selector.plan is not None and selector.get_resource_claim() is None
    assert asyncio.run(selector.select_candidates([])) == []


def test_selector_explains_when_nothing_fits() -> None:
    huge = MemoryProfile.uniform(40, 4 * GiB, 0)
    model = {**MODEL, "cpu_offloading": False, "distributed_inference_across_workers": False}
    selector = LayerfitGGUFSelector(model, INSTANCES, profile=huge, output="dicts")
    assert asyncio.run(selector.select_candidates(WORKERS)) == []
    assert selector.get_messages() and all(isinstance(m, str) and m for m in selector.get_messages())
    assert selector.reasons and any(reason.kind.value == "no_candidate" for reason in selector.reasons)


def test_selector_needs_a_model_file_or_profile() -> None:
    selector = LayerfitGGUFSelector({**MODEL, "local_path": "/nonexistent.gguf"}, [])
    with pytest.raises(InputError, match="model llama-70b-q4: no memory profile"):
        asyncio.run(selector.select_candidates(WORKERS))


PROFILE = MemoryProfile.uniform(4, GiB, 0)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"profile": {"n_blocks": 4}}, "profile: expected a MemoryProfile or a function of the model, got dict"),
        ({"profile": lambda model: None}, "profile: the profile function returned NoneType, not a MemoryProfile"),
        ({"profile": PROFILE, "config": {"policy": "spread"}}, "config: expected a PlannerConfig, got dict"),
        ({"profile": PROFILE, "model": None}, "model: expected a GPUStack object or a mapping, got NoneType"),
        ({"profile": PROFILE, "model": {**MODEL, "name": None}}, "model.name: missing or empty"),
    ],
)
def test_wrong_selector_arguments_are_refused_naming_them(arguments: dict[str, Any], message: str) -> None:
    """They raised TypeError ('dict' object is not callable), AttributeError (no model_copy), or a
    message about something else ('give exactly one of gguf_path or profile', 'name: missing')."""
    model = arguments.pop("model", MODEL)
    with pytest.raises(InputError, match=re.escape(message)):
        asyncio.run(LayerfitGGUFSelector(model, [], **arguments).select_candidates(WORKERS))


def test_no_model_instances_is_none_of_them() -> None:
    selector = LayerfitGGUFSelector(MODEL, None, profile=PROFILE)  # type: ignore[arg-type]
    assert asyncio.run(selector.select_candidates(WORKERS))


def test_messages_in_gpustack_event_format() -> None:
    text = "The model requires approximately 99.68 GiB VRAM. The largest worker provides 47.00 GiB VRAM."
    expected = "- The model requires approximately 99.68 GiB VRAM.\n- The largest worker provides 47.0 GiB VRAM."
    assert gpustack_text(text) == expected


def test_parser_table_rows_follow_gguf_parser() -> None:
    profile = MemoryProfile.uniform(4, GiB, 0, output_weight_bytes=GiB // 2)
    none, three, every = table_rows(profile, [0, 3, 5], [1.0, 1.0], rpc_count=1)
    # -ngl 0: nothing on GPUs, and GPUStack clears the VRAM of that row
    assert [v[:2] for v in none.vrams] == [(0, 0), (0, 0)] and none.ram[1] == 4 * GiB + GiB // 2
    # -ngl 3, output last: the last 3 blocks over two equal shares, llama.cpp's rule gives the first
    # device (the RPC one) layers at fractions 0 and 1/3, the second 2/3; the output layer stays
    assert [v[2] for v in three.vrams] == [2, 1] and three.ram[1] == GiB + GiB // 2
    # every layer: 5 layers at fractions 0, .2, .4 | .6, .8: blocks 0-2 on the RPC device, block 3
    # and the output layer on the last
    assert [v[2] for v in every.vrams] == [3, 2] and every.vrams[1][1] == GiB + GiB // 2


def test_a_selection_naming_a_worker_gpustack_did_not_pass_places_nothing_and_says_why() -> None:
    """GPUStack's scheduler drops workers (not ready, filtered) before its selector runs, so the
    selection may name one that is not given: no candidate and GPUStack's pre-check words, where
    the solver raised an InputError."""
    profile = MemoryProfile.uniform(4, GiB, 0)
    model = {**MODEL, "gpu_selector": {"gpu_ids": ["gpustack-z:cuda:0"]}}
    selector = LayerfitGGUFSelector(model, [], profile=profile, output="dicts")
    assert asyncio.run(selector.select_candidates(WORKERS)) == []
    (message,) = selector.get_messages()
    assert message.startswith("Selected GPUs need at least") and selector.plan is not None
    assert any(reason.worker == "gpustack-z" for reason in selector.reasons)
    found, plan = schedule_candidates(
        WORKERS, {**MODEL, "gpu_selector": {"gpu_ids": ["gpustack-a:cuda:9"]}}, profile=profile
    )
    assert found == [] and plan.status.value == "infeasible"


def test_a_resource_view_without_allocated_is_refused_naming_it() -> None:
    with pytest.raises(InputError, match=r"resource_view: expected GPUStack's ResourceView"):
        cluster_from_gpustack(WORKERS, resource_view={"allocated": {}})
