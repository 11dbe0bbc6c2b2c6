"""Ray wiring: trainer ranks and engine replicas as actors in placement groups.

Ray is imported only in this package, so the rest of lego_rl runs without a cluster.
The application is `python -m lego_rl.cluster.train` (train.py), which with `-- ROLLOUT-ARGS`
also starts its rollout fleet (job_fleet.py); `python -m lego_rl.cluster.fleet` adds rollout
workers to a running job (fleet.py). Its parts:
"""

from .engine_group import EngineReplica, start_engines
from .engine_server_actor import EngineServerActor, EngineServerHost, start_engine_server
from .job_fleet import EngineActorWeightSync, RolloutFleet, RolloutFleetError, checkpointed_position, served_weights, trainer_address
from .rollout_fleet import (RolloutWorkerActor, RolloutWorkerSpec, RolloutWorkerSupervisor, fleet_specs, nodes_with_a_worker,
                            start_rollout_fleet)
from .runtime import connect
from .toy_source import ToyRolloutSource
from .trainer_group import RayPolicy, TrainerGroup, TrainerRank
from .transport_actor import TransportActor, start_transport_actor

__all__ = [
    "EngineActorWeightSync",
    "EngineReplica",
    "EngineServerActor",
    "EngineServerHost",
    "RayPolicy",
    "RolloutFleet",
    "RolloutFleetError",
    "RolloutWorkerActor",
    "RolloutWorkerSpec",
    "RolloutWorkerSupervisor",
    "ToyRolloutSource",
    "TrainerGroup",
    "TrainerRank",
    "TransportActor",
    "checkpointed_position",
    "connect",
    "fleet_specs",
    "nodes_with_a_worker",
    "start_rollout_fleet",
    "served_weights",
    "start_engine_server",
    "start_engines",
    "start_transport_actor",
    "trainer_address",
]
