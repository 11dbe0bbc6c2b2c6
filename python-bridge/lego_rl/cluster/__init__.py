"""Ray wiring: trainer ranks and engine replicas as actors in placement groups.

Ray is imported only in this package, so the rest of lego_rl runs without a cluster.
The application is `python -m lego_rl.cluster.train` (train.py); its parts:
"""

from .engine_group import EngineReplica, start_engines
from .engine_server_actor import EngineServerActor, EngineServerHost, start_engine_server
from .runtime import connect
from .toy_source import ToyRolloutSource
from .trainer_group import RayPolicy, TrainerGroup, TrainerRank
from .transport_actor import TransportActor, start_transport_actor

__all__ = [
    "EngineReplica",
    "EngineServerActor",
    "EngineServerHost",
    "RayPolicy",
    "ToyRolloutSource",
    "TrainerGroup",
    "TrainerRank",
    "TransportActor",
    "connect",
    "start_engine_server",
    "start_engines",
    "start_transport_actor",
]
