"""The engine's ZeroMQ server as a Ray actor: rollout workers' proxies reach it with `ZmqEngine`.

The actor builds an `EngineServer` (lego_rl.engine.server) and serves it on a thread of
its own, so the actor's methods stay callable while it serves. Only that thread touches
the engine (the engine is single-threaded by design); the methods here read the address
and counters or stop the loop. Weight updates reach the engine as UpdateWeights frames on
its own socket, so they run on the serving thread between steps: a trainer sends them with
`EngineServerWeightSync` (`--sync-engine ADDRESS`), and `update_weights` here does the same
for a caller holding the actor handle.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import ray
import torch

from ..engine import EngineServerConfig

from ..weights import EngineServerSyncConfig, EngineServerWeightSync


class EngineServerHost:
    """Owns one EngineServer and the thread serving it."""

    def __init__(self, config: EngineServerConfig, threads: int = 1) -> None:
        torch.set_num_threads(threads)
        self._server = config.build()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._server.serve, args=(self._stop,), name="engine-server", daemon=True)
        self._thread.start()

    def address(self) -> str:
        """The endpoint clients connect to; a wildcard bind is reported with this node's IP."""
        address = self._server.address
        if "//0.0.0.0:" in address:
            address = address.replace("0.0.0.0", ray.util.get_node_ip_address())
        return address

    def model_name(self) -> str:
        return self._server.model_name

    def stats(self) -> dict[str, int]:
        return dict(self._server.stats)

    def policy_version(self) -> int:
        """The version live now (a plain read of the serving thread's int)."""
        return self._server.engine.policy_version

    def update_weights(self, path: str, version: int, timeout_s: float = 600.0) -> int:
        """Load a DiskWeightPublisher folder (v<N>/ with weight_version.json) as `version` through the socket; WeightSyncError if refused."""
        address = self._server.address.replace("//0.0.0.0:", "//127.0.0.1:").replace("//*:", "//127.0.0.1:")
        sync = EngineServerWeightSync(config=EngineServerSyncConfig(address=address, timeout_s=timeout_s))
        sync.publish(version, Path(path))
        return version

    def stop(self) -> None:
        """Stops serving (after the current step) and closes the socket."""
        self._stop.set()
        self._thread.join()
        self._server.close()


EngineServerActor = ray.remote(num_cpus=1)(EngineServerHost)


def start_engine_server(config: EngineServerConfig, *, cpus: float = 1, threads: int = 1, name: str | None = None) -> Any:
    """Starts the actor and returns its handle once the server is bound (a bind or load failure surfaces here)."""
    options: dict[str, Any] = {"num_cpus": cpus}
    if name:
        options["name"] = name
    actor = EngineServerActor.options(**options).remote(config, threads)
    ray.get(actor.address.remote())
    return actor
