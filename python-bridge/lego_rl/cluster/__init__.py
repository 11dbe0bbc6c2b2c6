"""Ray wiring: trainer ranks and engine replicas as actors in placement groups.

Ray is imported only in this package, so the rest of lego_rl runs without a cluster.
The application is `python -m lego_rl.cluster.train` (train.py); its parts:
"""

from .engine_group import EngineReplica, start_engines
from .engine_server_actor import EngineServerActor, EngineServerHost, start_engine_server
from .rollout_fleet import RolloutWorkerActor, RolloutWorkerSpec, RolloutWorkerSupervisor, fleet_specs, start_rollout_fleet
from .runtime import connect
from .toy_source import ToyRolloutSource
from .trainer_group import RayPolicy, TrainerGroup, TrainerRank
from .transport_actor import TransportActor, start_transport_actor

__all__ = [
    "EngineReplica",
    "EngineServerActor",
    "EngineServerHost",
    "RayPolicy",
    "RolloutWorkerActor",
    "RolloutWorkerSpec",
    "RolloutWorkerSupervisor",
    "ToyRolloutSource",
    "TrainerGroup",
    "TrainerRank",
    "TransportActor",
    "connect",
    "fleet_specs",
    "start_rollout_fleet",
    "start_engine_server",
    "start_engines",
    "start_transport_actor",
]
