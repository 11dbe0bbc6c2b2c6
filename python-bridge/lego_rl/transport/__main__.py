"""`python -m lego_rl.transport receive --bind ADDR --spool DIR`: run a receiver, one JSON line per event.

Options a test or an operator needs: --credits (window per sender), --tap
(publish accepted batches for notebooks), --consume-delay-ms (simulate a slow
trainer), --max-batches (exit after that many accepted batches),
--handover consumer (ack on the consumer's commit, no batch files) with
--consumer-log FILE (a stand-in for the trainer's durable queue: one fsynced
JSON line per committed batch with its trajectory ids).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

from .heap import reuse_heap_memory
from .receiver import Receiver, ReceiverConfig, shares_frame
from ..entry import run_entry


def _print(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _committed_ids(consumer_log: str | None) -> set[str]:
    """Batch ids already in the consumer log (complete lines only: a cut-short last line was never committed)."""
    if consumer_log is None or not Path(consumer_log).exists():
        return set()
    ids = set()
    for line in Path(consumer_log).read_text().splitlines():
        try:
            ids.add(json.loads(line)["batch_id"])
        except (ValueError, KeyError):
            continue
    return ids


def receive(args: argparse.Namespace) -> int:
    if not args.no_tune_malloc:
        reuse_heap_memory()
    if args.consumer_log and args.handover != "consumer":
        raise SystemExit("--consumer-log goes with --handover consumer")
    log = open(args.consumer_log, "a") if args.consumer_log else None
    if log is not None and log.tell() > 0 and not Path(args.consumer_log).read_bytes().endswith(b"\n"):
        log.write("\n")  # a line cut short by a crash stays unreadable instead of joining the next one
    config = ReceiverConfig(
        bind=args.bind,
        spool_dir=Path(args.spool),
        receiver_id=args.receiver_id,
        credits=args.credits,
        max_batch_bytes=args.max_batch_bytes,
        tap=args.tap,
        release_consumed=args.release_consumed,
        handover=args.handover,
        committed_ids=_committed_ids(args.consumer_log),
        on_event=None if args.quiet else _print,
    )
    receiver = Receiver(config)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _print({"type": "listening", "address": receiver.address, "spool": str(config.spool_dir), "held": len(receiver.spool), "cpu_s": usage.ru_utime + usage.ru_stime})
    accepted = 0
    last = None
    try:
        while not stopping:
            batch = receiver.receive(timeout_s=0.2)
            if batch is None:
                continue
            accepted += 1
            last = batch
            if args.report:
                _print(
                    {
                        "type": "report",
                        "batch_id": batch.header.batch_id,
                        "latency_ms": time.time() * 1000 - batch.header.created_at_ms,
                        "zero_copy": shares_frame(batch),
                    }
                )
            if args.consume_delay_ms:
                time.sleep(args.consume_delay_ms / 1000)  # a deliberately slow consumer, not synchronisation
            if log is not None:
                # The trainer's durable queue, then the commit that acks the batch.
                ids = batch.batch.column("trajectory_id").to_pylist()
                log.write(json.dumps({"batch_id": batch.header.batch_id, "trajectory_ids": ids}) + "\n")
                log.flush()
                os.fsync(log.fileno())
                receiver.commit(batch)
            if args.max_batches and accepted >= args.max_batches:
                break
        if last is not None:
            receiver.commit(last)  # a clean stop: the last batch was consumed too (a no-op if committed)
    finally:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        peak_rss = usage.ru_maxrss * 1024  # Linux reports KiB
        _print({"type": "stopped", "stats": receiver.stats, "peak_rss": peak_rss, "cpu_s": usage.ru_utime + usage.ru_stime})
        receiver.close(flush=True)  # a process about to exit: the last ack must reach the sender first
        if log is not None:
            log.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lego_rl.transport")
    commands = parser.add_subparsers(dest="command", required=True)
    rx = commands.add_parser("receive", help="bind a receiver and spool what arrives")
    rx.add_argument("--bind", required=True)
    rx.add_argument("--spool", required=True)
    rx.add_argument("--receiver-id", default="receiver")
    rx.add_argument("--credits", type=int, default=8)
    rx.add_argument("--max-batch-bytes", type=int, default=64 * 1024 * 1024)
    rx.add_argument("--tap", default=None)
    rx.add_argument("--consume-delay-ms", type=float, default=0)
    rx.add_argument("--max-batches", type=int, default=0)
    rx.add_argument(
        "--release-consumed", action="store_true", help="recycle each batch file once consumed (the trainer holds the data)"
    )
    rx.add_argument(
        "--handover", choices=["spool", "consumer"], default="spool",
        help="ack once the batch is in this receiver's spool (default), or once the consumer commits it",
    )
    rx.add_argument("--consumer-log", default=None, help="with --handover consumer: fsynced JSON lines of committed batches")
    rx.add_argument(
        "--no-tune-malloc", action="store_true",
        help="keep glibc's default heap thresholds (see lego_rl/transport/heap.py; the default reuses heap pages for batches)",
    )
    rx.add_argument("--report", action="store_true", help="print latency and zero-copy of each batch (benchmark)")
    rx.add_argument("--quiet", action="store_true", help="do not print accepted/duplicate events")
    args = parser.parse_args(argv)
    return receive(args)


if __name__ == "__main__":
    sys.exit(run_entry(main, "python -m lego_rl.transport"))
