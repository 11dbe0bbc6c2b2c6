"""Policy versions from the trainer to the rollout side: Receiver.publish_weight_version -> Sender.policyVersion.

Real sockets both ways: an in-process receiver and a TS sender process (tsx).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import zmq

from lego_rl.schema import Credit, WeightVersion, decode_control
from lego_rl.transport import Receiver, ReceiverConfig

from .batches import hello
from .processes import Event, EventProcess, start_sender


def _version(n: int) -> WeightVersion:
    return WeightVersion(version=n, published_at_ms=time.time() * 1000, checkpoint_path=f"/ckpt/v{n}")


def _pump_until(rx: Receiver, process: EventProcess, matches: Any, timeout_s: float = 60.0) -> Event:
    """Runs the receiver (single-threaded, as a trainer does) until `process` prints a matching event."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rx.receive(timeout_s=0.05)
        try:
            return process.wait_for(matches, timeout_s=0.01)
        except AssertionError:
            if not process.alive():
                raise
    raise AssertionError(f"{process.name}: no matching event within {timeout_s} s; events {process.events[-6:]}")


@pytest.mark.parametrize("handover", ["spool", "consumer"])
def test_a_ts_sender_learns_the_version_published_before_it_connected_and_each_one_after(
    short_dir: Path, address: str, handover: str
) -> None:
    rx = Receiver(ReceiverConfig(bind=address, spool_dir=short_dir / "rx", handover=handover))  # type: ignore[arg-type]
    try:
        assert rx.publish_weight_version(_version(1)) == 0, "no sender yet: kept for the next hello"
        sender = start_sender(
            address, short_dir / "tx", short_dir, "--count", "4", "--per-batch", "2", "--id-prefix", "pv", "--wait-version", "3"
        )
        first = _pump_until(rx, sender, lambda e: e["type"] == "weight_version")
        assert first["version"] == 1 and first["checkpoint_path"] == "/ckpt/v1"
        assert rx.publish_weight_version(_version(2)) == 1
        _pump_until(rx, sender, lambda e: e["type"] == "weight_version" and e["version"] == 2)
        rx.publish_weight_version(_version(3))
        waited = _pump_until(rx, sender, lambda e: e["type"] == "policy_version")
        assert waited == {"type": "policy_version", "version": 3, "checkpoint_path": "/ckpt/v3"}
        done = _pump_until(rx, sender, lambda e: e["type"] == "done")
        assert done["stats"]["accepted"] == 2 and done["stats"]["badFrames"] == 0
        assert [e["version"] for e in sender.events if e["type"] == "weight_version"] == [1, 2, 3]
    finally:
        rx.close()


def test_publishing_reaches_every_connected_sender_and_refuses_an_older_version(short_dir: Path, address: str) -> None:
    rx = Receiver(ReceiverConfig(bind=address, spool_dir=short_dir / "rx", credits=2))
    sockets = []
    try:
        for _ in range(2):
            socket = zmq.Context.instance().socket(zmq.DEALER)
            socket.setsockopt(zmq.LINGER, 0)
            socket.connect(address)
            socket.send(hello())
            sockets.append(socket)
        while rx.stats["hellos"] < 2:
            rx.receive(timeout_s=0.05)
        for socket in sockets:
            assert socket.poll(5000) and isinstance(decode_control(socket.recv()), Credit)
        five = _version(5)
        assert rx.publish_weight_version(five) == 2
        for socket in sockets:
            assert socket.poll(5000) and decode_control(socket.recv()) == five
        with pytest.raises(ValueError, match="older"):
            rx.publish_weight_version(_version(4))
        assert rx.weight_version is not None and rx.weight_version.version == 5
    finally:
        for socket in sockets:
            socket.close(linger=0)
        rx.close()
