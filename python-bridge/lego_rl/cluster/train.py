"""`python -m lego_rl.cluster.train`: GSPO on Ray (local by default, a cluster with --ray-address).

    receiver/spool or on-policy engines -> advantages -> trainer ranks -> checkpoint -> weights to engines

Trainer ranks and engine replicas are Ray actors; the loop itself is
lego_rl.trainer.driver.train, the same one the single-process entry point runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..engine import EngineConfig
from ..entry import run_entry
from ..model import read_config
from ..trainer import BatchSource, ReceiverSource, SpoolFolderSource, parse_job, train
from ..toy import ToyTask, routing_shape_of
from ..transport import Receiver, ReceiverConfig, reuse_heap_memory
from .engine_group import start_engines
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


def main(argv: list[str]) -> int:
    job = parse_job(argv, "cluster", prog="python -m lego_rl.cluster.train", description=__doc__)
    source, cluster, sync = job.source, job.cluster, job.weights

    # Logical CPUs for a local Ray: one per trainer rank and engine replica, even on a 2-core machine.
    connect(cluster.ray_address, num_cpus=max(os.cpu_count() or 1, cluster.trainer_ranks * cluster.cpus_per_rank
                                              + (cluster.engines if source.toy_steps else 0)))
    require_declared_gpus(job.hardware)
    moe = read_config(job.model.path)
    config = job.step_config()
    trainers = TrainerGroup.create(job.model.path, config, num_ranks=cluster.trainer_ranks, cpus_per_rank=cluster.cpus_per_rank,
                                   gpus_per_rank=cluster.gpus_per_rank, backend=cluster.backend)
    engines = (start_engines(str(job.model.path), EngineConfig(dtype=cluster.engine_dtype), replicas=cluster.engines)
               if source.toy_steps else [])
    publishers: list[WeightPublisher] = []
    if sync.dir is not None:
        servers: list[WeightPublisher] = [SglangWeightSync(config=SglangSyncConfig(base_url=u)) for u in sync.sglang]
        servers += [VllmWeightSync(config=VllmSyncConfig(base_url=u)) for u in sync.vllm]
        servers += [EngineServerWeightSync(config=EngineServerSyncConfig(address=a)) for a in sync.engine]
        publishers.append(DiskWeightPublisher(config=DiskPublishConfig(root=sync.dir, model_dir=job.model.path),
                                              servers=servers))
    policy = RayPolicy(trainers=trainers, config=config, engines=engines, layers=len(moe.moe_layers),
                       top_k=moe.num_experts_per_tok, publishers=publishers)
    rewards: list[float] = []
    receiver = None
    if source.toy_steps:
        batches: BatchSource = ToyRolloutSource(engines=engines, task=_toy_task(moe.vocab_size),
                                                shape=routing_shape_of(moe), steps=source.toy_steps, rewards=rewards)
    elif source.receive:
        reuse_heap_memory()
        receiver = Receiver(ReceiverConfig(bind=source.receive, spool_dir=source.receiver_spool, handover=source.handover))
        print(f"trainer: receiving on {receiver.address}", file=sys.stderr, flush=True)
        batches = ReceiverSource(receiver=receiver)
    else:
        assert source.spool is not None  # parse_job admits exactly one source
        batches = SpoolFolderSource(folder=source.spool)
    log = open(job.training.log, "a", encoding="utf-8") if job.training.log else sys.stdout
    try:
        announce = batches.announce if isinstance(batches, ReceiverSource) else None
        position = train(batches, policy, job.loop_config(), log=log, announce=announce)
    finally:
        if log is not sys.stdout:
            log.close()
        if receiver is not None:
            receiver.close(flush=True)  # the final ack and version reach the workers before exit
        trainers.shutdown()
    summary = {"steps": position.step, "policy_version": position.policy_version}
    if rewards:
        head, tail = rewards[: max(1, len(rewards) // 5)], rewards[-max(1, len(rewards) // 5):]
        summary |= {"reward_first": sum(head) / len(head), "reward_last": sum(tail) / len(tail)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(run_entry(main, "python -m lego_rl.cluster.train"))
