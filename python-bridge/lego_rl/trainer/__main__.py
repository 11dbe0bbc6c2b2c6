"""`python -m lego_rl.trainer`: GSPO training from a spool folder of rollout batches, on this machine.

The Ray application (`python -m lego_rl.cluster.train`) runs the same loop with
trainer ranks and engine replicas as actors; this entry point is the
single-process form that tests and notebooks use.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

import torch

from ..model import load_model
from .driver import LocalPolicy, LoopConfig, train
from .sources import ReceiverSource, SpoolFolderSource
from .step import PolicyUpdater, StepConfig
from ..entry import run_entry


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lego_rl.trainer", description=__doc__)
    parser.add_argument("--model", type=Path, required=True, help="HF-layout model directory (config.json + safetensors)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--spool", type=Path, help="folder of Trajectory .arrow batches")
    source.add_argument("--receive", metavar="ADDRESS", help="bind the data-plane receiver here, e.g. tcp://127.0.0.1:5555")
    parser.add_argument("--receiver-spool", type=Path, default=Path("var/receiver"), help="the receiver's durable spool")
    parser.add_argument("--handover", choices=["spool", "consumer"], default="spool",
                        help="what a batch's ack waits for: the receiver's spool copy (kept for notebooks) or this "
                             "trainer's checkpoint (no receiver copy, less CPU; docs/transport.md)")
    parser.add_argument("--checkpoints", type=Path, required=True, help="checkpoint folder; training resumes from it")
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--max-staleness", type=int, default=None, metavar="VERSIONS",
                        help="exclude rollouts sampled by weights more than this many versions old (0: on-policy only)")
    parser.add_argument("--log", type=Path, default=None, help="append one JSON line of metrics per step")
    parser.add_argument("--loss", choices=["gspo", "gspo_token", "grpo"], default="gspo")
    parser.add_argument("--lr", type=float, default=StepConfig().lr)
    parser.add_argument("--no-replay", action="store_true", help="do not replay recorded routing (for comparison only)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    config = StepConfig(loss=args.loss, lr=args.lr, replay_routing=not args.no_replay)
    updater = PolicyUpdater(model, config)
    moe = model.config
    policy = LocalPolicy(updater=updater, layers=len(moe.moe_layers), top_k=moe.num_experts_per_tok)
    log = open(args.log, "a", encoding="utf-8") if args.log else sys.stdout
    receiver = None
    if args.receive:
        from ..transport import Receiver, ReceiverConfig, reuse_heap_memory

        reuse_heap_memory()
        receiver = Receiver(ReceiverConfig(bind=args.receive, spool_dir=args.receiver_spool, handover=args.handover))
        batches = ReceiverSource(receiver=receiver)
        print(f"trainer: receiving on {receiver.address}", file=sys.stderr, flush=True)
    else:
        batches = SpoolFolderSource(folder=args.spool)
    try:
        position = train(
            batches,
            policy,
            LoopConfig(checkpoint_dir=args.checkpoints, max_steps=args.max_steps, max_staleness=args.max_staleness),
            log=log,
            announce=batches.announce if isinstance(batches, ReceiverSource) else None,
        )
    finally:
        if log is not sys.stdout:
            log.close()
        if receiver is not None:
            receiver.close(flush=True)  # the final ack and version reach the workers before exit
    print(f"trainer: stopped at step {position.step}, policy version {position.policy_version}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run_entry(main, "python -m lego_rl.trainer"))
