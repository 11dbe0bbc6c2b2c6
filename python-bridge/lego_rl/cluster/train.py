"""`python -m lego_rl.cluster.train`: GSPO on Ray (local by default, a cluster with --ray-address).

    receiver/spool or on-policy engines -> advantages -> trainer ranks -> checkpoint -> weights to engines

Trainer ranks and engine replicas are Ray actors; the loop itself is
lego_rl.trainer.driver.train, the same one the single-process entry point runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..engine import EngineConfig
from ..entry import run_entry
from ..model import read_config
from ..trainer.driver import LoopConfig, train
from ..trainer.sources import BatchSource, ReceiverSource, SpoolFolderSource
from ..trainer.step import StepConfig
from ..trainer.toy_task import ToyTask, routing_shape_of
from ..transport import Receiver, ReceiverConfig, reuse_heap_memory
from .engine_group import start_engines
from .runtime import connect
from .toy_source import ToyRolloutSource
from .trainer_group import RayPolicy, TrainerGroup
from .weight_sync import (DiskPublishConfig, DiskWeightPublisher, EngineServerSyncConfig, EngineServerWeightSync,
                          SglangSyncConfig, SglangWeightSync, VllmSyncConfig, VllmWeightSync, WeightPublisher)


def _toy_task(vocab_size: int) -> ToyTask:
    # Rewards lowercase ASCII bytes: learnable in a few dozen steps by the byte-tokenizer tiny model.
    prompts = tuple(tuple(f"task {i}: write".encode()) for i in range(4))
    if vocab_size < 256:
        raise SystemExit("the toy task needs a byte-level vocabulary (>= 256 tokens)")
    return ToyTask(prompts=prompts, target_token_ids=frozenset(range(ord("a"), ord("z") + 1)), group_size=8, max_tokens=12)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lego_rl.cluster.train", description=__doc__)
    parser.add_argument("--model", type=Path, required=True, help="HF-layout model directory")
    parser.add_argument("--checkpoints", type=Path, required=True)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--spool", type=Path, help="train on the Trajectory batches in this folder")
    source.add_argument("--toy-steps", type=int, help="train on-policy on the built-in toy task for N steps")
    source.add_argument("--receive", metavar="ADDRESS", help="bind the data-plane receiver here and train on what rollout workers send")
    parser.add_argument("--receiver-spool", type=Path, default=Path("var/receiver"), help="the receiver's durable spool")
    parser.add_argument("--handover", choices=["spool", "consumer"], default="spool",
                        help="what a batch's ack waits for: the receiver's spool copy (kept for notebooks) or this "
                             "trainer's checkpoint (no receiver copy, less CPU; docs/transport.md)")
    parser.add_argument("--ray-address", default=None, help="join this Ray cluster (default: start a local one)")
    parser.add_argument("--engines", type=int, default=1, help="engine replicas for on-policy sampling")
    parser.add_argument("--trainer-ranks", type=int, default=1, help="trainer ranks; experts are sharded across them")
    parser.add_argument("--backend", choices=["gloo", "nccl"], default="gloo", help="torch.distributed backend for expert parallelism")
    parser.add_argument("--engine-dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--lr", type=float, default=StepConfig().lr)
    parser.add_argument("--loss", choices=["gspo", "gspo_token", "grpo"], default="gspo")
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--max-staleness", type=int, default=None, metavar="VERSIONS",
                        help="exclude rollouts sampled by weights more than this many versions old (0: on-policy only)")
    parser.add_argument("--log", type=Path, default=None)
    parser.add_argument("--weights-dir", type=Path, default=None,
                        help="write every published version to DIR/v<N>/ (HF layout) for external inference servers")
    parser.add_argument("--sync-sglang", metavar="URL", action="append", default=[],
                        help="SGLang server to load each version from --weights-dir (repeatable)")
    parser.add_argument("--sync-vllm", metavar="URL", action="append", default=[],
                        help="vLLM server (dev mode + LegoWeightReloader extension) to load each version (repeatable)")
    parser.add_argument("--sync-engine", metavar="ADDRESS", action="append", default=[],
                        help="ZeroMQ engine server (python -m lego_rl.engine, e.g. tcp://HOST:5556) to load each version (repeatable)")
    args = parser.parse_args(argv)
    if (args.sync_sglang or args.sync_vllm or args.sync_engine) and args.weights_dir is None:
        parser.error("--sync-sglang/--sync-vllm/--sync-engine load weights from disk: give --weights-dir on a path the servers see")

    # Logical CPUs for a local Ray: one per trainer rank and engine replica, even on a 2-core machine.
    connect(args.ray_address, num_cpus=max(os.cpu_count() or 1, args.trainer_ranks + (args.engines if args.toy_steps else 0)))
    moe = read_config(args.model)
    config = StepConfig(loss=args.loss, lr=args.lr)
    trainers = TrainerGroup.create(args.model, config, num_ranks=args.trainer_ranks, backend=args.backend)
    engines = start_engines(str(args.model), EngineConfig(dtype=args.engine_dtype), replicas=args.engines) if args.toy_steps else []
    publishers: list[WeightPublisher] = []
    if args.weights_dir is not None:
        servers: list[WeightPublisher] = [SglangWeightSync(config=SglangSyncConfig(base_url=u)) for u in args.sync_sglang]
        servers += [VllmWeightSync(config=VllmSyncConfig(base_url=u)) for u in args.sync_vllm]
        servers += [EngineServerWeightSync(config=EngineServerSyncConfig(address=a)) for a in args.sync_engine]
        publishers.append(DiskWeightPublisher(config=DiskPublishConfig(root=args.weights_dir, model_dir=args.model),
                                              servers=servers))
    policy = RayPolicy(trainers=trainers, config=config, engines=engines, layers=len(moe.moe_layers),
                       top_k=moe.num_experts_per_tok, publishers=publishers)
    rewards: list[float] = []
    receiver = None
    if args.toy_steps:
        batches: BatchSource = ToyRolloutSource(engines=engines, task=_toy_task(moe.vocab_size),
                                                shape=routing_shape_of(moe), steps=args.toy_steps, rewards=rewards)
    elif args.receive:
        reuse_heap_memory()
        receiver = Receiver(ReceiverConfig(bind=args.receive, spool_dir=args.receiver_spool, handover=args.handover))
        print(f"trainer: receiving on {receiver.address}", file=sys.stderr, flush=True)
        batches = ReceiverSource(receiver=receiver)
    else:
        batches = SpoolFolderSource(folder=args.spool)
    log = open(args.log, "a", encoding="utf-8") if args.log else sys.stdout
    try:
        loop = LoopConfig(checkpoint_dir=args.checkpoints, max_steps=args.max_steps, max_staleness=args.max_staleness)
        announce = batches.announce if isinstance(batches, ReceiverSource) else None
        position = train(batches, policy, loop, log=log, announce=announce)
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
