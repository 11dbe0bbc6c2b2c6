"""`python -m lego_rl.cluster.train`: GSPO on Ray (local by default, a cluster with --ray-address).

    receiver/spool or on-policy engines -> advantages -> trainer ranks -> checkpoint -> weights to engines

Trainer ranks and engine replicas are Ray actors; the loop itself is
lego_rl.trainer.driver.train, the same one the single-process entry point runs.
With --receive and `-- ROLLOUT-ARGS` the job also starts its rollout fleet
(job_fleet.py): engine servers serving each new version, and a supervised
`lego rollout` worker per node shipping to the receiver. It ends at --max-steps
(the fleet is stopped) or once every worker finished and nothing is left to
train; the summary's "ended" says which. A fleet that cannot go on ends the
job with its error.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import ray
import torch

from ..entry import run_entry
from ..model import MoeForCausalLM, read_config
from ..trainer import (BatchSource, JobConfig, ReceiverSource, SpoolFolderSource, TrainerPosition, parse_job, train,
                       trainable_parameters)
from ..toy import ToyTask, routing_shape_of
from ..transport import Receiver, ReceiverConfig, reuse_heap_memory
from .engine_group import start_engines
from .job_fleet import RolloutFleet, RolloutFleetError, checkpointed_position, trainer_address
from .runtime import connect, require_declared_gpus
from .toy_source import ToyRolloutSource
from .trainer_group import RayPolicy, TrainerGroup
from ..weights import (DiskPublishConfig, DiskWeightPublisher, EngineServerSyncConfig, EngineServerWeightSync,
                          SglangSyncConfig, SglangWeightSync, VllmSyncConfig, VllmWeightSync, WeightPublisher)


def _toy_task(vocab_size: int) -> ToyTask:
    # Rewards lowercase ASCII bytes: learnable in a few dozen steps by the byte-tokenizer tiny model.
    prompts = tuple(tuple(f"task {i}: write".encode()) for i in range(4))
    if vocab_size < 256:
        raise SystemExit("the toy task needs a byte-level vocabulary (>= 256 tokens)")
    return ToyTask(prompts=prompts, target_token_ids=frozenset(range(ord("a"), ord("z") + 1)), group_size=8, max_tokens=12)


def _local_cpus(job: JobConfig) -> int:
    """Logical CPUs for a local Ray: one per trainer rank, engine and rollout worker, even on a 2-core machine."""
    cluster, fleet = job.cluster, job.fleet
    engines = cluster.engines if job.source.toy_steps or fleet.enabled else 0
    return max(os.cpu_count() or 1, cluster.trainer_ranks * cluster.cpus_per_rank + engines
               + (fleet.worker_cpus if fleet.enabled else 0))


def _check_trainable_parameters(moe: Any, pattern: str | None) -> None:
    """The pattern against the model's parameter names, here: inside a Ray rank a pattern matching nothing reads as a crashed rank."""
    if pattern is None:
        return
    with torch.device("meta"):  # names and shapes only, no memory; tied as load_model ties them
        model = MoeForCausalLM(moe)
    trainable_parameters(model, pattern)


