"""`python -m lego_rl.trainer`: GSPO training from a spool folder of rollout batches, on this machine.

The Ray application (`python -m lego_rl.cluster.train`) runs the same loop with
trainer ranks and engine replicas as actors; this entry point is the
single-process form that tests and notebooks use. Both parse their flags and
--config file into one JobConfig (lego_rl/trainer/job.py).
"""

from __future__ import annotations

import sys

import torch

from ..entry import run_entry
from ..model import load_model
from .driver import LocalPolicy, train
from .job import parse_job
from .sources import ReceiverSource, SpoolFolderSource
from .step import PolicyUpdater


def main(argv: list[str]) -> int:
    job = parse_job(argv, "local", prog="python -m lego_rl.trainer", description=__doc__)
    torch.set_num_threads(job.training.threads)
    model = load_model(job.model.path)
    updater = PolicyUpdater(model, job.step_config())
    moe = model.config
    policy = LocalPolicy(updater=updater, layers=len(moe.moe_layers), top_k=moe.num_experts_per_tok)
    log = open(job.training.log, "a", encoding="utf-8") if job.training.log else sys.stdout
    receiver = None
    if job.source.receive:
        from ..transport import Receiver, ReceiverConfig, reuse_heap_memory

        reuse_heap_memory()
        receiver = Receiver(ReceiverConfig(bind=job.source.receive, spool_dir=job.source.receiver_spool,
                                           handover=job.source.handover))
        batches = ReceiverSource(receiver=receiver)
        print(f"trainer: receiving on {receiver.address}", file=sys.stderr, flush=True)
    else:
        assert job.source.spool is not None  # parse_job admits exactly one source
        batches = SpoolFolderSource(folder=job.source.spool)
    try:
        position = train(
            batches,
            policy,
            job.loop_config(),
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
