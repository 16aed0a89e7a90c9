"""Each constraint family of the CP-SAT model (``solver/model/constraints/``) alone: a layout the
whole model accepts, and one it refuses that the model without that family accepts, so the family
is what refuses it (the test-first pattern of one feasible and one infeasible case per constraint).

The decisions of a layout (main worker, slot assignments, block counts, the output layer, experts
on the host) are fixed with ``decision_values``; a case may then change one decision value the
layout type cannot express (two main workers, the experts of a block on the host).

The profile is ``P`` unless a case says otherwise: 10 blocks of 100 bytes (weights 90 + KV 10), an
output layer of 50, 200 of fixed cost on every GPU: one GPU holding k blocks and the output needs
``100k + 250``; the host keeps 100 per block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from ortools.sat.python import cp_model

from layerfit.budget.work import Work
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    DeviceAssignment,
    Gpu,
    Layout,
    LlamaParams,
    MemoryProfile,
    MiB,
    PlannerConfig,
    RoleCosts,
    Worker,
)
from layerfit.memory import make_layout
from layerfit.solver.model import constraints
from layerfit.solver.model.build import BuiltModel
from layerfit.solver.model.decode import decision_values
from layerfit.solver.model.instance import build_instance
from layerfit.solver.model.runner import run
from layerfit.solver.model.variables import IntVar, Variables, make_variables
from layerfit.speed.deployment import deployment_speed

P = MemoryProfile.uniform(10, 90, 10, output_weight_bytes=50, gpu_fixed_bytes=200)
CONFIG = PlannerConfig(time_limit_s=10.0, seed=1, alternatives=0)
FAMILIES = ("placement", "roles", "layers", "rules", "tensor_split", "vram", "ram", "experts", "speed", "symmetry")
Change = Callable[[Variables, dict[IntVar, int]], None]


def worker(name: str, *vram: int, ram: int = 10_000) -> Worker:
    gpus = tuple(Gpu(index=i, total_vram_bytes=v, allocatable_vram_bytes=v) for i, v in enumerate(vram))
    return Worker(id=name, name=name, total_ram_bytes=ram, allocatable_ram_bytes=ram, gpus=gpus)


def on(worker_name: str, index: int, blocks: int) -> DeviceAssignment:
    return DeviceAssignment(worker=worker_name, gpu_index=index, blocks=blocks)


def accepted(
    cluster: Cluster,
    deployment: Deployment,
    layout: Layout,
    *,
    without: str | None = None,
    change: Change | None = None,
) -> bool:
    """Whether the model (every family, or all but ``without``) accepts the layout's decisions."""
    assert deployment.profile is not None
    instance = build_instance(cluster, deployment, deployment.profile, CONFIG, experts=deployment.profile.is_moe)
    model = cp_model.CpModel()
    variables = make_variables(model, instance)
    for family in FAMILIES:
        if family == without or (family == "experts" and instance.experts is None):
            continue
        module = getattr(constraints, family)
        if family == "experts":
            module.post(model, instance.experts, variables)
        else:
            module.post(model, instance, variables)
    values = decision_values(instance, variables, layout)
    assert values is not None, "the layout must be expressible in the model"
    if change is not None:
        change(variables, values)
    for var, value in values.items():
        model.add(var == value)
    built = BuiltModel(instance=instance, model=model, variables=variables, symmetry_broken=without != "symmetry")
    return run(built, CONFIG, Work.of(CONFIG.time_limit_s)).found


def _two_mains(variables: Variables, values: dict[IntVar, int]) -> None:
    for chosen in variables.main.values():
        values[chosen] = 1


def _experts_of_a_host_block(variables: Variables, values: dict[IntVar, int]) -> None:
    values[variables.host_experts[0]] = 1  # block 0 stays on the host whole: it has no GPU experts


_ROLE = RoleCosts(fixed_bytes=0, compute=ComputeBuffer(full_offload_bytes=0, partial_offload_bytes=0))
_MAIN_COMPUTE = ComputeBuffer(full_offload_bytes=100, partial_offload_bytes=100)
_MAIN_COSTS_MORE = P.model_copy(update={"main": RoleCosts(fixed_bytes=200, compute=_MAIN_COMPUTE)})
"""The main GPU's compute buffer is 100 more than a local GPU's (200 fixed on both)."""
MOE = MemoryProfile(
    block_weight_bytes=(110,) * 4,
    block_kv_bytes=(0,) * 4,
    block_expert_bytes=(100,) * 4,
    output_weight_bytes=5,
    main=_ROLE,
    local=_ROLE,
    rpc=_ROLE,
)
"""Blocks of a dense part of 10 and experts of 100, no fixed costs."""


def _between_speeds(cluster: Cluster, fast: Layout, slow: Layout) -> Deployment:
    """A deployment of ``P`` in MiB whose minimum speed lies halfway between the two layouts' predictions."""
    plain = Deployment(name="m", profile=_P_MIB)
    rates = [deployment_speed(cluster, plain, _P_MIB, layout).decode_tokens_per_s for layout in (fast, slow)]
    assert rates[0] > rates[1] * 1.2, "the case needs two clearly different speeds"
    return plain.model_copy(update={"min_decode_tokens_per_s": (rates[0] + rates[1]) / 2})


