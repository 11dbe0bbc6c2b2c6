"""The receiver as a specification: credits, acks, dedup, quarantine and zero-copy decoding.

A real ROUTER socket in this process; the test plays the sender with a DEALER.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import zmq

from lego_rl.schema import Ack, Credit, Error, decode_control, encode_control
from lego_rl.schema.generated import SCHEMA_MAJOR
from lego_rl.transport import Receiver, ReceiverConfig
from lego_rl.transport.receiver import shares_frame

from .batches import golden_rows, header, hello, inconsistent_rows, payload


@pytest.fixture
def spool(short_dir: Path) -> Path:
    return short_dir / "rx"


@pytest.fixture
def receiver(address: str, spool: Path) -> Iterator[Receiver]:
    rx = Receiver(ReceiverConfig(bind=address, spool_dir=spool, credits=3))
    yield rx
    rx.close()


@pytest.fixture
def dealer(address: str) -> Iterator[zmq.Socket[Any]]:
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(address)
    yield socket
    socket.close(linger=0)


def reply(socket: zmq.Socket[Any], timeout_ms: int = 5000) -> Any:
    assert socket.poll(timeout_ms), "no reply from the receiver"
    return decode_control(socket.recv())


def pump(receiver: Receiver, socket: zmq.Socket[Any], timeout_s: float = 10.0) -> None:
    """Runs the receiver (single-threaded, like its CLI) until a reply is waiting for `socket`."""
    deadline = time.monotonic() + timeout_s
    while not socket.poll(0):
        assert time.monotonic() < deadline, "the receiver sent no reply"
        assert receiver.receive(timeout_s=0.05) is None, "no batch was expected here"


def replies_until(receiver: Receiver, socket: zmq.Socket[Any], wanted: Any, timeout_s: float = 10.0) -> list[Any]:
    """Replies, in order, up to and including `wanted`; fails (not hangs) if other replies keep coming."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while wanted not in out:
        assert time.monotonic() < deadline, f"no {wanted} among the replies {out}"
        pump(receiver, socket)
        out.append(decode_control(socket.recv()))
    return out


def no_reply(socket: zmq.Socket[Any]) -> bool:
    return socket.poll(100) == 0


def test_hello_is_answered_with_a_full_credit_window(receiver: Receiver, dealer: zmq.Socket[Any]) -> None:
    dealer.send(hello())
    pump(receiver, dealer)
    assert reply(dealer) == Credit(receiver_id="receiver", credits=3, max_batch_bytes=64 * 1024 * 1024)


def test_a_batch_is_acked_after_it_is_spooled_and_its_credit_returns_when_the_consumer_asks_for_more(
    receiver: Receiver, dealer: zmq.Socket[Any], spool: Path
) -> None:
    data = payload()
    dealer.send_multipart([header("b-1", data), data])
    received = receiver.receive(timeout_s=5)
    assert received is not None
    assert received.header.batch_id == "b-1"
    assert received.batch.column("trajectory_id").to_pylist() == ["traj-0001", "traj-0002"]
    assert received.path == spool / "batches" / "b-1.lgrb" and received.path.exists()
    assert reply(dealer) == Ack(batch_id="b-1", status="accepted", reason=None)
    assert no_reply(dealer), "the credit must wait until the consumer is done with the batch"
    pump(receiver, dealer)
    assert isinstance(reply(dealer), Credit)


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_decoded_token_logprob_and_routing_columns_are_views_over_the_received_frame(
    receiver: Receiver, dealer: zmq.Socket[Any]
) -> None:
    data = payload()
    dealer.send_multipart([header("zc-1", data), data])
    received = receiver.receive(timeout_s=5)
    assert received is not None
    frame = memoryview(received.frame.buffer)
    start = np.frombuffer(frame, dtype=np.uint8).ctypes.data
    end = start + len(frame)
    segments = received.batch.column("segments").values
    for name in ("token_ids", "logprobs", "loss_mask", "routing"):
        values = segments.field(name).values
        array = values.to_numpy(zero_copy_only=True)
        assert start <= array.ctypes.data and array.ctypes.data + array.nbytes <= end, f"{name} was copied"
        tensor = torch.from_numpy(array)
        assert tensor.data_ptr() == array.ctypes.data, f"{name}: torch made a copy"


def test_a_batch_id_seen_before_is_acked_duplicate_even_after_a_receiver_restart(
    receiver: Receiver, dealer: zmq.Socket[Any], address: str, spool: Path
) -> None:
    data = payload()
    dealer.send_multipart([header("dup-1", data), data])
    assert receiver.receive(timeout_s=5) is not None
    assert reply(dealer).status == "accepted"
    dealer.send_multipart([header("dup-1", data), data])
    replies_until(receiver, dealer, Ack(batch_id="dup-1", status="duplicate", reason=None))
    receiver.close()
    restarted = Receiver(ReceiverConfig(bind=address, spool_dir=spool))
    # A fresh connection, as a real sender makes one (and resends) after noticing the restart.
    again = zmq.Context.instance().socket(zmq.DEALER)
    again.setsockopt(zmq.LINGER, 0)
    again.connect(address)
    try:
        again.send_multipart([header("dup-1", data), data])
        replies_until(restarted, again, Ack(batch_id="dup-1", status="duplicate", reason=None))
        assert sorted(p.name for p in (spool / "batches").iterdir()) == ["dup-1.lgrb"]
    finally:
        again.close(linger=0)
        restarted.close()


