"""Delivery faults with real processes: a TS sender (tsx) and a Python receiver, killed with SIGKILL.

Trajectories are counted by id in the receiver's spool: exactly once means
every id sent is there and none is there twice.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from .processes import spool_trajectory_ids, start_receiver, start_sender


def _expected(prefix: str, count: int) -> Counter[str]:
    return Counter(f"{prefix}-{i}" for i in range(count))


def test_receiver_killed_mid_stream_and_restarted_delivers_every_trajectory_exactly_once(
    short_dir: Path, address: str
) -> None:
    rx_spool, tx_spool = short_dir / "rx", short_dir / "tx"
    # A slow first receiver makes "mid-stream" certain: at most a few batches land before the kill.
    first = start_receiver(address, rx_spool, short_dir, "--consume-delay-ms", "20")
    sender = start_sender(address, tx_spool, short_dir, "--count", "120", "--per-batch", "2", "--id-prefix", "a")
    try:
        first.wait_for(lambda e: e["type"] == "accepted" and first.count("accepted") >= 5)
        first.kill()
        second = start_receiver(address, rx_spool, short_dir)
        done = sender.wait_for(lambda e: e["type"] == "done", timeout_s=90)
        second.stop()
    finally:
        sender.kill()
        first.kill()
    assert sender.proc.returncode == 0
    assert second.count("accepted") > 0, "the restarted receiver must have taken part of the stream"
    assert Counter(spool_trajectory_ids(rx_spool)) == _expected("a", 120)
    assert done["stats"]["spooled"] == 60
    assert list(tx_spool.glob("*.lgrb")) == []


def _consumer_log_ids(path: Path) -> list[str]:
    """Trajectory ids in a consumer log, with repeats; a line cut short by SIGKILL was never committed."""
    ids: list[str] = []
    for line in path.read_text().splitlines():
        try:
            ids.extend(json.loads(line)["trajectory_ids"])
        except (ValueError, KeyError):
            continue
    return ids


def test_with_the_consumer_handover_a_receiver_killed_mid_stream_and_restarted_delivers_every_trajectory_exactly_once(
    short_dir: Path, address: str
) -> None:
    rx_spool, tx_spool, queue = short_dir / "rx", short_dir / "tx", short_dir / "trainer-queue.jsonl"
    handover = ("--handover", "consumer", "--consumer-log", str(queue))
    # A consumer that takes 300 ms per batch: the kill lands while it holds one, uncommitted.
    first = start_receiver(address, rx_spool, short_dir, *handover, "--consume-delay-ms", "300")
    sender = start_sender(address, tx_spool, short_dir, "--count", "120", "--per-batch", "2", "--id-prefix", "k")
    try:
        first.wait_for(lambda e: e["type"] == "accepted" and first.count("accepted") >= 4)
        first.kill()
        second = start_receiver(address, rx_spool, short_dir, *handover)
        done = sender.wait_for(lambda e: e["type"] == "done", timeout_s=90)
        second.stop()
    finally:
        sender.kill()
        first.kill()
    assert sender.proc.returncode == 0
    assert second.count("committed") > 0, "the restarted receiver must have taken part of the stream"
    # The kill landed while the first receiver's consumer held a batch it had not committed:
    # the sender kept it and the second receiver got it again.
    held = [e["batch_id"] for e in first.events if e["type"] == "accepted"][-1]
    assert held not in {e["batch_id"] for e in first.events if e["type"] == "committed"}
    assert held in {e["batch_id"] for e in second.events if e["type"] == "accepted"}
    assert Counter(_consumer_log_ids(queue)) == _expected("k", 120)
    assert done["stats"]["spooled"] == 60
    assert list(tx_spool.glob("*.lgrb")) == [], "every batch was acked, after its commit"
    assert list((rx_spool / "batches").glob("*.lgrb")) == [], "the consumer hand-over writes no batch files"


def test_sender_killed_after_spooling_resends_what_was_not_acked_on_restart(short_dir: Path, address: str) -> None:
    rx_spool, tx_spool = short_dir / "rx", short_dir / "tx"
    # No receiver yet: everything is spooled and nothing can be acked.
    first = start_sender(address, tx_spool, short_dir, "--count", "40", "--per-batch", "4", "--id-prefix", "b")
    try:
        first.wait_for(lambda e: e["type"] == "all_spooled")
        first.kill()
        assert len(list(tx_spool.glob("*.lgrb"))) == 10
        receiver = start_receiver(address, rx_spool, short_dir)
        second = start_sender(address, tx_spool, short_dir, "--count", "0")
        done = second.wait_for(lambda e: e["type"] == "done")
        receiver.stop()
    finally:
        first.kill()
    assert done["stats"]["accepted"] == 10
    assert Counter(spool_trajectory_ids(rx_spool)) == _expected("b", 40)
    assert list(tx_spool.glob("*.lgrb")) == []


def test_redelivery_of_acked_batches_is_acked_as_duplicate_and_not_stored_twice(short_dir: Path, address: str) -> None:
    rx_spool, tx_spool = short_dir / "rx", short_dir / "tx"
    receiver = start_receiver(address, rx_spool, short_dir)
    sender = start_sender(address, tx_spool, short_dir, "--count", "8", "--per-batch", "4", "--id-prefix", "c")
    sender.wait_for(lambda e: e["type"] == "done")
    receiver.stop()
    # Simulate a sender that died after the receiver's ack was sent but before it deleted its copies:
    # put the accepted batch files back into the sender's spool and restart both.
    for path in (rx_spool / "batches").glob("*.lgrb"):
        (tx_spool / path.name).write_bytes(path.read_bytes())
    receiver = start_receiver(address, rx_spool, short_dir)
    resend = start_sender(address, tx_spool, short_dir, "--count", "0")
    done = resend.wait_for(lambda e: e["type"] == "done")
    receiver.stop()
    assert done["stats"]["duplicates"] == 2
    assert Counter(spool_trajectory_ids(rx_spool)) == _expected("c", 8)


def test_slow_receiver_bounds_the_senders_memory(short_dir: Path, address: str) -> None:
    rx_spool, tx_spool = short_dir / "rx", short_dir / "tx"
    high_water = 8 * 1024 * 1024
    receiver = start_receiver(address, rx_spool, short_dir, "--credits", "2", "--consume-delay-ms", "25")
    # 48 batches of one 200k-token trajectory (~3.8 MB each): ~180 MB in all.
    sender = start_sender(
        address, tx_spool, short_dir,
        "--count", "48", "--per-batch", "1", "--tokens", "200000", "--id-prefix", "d",
        "--max-unacked", "4", "--high-water", str(high_water),
    )
    done = sender.wait_for(lambda e: e["type"] == "done", timeout_s=120)
    stopped_rx = receiver.stop()
    stats = done["stats"]
    payload = sum(e["payload_bytes"] for e in sender.events if e["type"] == "spooled")
    assert stopped_rx == 0
    assert payload > 150 * 1024 * 1024
    assert stats["peakHeldBytes"] <= high_water
    # RSS growth stays far below the payload the receiver was too slow to take.
    assert done["peak_rss"] - done["baseline_rss"] < 100 * 1024 * 1024, done
    assert Counter(spool_trajectory_ids(rx_spool)) == _expected("d", 48)


def test_malformed_frames_are_quarantined_and_both_sides_keep_running(short_dir: Path, address: str) -> None:
    import zmq

    from .batches import header, inconsistent_rows, payload

    rx_spool, tx_spool = short_dir / "rx", short_dir / "tx"
    receiver = start_receiver(address, rx_spool, short_dir)
    rogue = zmq.Context.instance().socket(zmq.DEALER)
    rogue.setsockopt(zmq.LINGER, 0)
    rogue.connect(address)
    rows, shape = inconsistent_rows()
    bad = payload(rows, shape, validate=False)
    try:
        rogue.send_multipart([b"x", b"y", b"z"])
        rogue.send(b"\xc1 garbage")
        rogue.send_multipart([header("rogue-1", bad), bad])
        receiver.wait_for(lambda e: e["type"] == "quarantined" and receiver.count("quarantined") >= 3)
        sender = start_sender(address, tx_spool, short_dir, "--count", "6", "--per-batch", "3", "--id-prefix", "e")
        sender.wait_for(lambda e: e["type"] == "done")
        assert receiver.alive()
    finally:
        rogue.close(linger=0)
        receiver.stop()
    assert len(list((rx_spool / "quarantine").glob("*.reason.json"))) == 3
    assert Counter(spool_trajectory_ids(rx_spool)) == _expected("e", 6)
