"""The rollout fleet a Ray job starts itself: engine servers serving the policy, a supervised worker per node.

    python -m lego_rl.cluster.train --receive tcp://0.0.0.0:5555 --weights-dir W ... -- ROLLOUT-ARGS

1. Engines: `cluster.engines` EngineServerActors, placed by Ray (spread over the nodes), serve
   the policy: the model directory, or on a resumed job the published `W/v<N>` of the
   checkpoint's policy version, so workers never sample older weights than the trainer holds
   (with --max-staleness they would otherwise wait for a version that cannot come).
2. Each new version reaches every engine through `EngineActorWeightSync`, a server of the
   job's DiskWeightPublisher like `--sync-engine ADDRESS`, but called through the actor
   handle: an engine that died is an error at once, not a 600 s wait for a reply.
3. Workers: one RolloutWorkerSupervisor per live node (rollout_fleet.py) runs
   `lego rollout ROLLOUT-ARGS --trainer RECEIVER --engine ENGINE_i --model-dir MODEL
   --producer-id ID-i --spool-dir ROOT/ID-i`; engines are dealt to workers round robin.
4. `finished()` is asked between batches (ReceiverSource.producers_finished): True once
   every worker exited 0; RolloutFleetError once a worker failed past its restarts or a
   supervisor or engine actor died. So a job ends, with a reason, and never waits on a
   fleet that cannot send.
5. `stop()`: workers first (SIGTERM: each ends its rollouts in flight and removes its
   containers), then the engines; it returns what the job's summary reports.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray

from ..engine import EngineServerConfig
from ..trainer import CheckpointStore, JobConfig, TrainerPosition
from ..weights import Weights, WeightSyncError, version_dir_name
from .engine_server_actor import EngineServerActor
from .rollout_fleet import DEFAULT_LEGO, STOPPED_EXIT_CODE, fleet_specs, start_rollout_fleet

WATCH_INTERVAL_S = 2.0
"""Between two looks at the fleet's health: often enough that a failure ends the job within seconds."""
ACTOR_CALL_TIMEOUT_S = 60.0
"""A health or version call that takes longer is skipped this round (a busy node), not taken for a death."""

_WILDCARDS = ("0.0.0.0", "*", "[::]")
_LOOPBACK = ("127.", "localhost", "[::1]")


class RolloutFleetError(RuntimeError):
    """The job's fleet cannot go on: which worker or engine, and why (the worker's last stderr lines)."""

    hint = "fix the cause named (the rollout arguments, Docker on that node, the engine's node), then rerun the job: it resumes"


def trainer_address(bound: str, *, nodes: int) -> str:
    """The address workers are given for a receiver bound at `bound` (its LAST_ENDPOINT).

    A wildcard bind is reached at this node's IP; a loopback bind only from this node, so with
    other nodes in the cluster it is refused here rather than left to workers that never connect.
    """
    scheme, _, rest = bound.partition("://")
    host, _, port = rest.rpartition(":")
    if host in _WILDCARDS:
        return f"{scheme}://{ray.util.get_node_ip_address()}:{port}"
    if host.startswith(_LOOPBACK) and nodes > 1:
        raise RolloutFleetError(f"the receiver is bound on {bound}, which rollout workers on the other {nodes - 1} node(s) "
                                "cannot reach: bind --receive tcp://0.0.0.0:PORT")
    return bound


def checkpointed_position(root: Path) -> TrainerPosition:
    """Step and policy version of the checkpoint a resume starts from (0, 0 without one), weights not read."""
    store = CheckpointStore(root=root)
    name = store.latest_name()
    if name is None:
        return TrainerPosition(step=0, policy_version=0)
    # One rank writes trainer.json beside the weights; R ranks each under rank-<r>/ (trainer_group.py).
    info = next((p for p in (store.root / name / "trainer.json", store.root / "rank-0" / name / "trainer.json") if p.is_file()), None)
    if info is None:
        raise RolloutFleetError(f"{store.root}/LATEST names {name}, which has no trainer.json")
    fields = json.loads(info.read_text())
    return TrainerPosition(step=int(fields["step"]), policy_version=int(fields["policy_version"]))