MALFORMED = {
    "three frames": lambda: [b"a", b"b", b"c"],
    "control frame that is not msgpack": lambda: [b"\xc1\xc1 not msgpack"],
    "batch header that is not msgpack": lambda: [b"\xc1 nope", payload()],
    "first frame is not a batch header": lambda: [hello(), payload()],
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_frames_are_quarantined_with_a_reason_and_the_receiver_keeps_running(
    name: str, receiver: Receiver, dealer: zmq.Socket[Any], spool: Path
) -> None:
    frames = MALFORMED[name]()
    dealer.send_multipart(frames)
    pump(receiver, dealer)
    assert isinstance(reply(dealer), Error)
    (reason_file,) = (spool / "quarantine").glob("*.reason.json")
    reason = json.loads(reason_file.read_text())
    assert reason["frame_sizes"] == [len(f) for f in frames]
    assert reason["reason"]
    assert reason_file.with_name(reason_file.name.replace(".reason.json", ".bin")).read_bytes() == b"".join(frames)
    _assert_still_accepts(receiver, dealer)


def _bad_batches() -> dict[str, tuple[bytes, str]]:
    rows, shape = inconsistent_rows()
    good = payload()
    return {
        "payload that is not Arrow": (b"\x00" * 64, "TruncatedStreamError"),
        "payload cut short": (good[: len(good) // 2], "TruncatedStreamError"),
        "another schema major version": (payload(version=f"{SCHEMA_MAJOR + 1}.0.0"), "SchemaVersionError"),
        "logprobs shorter than tokens": (payload(rows, shape, validate=False), "RecordShapeError"),
    }


@pytest.mark.parametrize("name", list(_bad_batches()))
def test_invalid_batches_are_quarantined_acked_as_such_and_not_yielded(
    name: str, receiver: Receiver, dealer: zmq.Socket[Any], spool: Path
) -> None:
    data, code = _bad_batches()[name]
    dealer.send_multipart([header("bad-1", data), data])
    pump(receiver, dealer)
    ack = reply(dealer)
    assert ack.batch_id == "bad-1" and ack.status == "quarantined" and ack.reason.startswith(code)
    (reason_file,) = (spool / "quarantine").glob("*.reason.json")
    assert json.loads(reason_file.read_text())["code"] == code
    assert list((spool / "batches").iterdir()) == []
    _assert_still_accepts(receiver, dealer)


def test_header_and_payload_that_disagree_on_the_row_count_are_quarantined(receiver: Receiver, dealer: zmq.Socket[Any]) -> None:
    data = payload()
    dealer.send_multipart([header("count-1", data, num_trajectories=5), data])
    pump(receiver, dealer)
    assert reply(dealer).reason.startswith("bad_count")


def _assert_still_accepts(receiver: Receiver, dealer: zmq.Socket[Any]) -> None:
    rows, shape = golden_rows()
    data = payload(rows, shape)
    dealer.send_multipart([header("good-after", data), data])
    received = receiver.receive(timeout_s=5)
    assert received is not None and received.header.batch_id == "good-after"


def test_with_release_consumed_a_batch_file_is_recycled_once_the_consumer_asks_for_more_but_stays_deduplicated(
    address: str, spool: Path, dealer: zmq.Socket[Any]
) -> None:
    receiver = Receiver(ReceiverConfig(bind=address, spool_dir=spool, release_consumed=True))
    try:
        data = payload()
        dealer.send_multipart([header("rel-1", data), data])
        received = receiver.receive(timeout_s=5)
        assert received is not None and received.path.exists()
        dealer.send_multipart([header("rel-1", data), data])
        replies_until(receiver, dealer, Ack(batch_id="rel-1", status="duplicate", reason=None))
        assert list((spool / "batches").iterdir()) == []
        assert len(list((spool / "free").iterdir())) == 1
        dealer.send_multipart([header("rel-2", data), data])
        second = receiver.receive(timeout_s=5)
        assert second is not None and second.path.read_bytes().endswith(data)
        assert list((spool / "free").iterdir()) == [], "the freed file was written over"
    finally:
        receiver.close()


# ------------------------------------------------------- consumer hand-over


@pytest.fixture
def consumer_receiver(address: str, spool: Path) -> Iterator[Receiver]:
    rx = Receiver(ReceiverConfig(bind=address, spool_dir=spool, credits=3, handover="consumer"))
    yield rx
    rx.close()


def _dealer(address: str) -> zmq.Socket[Any]:
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(address)
    return socket


def _accepted_log(spool: Path) -> list[str]:
    return (spool / "accepted.log").read_text().splitlines() if (spool / "accepted.log").exists() else []


def test_with_the_consumer_handover_a_batch_is_acked_only_when_the_consumer_commits_it_and_no_file_is_written(
    consumer_receiver: Receiver, dealer: zmq.Socket[Any], spool: Path
) -> None:
    data = payload()
    dealer.send_multipart([header("cm-1", data), data])
    received = consumer_receiver.receive(timeout_s=5)
    assert received is not None and received.header.batch_id == "cm-1"
    assert received.path is None
    assert shares_frame(received), "the consumer hand-over keeps the zero-copy views"
    assert no_reply(dealer), "no ack before the consumer commits"
    assert _accepted_log(spool) == []
    consumer_receiver.commit(received)
    assert _accepted_log(spool) == ["cm-1"], "the id is durable before the ack goes out"
    assert reply(dealer) == Ack(batch_id="cm-1", status="accepted", reason=None)
    assert isinstance(reply(dealer), Credit)
    consumer_receiver.commit(received)  # twice: nothing more
    assert no_reply(dealer)
    assert list((spool / "batches").iterdir()) == []


def test_with_the_consumer_handover_asking_for_the_next_batch_commits_the_previous_one(
    consumer_receiver: Receiver, dealer: zmq.Socket[Any], spool: Path
) -> None:
    data = payload()
    dealer.send_multipart([header("cm-2", data), data])
    assert consumer_receiver.receive(timeout_s=5) is not None
    assert no_reply(dealer)
    assert replies_until(consumer_receiver, dealer, Ack(batch_id="cm-2", status="accepted", reason=None)) == [
        Ack(batch_id="cm-2", status="accepted", reason=None)
    ]
    assert isinstance(reply(dealer), Credit)
    assert _accepted_log(spool) == ["cm-2"]


def test_with_the_consumer_handover_an_uncommitted_batch_comes_again_after_a_restart_and_a_committed_one_does_not(
    consumer_receiver: Receiver, dealer: zmq.Socket[Any], address: str, spool: Path
) -> None:
    data = payload()
    dealer.send_multipart([header("done-1", data), data])
    consumer_receiver.commit(consumer_receiver.receive(timeout_s=5))  # type: ignore[arg-type]
    assert reply(dealer).status == "accepted"
    dealer.send_multipart([header("held-1", data), data])
    assert consumer_receiver.receive(timeout_s=5) is not None
    consumer_receiver.close()  # dies holding held-1, never committed
    restarted = Receiver(ReceiverConfig(bind=address, spool_dir=spool, handover="consumer"))
    again = _dealer(address)
    try:
        again.send_multipart([header("done-1", data), data])
        replies_until(restarted, again, Ack(batch_id="done-1", status="duplicate", reason=None))
        again.send_multipart([header("held-1", data), data])
        resent = restarted.receive(timeout_s=5)
        assert resent is not None and resent.header.batch_id == "held-1"
        restarted.commit(resent)
        replies_until(restarted, again, Ack(batch_id="held-1", status="accepted", reason=None))
        assert _accepted_log(spool) == ["done-1", "held-1"]
    finally:
        again.close(linger=0)
        restarted.close()


def test_with_the_consumer_handover_a_held_batch_resent_on_a_new_connection_is_not_yielded_twice(
    consumer_receiver: Receiver, dealer: zmq.Socket[Any], address: str
) -> None:
    data = payload()
    dealer.send_multipart([header("re-1", data), data])
    assert consumer_receiver.receive(timeout_s=5) is not None
    # While the consumer holds it, the sender reconnects and resends what was in flight.
    newer = _dealer(address)
    try:
        newer.send_multipart([header("re-1", data), data])
        pump(consumer_receiver, newer)  # commits re-1 first; fails if re-1 were yielded again
        assert reply(dealer) == Ack(batch_id="re-1", status="accepted", reason=None)
        assert replies_until(consumer_receiver, newer, Ack(batch_id="re-1", status="duplicate", reason=None))
    finally:
        newer.close(linger=0)


def test_with_the_consumer_handover_ids_the_consumer_already_holds_are_duplicates(
    address: str, spool: Path, dealer: zmq.Socket[Any]
) -> None:
    receiver = Receiver(ReceiverConfig(bind=address, spool_dir=spool, handover="consumer", committed_ids={"known-1"}))
    try:
        data = payload()
        dealer.send_multipart([header("known-1", data), data])
        replies = replies_until(receiver, dealer, Ack(batch_id="known-1", status="duplicate", reason=None))
        assert not any(isinstance(r, Ack) and r.status == "accepted" for r in replies)
        # The consumer already holds known-1: it must not be handed out again.
        assert receiver.receive(timeout_s=0.2) is None
    finally:
        receiver.close()


def test_an_unknown_handover_mode_is_refused(address: str, spool: Path) -> None:
    with pytest.raises(ValueError, match="handover"):
        Receiver(ReceiverConfig(bind=address, spool_dir=spool, handover="disk"))  # type: ignore[arg-type]