def main(argv: list[str]) -> int:
    job = parse_job(argv, "cluster", prog="python -m lego_rl.cluster.train", description=__doc__)
    source, cluster, sync = job.source, job.cluster, job.weights
    # `ray job stop` and a supervisor's SIGTERM: unwind through the finally below, so the fleet is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))

    moe = read_config(job.model.path)
    config = job.step_config()
    _check_trainable_parameters(moe, config.trainable_parameters)
    connect(cluster.ray_address, num_cpus=_local_cpus(job))
    require_declared_gpus(job.hardware)
    fleet = RolloutFleet.start_engines(job) if job.fleet.enabled else None
    trainers = None
    receiver = None
    report: dict[str, Any] = {}
    failure: RolloutFleetError | None = None
    rewards: list[float] = []
    try:
        trainers = TrainerGroup.create(job.model.path, config, num_ranks=cluster.trainer_ranks, cpus_per_rank=cluster.cpus_per_rank,
                                       gpus_per_rank=cluster.gpus_per_rank, backend=cluster.backend)
        engines = (start_engines(str(job.model.path), cluster.engine_config(), replicas=cluster.engines)
                   if source.toy_steps else [])
        publishers: list[WeightPublisher] = []
        if sync.dir is not None:
            servers: list[WeightPublisher] = [SglangWeightSync(config=SglangSyncConfig(base_url=u)) for u in sync.sglang]
            servers += [VllmWeightSync(config=VllmSyncConfig(base_url=u)) for u in sync.vllm]
            servers += [EngineServerWeightSync(config=EngineServerSyncConfig(address=a)) for a in sync.engine]
            if fleet is not None and fleet.engines:
                servers.append(fleet.weight_sync())  # the job's own engines get every version too
            publishers.append(DiskWeightPublisher(config=DiskPublishConfig(root=sync.dir, model_dir=job.model.path),
                                                  servers=servers))
        policy = RayPolicy(trainers=trainers, config=config, engines=engines, layers=len(moe.moe_layers),
                           top_k=moe.num_experts_per_tok, publishers=publishers)
        if source.toy_steps:
            batches: BatchSource = ToyRolloutSource(engines=engines, task=_toy_task(moe.vocab_size),
                                                    shape=routing_shape_of(moe), steps=source.toy_steps, rewards=rewards)
        elif source.receive:
            reuse_heap_memory()
            receiver = Receiver(ReceiverConfig(bind=source.receive, spool_dir=source.receiver_spool, handover=source.handover))
            print(f"trainer: receiving on {receiver.address}", file=sys.stderr, flush=True)
            batches = ReceiverSource(receiver=receiver, producers_finished=fleet.finished if fleet is not None else None)
            if fleet is not None:
                alive = sum(1 for n in ray.nodes() if n.get("Alive"))
                fleet.start_workers(job, trainer_address(receiver.address, nodes=alive))
                print(f"trainer: rollout fleet of {len(fleet.workers)} worker(s), engines {fleet.engine_addresses}",
                      file=sys.stderr, flush=True)
        else:
            assert source.spool is not None  # parse_job admits exactly one source
            batches = SpoolFolderSource(folder=source.spool)
        log = open(job.training.log, "a", encoding="utf-8") if job.training.log else sys.stdout
        try:
            announce = batches.announce if isinstance(batches, ReceiverSource) else None
            position = train(batches, policy, job.loop_config(), log=log, announce=announce)
        except RolloutFleetError as error:
            failure = error  # after the fleet is stopped: the summary, then the error line and exit 1
            position = checkpointed_position(job.checkpoint.dir)
        finally:
            if log is not sys.stdout:
                log.close()
    finally:
        # Workers first: they stop sending, end their rollouts and remove their containers; then the receiver.
        if fleet is not None:
            report = fleet.stop()
        if receiver is not None:
            receiver.close(flush=True)  # the final ack and version reach the workers before exit
        if trainers is not None:
            trainers.shutdown()
    max_steps = job.training.max_steps
    ended = ("fleet_failed" if failure is not None else "max_steps" if max_steps is not None and position.step >= max_steps
             else "fleet_finished" if fleet is not None else "source_ended")
    summary: dict[str, Any] = {"steps": position.step, "policy_version": position.policy_version, "ended": ended}
    if fleet is not None:
        summary["fleet"] = report | ({"error": str(failure)} if failure is not None else {})
    if rewards:
        head, tail = rewards[: max(1, len(rewards) // 5)], rewards[-max(1, len(rewards) // 5):]
        summary |= {"reward_first": sum(head) / len(head), "reward_last": sum(tail) / len(tail)}
    print(json.dumps(summary), flush=True)
    if failure is not None:
        raise failure
    return 0


if __name__ == "__main__":
    sys.exit(run_entry(main, "python -m lego_rl.cluster.train"))