def served_weights(job: JobConfig) -> tuple[str, int]:
    """(model directory, policy version) the engines start with: the trainer's resume point's weights."""
    version = checkpointed_position(job.checkpoint.dir).policy_version
    if version == 0:
        return str(job.model.path), 0
    assert job.weights.dir is not None  # build_job requires it with fleet engines
    published = job.weights.dir / version_dir_name(version)
    if not published.is_dir():
        raise RolloutFleetError(f"the checkpoint in {job.checkpoint.dir} is at policy version {version}, but {published} is missing: the engines "
                                "would serve other weights than the trainer's; give the job's --weights-dir of that run")
    return str(published), version


@dataclass(kw_only=True, slots=True)
class EngineActorWeightSync:
    """Loads each published version on the job's engine actors (all at once), as EngineServerWeightSync does over ZeroMQ."""

    engines: list[Any]
    addresses: list[str]

    def publish(self, version: int, weights: Weights) -> None:
        if not isinstance(weights, Path):
            raise TypeError("EngineActorWeightSync loads published directories: use it as a DiskWeightPublisher server")
        refs = [engine.update_weights.remote(str(weights), version) for engine in self.engines]
        for address, ref in zip(self.addresses, refs):
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as error:
                raise RolloutFleetError(f"engine server {address} died while loading v{version}: {error}") from error
            except ray.exceptions.RayTaskError as error:
                cause = error.cause if isinstance(error.cause, WeightSyncError) else error
                raise WeightSyncError(server_url=address, version=version, message=str(cause)) from error