_P_MIB = MemoryProfile.uniform(10, 90 * MiB, 10 * MiB, output_weight_bytes=50 * MiB, gpu_fixed_bytes=200 * MiB)
"""``P`` in MiB: large enough that reading the weights, not the cost per layer, sets the time."""
_SPEED_CLUSTER = Cluster(workers=(worker("a", 2000 * MiB, ram=10_000 * MiB),))
_ALL_ON_GPU = make_layout("a", 10, [on("a", 0, 10)])
_ALL_ON_HOST = Layout(main_worker="a", n_blocks=10, devices=(), output_offloaded=False)


@dataclass(frozen=True)
class Case:
    family: str
    why: str
    cluster: Cluster
    deployment: Deployment
    good: Layout
    bad: Layout
    change: Change | None = None


CASES = [
    Case(
        "placement",
        "exactly one main worker: making both workers main is refused",
        Cluster(workers=(worker("a", 2000), worker("b", 2000))),
        Deployment(name="m", profile=P),
        make_layout("a", 10, [on("a", 0, 10)]),
        make_layout("a", 10, [on("a", 0, 10)]),
        _two_mains,
    ),
    Case(
        "roles",
        # the main GPU (last, with the output) needs 100*5 + 250 + 100 = 850 > 800; as a local
        # GPU's costs it would be 750: only the roles say which costs apply
        "the last local device is the main GPU and pays the main role's compute buffer",
        Cluster(workers=(worker("a", 800, 800),)),
        Deployment(name="m", profile=_MAIN_COSTS_MORE),
        make_layout("a", 10, [on("a", 0, 6), on("a", 1, 4)]),
        make_layout("a", 10, [on("a", 0, 5), on("a", 1, 5)]),
    ),
    Case(
        "layers",
        "output-first llama.cpp offloads the output layer whenever a GPU is used",
        Cluster(workers=(worker("a", 2000),)),
        Deployment(name="m", profile=P),
        make_layout("a", 10, [on("a", 0, 5)]),
        Layout(main_worker="a", n_blocks=10, devices=(on("a", 0, 5),), output_offloaded=False),
    ),
    Case(
        "rules",
        "-ngl 5 is the output layer and 4 blocks: 5 blocks and the output are 6 layers",
        Cluster(workers=(worker("a", 2000),)),
        Deployment(name="m", profile=P, params=LlamaParams(n_gpu_layers=5)),
        make_layout("a", 10, [on("a", 0, 4)]),
        make_layout("a", 10, [on("a", 0, 5)]),
    ),
    Case(
        "tensor_split",
        "-ts 1,1 over 11 layers gives blocks 0-5 to the first device and 6-9 and the output to the second",
        Cluster(workers=(worker("a", 2000, 2000),)),
        Deployment(name="m", profile=P, params=LlamaParams(tensor_split=(1.0, 1.0))),
        make_layout("a", 10, [on("a", 0, 6), on("a", 1, 4)]),
        make_layout("a", 10, [on("a", 0, 5), on("a", 1, 5)]),
    ),
    Case(
        "vram",
        "9 blocks and the output need 1150 of the GPU's 1249; 10 blocks and the output 1250",
        Cluster(workers=(worker("a", 1249),)),
        Deployment(name="m", profile=P),
        make_layout("a", 10, [on("a", 0, 9)]),
        make_layout("a", 10, [on("a", 0, 10)]),
    ),
    Case(
        "ram",
        "5 blocks on the host need 500 of the worker's 599 of RAM; 6 blocks need 600",
        Cluster(workers=(worker("a", 2000, ram=599),)),
        Deployment(name="m", profile=P),
        make_layout("a", 10, [on("a", 0, 5)]),
        make_layout("a", 10, [on("a", 0, 4)]),
    ),
    Case(
        "experts",
        "only a block on a GPU keeps its experts on the host (block 0 is on the host whole)",
        Cluster(workers=(worker("a", 2000),)),
        Deployment(name="m", profile=MOE),
        make_layout("a", 4, [on("a", 0, 3)]),
        make_layout("a", 4, [on("a", 0, 3)]),
        _experts_of_a_host_block,
    ),
    Case(
        "speed",
        "a minimum speed between the two: every block on the GPU meets it, every block on the host does not",
        _SPEED_CLUSTER,
        _between_speeds(_SPEED_CLUSTER, _ALL_ON_GPU, _ALL_ON_HOST),
        _ALL_ON_GPU,
        _ALL_ON_HOST,
    ),
    Case(
        "symmetry",
        "of two identical workers the first is main before the second",
        Cluster(workers=(worker("a", 2000), worker("b", 2000))),
        Deployment(name="m", profile=P),
        make_layout("a", 10, [on("a", 0, 10)]),
        make_layout("b", 10, [on("b", 0, 10)]),
    ),
]


def test_every_constraint_family_has_a_case() -> None:
    modules = {path.stem for path in Path(constraints.__file__).parent.glob("*.py")} - {"__init__"}
    assert set(FAMILIES) == modules
    assert [case.family for case in CASES] == list(FAMILIES)


@pytest.mark.parametrize("case", CASES, ids=[case.family for case in CASES])
def test_the_family_refuses_its_infeasible_case(case: Case) -> None:
    assert accepted(case.cluster, case.deployment, case.good), f"{case.family}: the feasible case is refused"
    assert not accepted(case.cluster, case.deployment, case.bad, change=case.change), case.why
    assert accepted(case.cluster, case.deployment, case.bad, without=case.family, change=case.change), (
        f"without {case.family} the infeasible case should be accepted: another family refuses it"
    )
