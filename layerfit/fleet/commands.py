"""What to run and what to stop by hand after a fleet plan: command lines per placed replica, and
the current placements whose GPUs or workers are gone."""

from __future__ import annotations

from collections import Counter

from layerfit.check import reference_reasons
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.fleet import Fleet, FleetPlan, LostPlacement, PlacedReplica, ReplicaCommands, own_port
from layerfit.domain.speed import SpeedPrediction
from layerfit.fleet.busy import gpu_sharing
from layerfit.planning.planner import deployment_commands
from layerfit.planning.profiles import resolve_profile
from layerfit.planning.usage import use_of
from layerfit.speed.deployment import deployment_speed


def lost_placements(fleet: Fleet) -> tuple[LostPlacement, ...]:
    """Current placements that name a worker or GPU the cluster no longer has."""
    return tuple(
        LostPlacement(
            deployment=placement.deployment,
            replica=placement.replica,
            worker=placement.layout.main_worker,
            gpus=tuple(fleet.cluster.gpu_id(d.worker, d.gpu_index) for d in placement.layout.devices),
        )
        for placement in fleet.current
        if reference_reasons(fleet.cluster, placement.layout)
    )


SERVER_PORT_BASE = 8080
"""llama-server's default port; further replicas on the same worker take the next ones."""


def speeds(
    fleet: Fleet, deployments: dict[str, Deployment], plan: FleetPlan, placed: PlacedReplica
) -> dict[str, SpeedPrediction | None]:
    """A placement's predicted speed alone, and with every replica on its GPUs decoding at once."""
    deployment = deployments[placed.deployment]
    profile = resolve_profile(deployment)
    alone = deployment_speed(fleet.cluster, deployment, profile, placed.layout)
    shared = gpu_sharing(plan.placements)
    sharing = {(d.worker, d.gpu_index): shared[(d.worker, d.gpu_index)] for d in placed.layout.devices}
    busy = None
    if any(count > 1 for count in sharing.values()):
        busy = deployment_speed(fleet.cluster, deployment, profile, placed.layout, sharing)
    return {"speed": alone, "busy_speed": busy}


def with_commands(fleet: Fleet, plan: FleetPlan, config: PlannerConfig = PlannerConfig()) -> FleetPlan:
    """The plan with the command lines and device use of every placed replica, and the lost
    placements, filled in (``plan_fleet`` returns it so).

    Replicas sharing a worker must not share ports: each llama-server gets ``--port 8080, 8081, ...``
    per main worker, skipping the ports deployments set themselves (``--port``: one replica each, a
    port each), and rpc-servers take ports from
    ``config.rpc_port_base`` on, never twice in the plan. A ranged context is the one the plan chose.
    """
    if any(deployment.has_ctx_range for deployment in fleet.deployments):
        from layerfit.fleet.contexts import resolved

        fleet = resolved(fleet, plan)
    deployments = {deployment.name: deployment for deployment in fleet.deployments}
    servers_on: Counter[str] = Counter()
    rpc_ports_taken = 0
    shifted = config
    own_ports = {name: own_port(deployment) for name, deployment in deployments.items()}
    taken = {int(port) for port in own_ports.values() if port is not None and port.isdigit()}
    per_replica = []
    for placed in plan.placements:
        deployment = deployments[placed.deployment]
        worker = placed.layout.main_worker
        port: tuple[str, ...] = ()
        if own_ports[placed.deployment] is None:  # the next port no deployment took for itself
            while SERVER_PORT_BASE + servers_on[worker] in taken:
                servers_on[worker] += 1
            port = ("--port", str(SERVER_PORT_BASE + servers_on[worker]))
            servers_on[worker] += 1
        if shifted.rpc_port_base != config.rpc_port_base + rpc_ports_taken:
            shifted = config.model_copy(update={"rpc_port_base": config.rpc_port_base + rpc_ports_taken})
        rpc_ports_taken += len(placed.layout.rpc_devices)
        lines = deployment_commands(
            fleet.cluster, placed.layout, deployment, resolve_profile(deployment), shifted, server_args=port
        )
        per_replica.append(ReplicaCommands(deployment=placed.deployment, replica=placed.replica, commands=lines))
    placements = tuple(
        placed.model_copy(
            update={**use_of(fleet.cluster, placed.layout, placed.claims), **speeds(fleet, deployments, plan, placed)}
        )
        for placed in plan.placements
    )
    return plan.model_copy(
        update={"placements": placements, "commands": tuple(per_replica), "lost": lost_placements(fleet)}
    )