@dataclass(kw_only=True, slots=True)
class RolloutFleet:
    """The engines and workers one job started; see the module doc."""

    engines: list[Any] = field(default_factory=list)
    engine_addresses: list[str] = field(default_factory=list)
    workers: dict[str, Any] = field(default_factory=dict)
    """Ray node id -> RolloutWorkerActor."""
    producers: dict[str, str] = field(default_factory=dict)
    """Ray node id -> the worker's producer id."""
    watch_interval_s: float = WATCH_INTERVAL_S
    """finished() looks at the actors at most this often (between batches it is asked far more often)."""
    _checked_at: float = field(default=0.0, init=False, repr=False)
    _finished: bool = field(default=False, init=False, repr=False)

    @staticmethod
    def start_engines(job: JobConfig) -> RolloutFleet:
        """`cluster.engines` engine servers serving the trainer's resume point; returns once all are bound."""
        model_dir, version = served_weights(job)
        config = EngineServerConfig(model_dir=model_dir, bind="tcp://0.0.0.0:*", policy_version=version,
                                    engine=job.cluster.engine_config())
        # Wildcard bind, reported with each node's IP (EngineServerHost.address): workers on other nodes reach it.
        engines = [EngineServerActor.options(scheduling_strategy="SPREAD").remote(config, 1) for _ in range(job.cluster.engines)]
        addresses = ray.get([engine.address.remote() for engine in engines])
        return RolloutFleet(engines=engines, engine_addresses=list(addresses))

    def weight_sync(self) -> EngineActorWeightSync:
        return EngineActorWeightSync(engines=self.engines, addresses=self.engine_addresses)

    def start_workers(self, job: JobConfig, trainer: str) -> None:
        """One supervised `lego rollout` per live node (offering `fleet.node_resource`, when set), shipping to `trainer`."""
        fleet = job.fleet
        nodes = sorted(n["NodeID"] for n in ray.nodes()
                       if n.get("Alive") and (fleet.node_resource is None or n.get("Resources", {}).get(fleet.node_resource, 0) > 0))
        if not nodes:
            raise RolloutFleetError(f"no live Ray node offers the resource {fleet.node_resource!r} (fleet.node_resource): start the "
                                    f"rollout nodes with ray start --resources '{{\"{fleet.node_resource}\": 1}}'")
        args = [*fleet.rollout_args, "--trainer", trainer]
        specs = fleet_specs(str(fleet.lego or DEFAULT_LEGO), args, producer_id=fleet.producer_id, spool_root=str(fleet.spool_root),
                            nodes=nodes, max_restarts=fleet.max_restarts, log_dir=str(fleet.log_dir) if fleet.log_dir else None)
        if self.engine_addresses:
            specs = {node: replace(spec, args=(*spec.args, "--engine", self.engine_addresses[i % len(self.engine_addresses)],
                                               "--model-dir", str(job.model.path)))
                     for i, (node, spec) in enumerate(specs.items())}
        self.producers = {node: f"{fleet.producer_id}-{i}" for i, node in enumerate(specs)}
        self.workers = start_rollout_fleet(specs, cpus=fleet.worker_cpus, named=True)

    def finished(self) -> bool:
        """True once every worker exited 0; raises RolloutFleetError when one cannot go on (see watch_interval_s)."""
        if self._finished or time.monotonic() - self._checked_at < self.watch_interval_s:
            return self._finished
        self._checked_at = time.monotonic()
        health = self._health()
        for node, h in health.items():
            if h is not None and h["state"] == "failed":
                tail = "; ".join(h["stderr_tail"][-3:]) or "no stderr"
                raise RolloutFleetError(f"rollout worker {self.producers[node]} on {h['node']} failed after {h['restarts']} restart(s), "
                                        f"exit codes {h['exit_codes']}: {tail}")
        for address, engine in zip(self.engine_addresses, self.engines):
            self._call(engine.policy_version, f"engine server {address}")
        self._finished = bool(health) and all(h is not None and h["state"] == "finished" for h in health.values())
        return self._finished

    def stop(self) -> dict[str, Any]:
        """Stops the workers (SIGTERM, then their containers are gone), then the engines; the report for the summary."""
        stopping = {node: actor.stop.remote() for node, actor in self.workers.items()}  # all at once: each may take its grace
        workers = []
        for node, ref in stopping.items():
            try:
                workers.append(_worker_report(self.producers[node], ray.get(ref)))
            except ray.exceptions.RayActorError as error:  # its worker got SIGTERM from the kernel (PR_SET_PDEATHSIG)
                workers.append({"producer_id": self.producers[node], "state": "supervisor_died", "error": str(error).splitlines()[0]})
        engines = []
        for address, engine in zip(self.engine_addresses, self.engines):
            version = None  # None: already dead (the job's error said so) or not answering
            try:
                version = ray.get(engine.policy_version.remote(), timeout=ACTOR_CALL_TIMEOUT_S)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                pass
            # Killed, not drained: its workers are gone, and nothing it holds outlives the job.
            ray.kill(engine)
            engines.append({"address": address, "policy_version": version})
        return {"engines": engines, "workers": workers}

    def _health(self) -> dict[str, dict[str, Any] | None]:
        return {node: self._call(actor.health, f"the supervisor of rollout worker {self.producers[node]}")
                for node, actor in self.workers.items()}

    @staticmethod
    def _call(method: Any, what: str) -> Any:
        try:
            return ray.get(method.remote(), timeout=ACTOR_CALL_TIMEOUT_S)
        except ray.exceptions.ActorUnavailableError:
            return None  # restarting or unreachable for a moment: asked again next round
        except ray.exceptions.RayActorError as error:
            raise RolloutFleetError(f"{what} died: {str(error).splitlines()[0]}") from error
        except ray.exceptions.GetTimeoutError:
            print(f"fleet: {what} did not answer within {ACTOR_CALL_TIMEOUT_S:g} s; asking again", file=sys.stderr, flush=True)
            return None


def _worker_report(producer: str, health: dict[str, Any]) -> dict[str, Any]:
    """What the job's summary says about one worker (its own summary has the rest, on its node's stdout)."""
    summary = health.get("summary") or {}
    report = {"producer_id": producer, "node": health["node"], "state": health["state"], "pids": health["pids"],
              "restarts": health["restarts"], "exit_codes": health["exit_codes"], "groups_shipped": health["groups_shipped"],
              "rollouts_finished": health["rollouts_finished"], "stopped": summary.get("stopped"), "stop_s": health["stop_s"]}
    if any(code not in (0, STOPPED_EXIT_CODE) for code in health["exit_codes"]):
        report["stderr_tail"] = health["stderr_tail"][-5:]  # an exit that was not a clean one says why, here
    return report
