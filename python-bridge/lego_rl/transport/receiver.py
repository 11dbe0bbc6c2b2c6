"""The receiving half of the data plane: ZeroMQ ROUTER -> validate -> spool -> ack -> consumer.

Design (docs/transport.md):
1. A sender says hello (a Heartbeat); the receiver answers with `credits`
   Credits. Each batch uses one; the credit comes back when the consumer asks
   for the next batch (or at once for a duplicate or a quarantined batch), so a
   slow consumer slows every sender down and memory stays bounded by
   senders x credits x max_batch_bytes.
2. Each batch is validated by `decode_batch` (schema version, columns, lengths
   of tokens / logprobs / mask / routing). A bad one goes to the quarantine
   folder with its reason and is acked `quarantined`; the receiver keeps going.
3. The Ack goes out only after a durable hand-over, which lets the sender
   delete its copy. `handover="spool"` (default): the batch is written to the
   receiver spool (fsync + rename) before it is yielded and acked.
   `handover="consumer"`: nothing is written but one line; the batch is acked
   when the consumer commits it (`commit()`, or by asking for the next batch),
   after its id is appended (fsynced) to accepted.log. Until then the sender
   keeps it spooled and resends it after any crash.
   Batch ids already in the index are acked `duplicate` and not yielded
   again, so redelivery after any crash is idempotent.
4. Decoding is zero-copy: the Arrow columns are views over the ZeroMQ frame.
5. `publish_weight_version` announces the trainer's policy version to every
   sender that said hello, and to each later one on its hello, so rollout
   workers can enforce their staleness bound (`Sender.waitForPolicyVersion`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import zmq

from lego_rl.schema import (
    Ack,
    BatchHeader,
    ControlMessageError,
    Credit,
    DecodedBatch,
    Error,
    Heartbeat,
    SchemaError,
    WeightVersion,
    decode_batch,
    decode_control,
    encode_control,
)

from .receiver_spool import ReceiverSpool

EventSink = Callable[[dict[str, Any]], None]
Handover = Literal["spool", "consumer"]


@dataclass(kw_only=True, slots=True)
class ReceiverConfig:
    """How a receiver binds, spools and grants credit."""

    bind: str
    """ZeroMQ address to bind, e.g. tcp://127.0.0.1:5555 or ipc:///tmp/lego.sock."""
    spool_dir: Path
    """Receiver spool: accepted batches, the dedup index and the quarantine folder."""
    receiver_id: str = "receiver"
    """Name sent in Credit messages."""
    credits: int = 8
    """Batches each sender may have in flight (the credit window)."""
    max_batch_bytes: int = 64 * 1024 * 1024
    """Largest payload accepted; larger ones are quarantined."""
    tap: str | None = None
    """If set, accepted batches are also published (best effort) on a PUB socket bound here."""
    handover: Handover = "spool"
    """What the Ack waits for. "spool": the batch is in this receiver's spool (fsync + rename),
    so the spool is the trainer's durable queue. "consumer": the consumer committed it
    (`Receiver.commit`, or asking for the next batch); no batch file is written, the
    sender keeps its copy until then, and a receiver crash makes the sender resend
    what was not committed. See docs/transport.md, "Hand-over modes"."""
    committed_ids: Collection[str] = ()
    """Consumer mode: batch ids the consumer already holds durably (read back from its own
    queue or checkpoint at start). They are acked `duplicate`; this closes the window between
    the consumer's own commit and the receiver's accepted.log line."""
    release_consumed: bool = False
    """Delete (recycle) a batch's spool file once the consumer asks for the next one.
    Off by default: the spool is then the trainer's durable queue and notebooks can read it."""
    on_event: EventSink | None = field(default=None, repr=False)
    """Called with a dict for every accepted, duplicate or quarantined batch."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ReceivedBatch:
    """An accepted batch. `decoded.batch` columns are views over `frame` (kept alive here)."""

    header: BatchHeader
    decoded: DecodedBatch
    path: Path | None
    """Its file in the receiver spool; None with `handover="consumer"` (no file is written)."""
    frame: Any = field(repr=False)

    @property
    def batch(self) -> pa.RecordBatch:
        return self.decoded.batch


def _warm_up() -> None:
    """pyarrow loads pandas the first time `pc.is_in` runs (~2.5 s here); pay that before the first batch, not during it."""
    import pyarrow.compute as pc

    pc.is_in(pa.array(["ok"]), value_set=pa.array(["ok"]))


def shares_frame(received: ReceivedBatch) -> bool:
    """True when the token, logprob, mask and routing values are views over the received frame (no copy)."""
    view = memoryview(received.frame.buffer) if received.frame is not None else None
    if view is None:
        return False
    start = pa.py_buffer(view).address
    end = start + len(view)
    segments = received.batch.column("segments").values
    for name in ("token_ids", "logprobs", "loss_mask", "routing"):
        values = segments.field(name).values
        if len(values) == 0:
            continue
        buffer = values.buffers()[1]
        if not (start <= buffer.address and buffer.address + buffer.size <= end):
            return False
    return True


MAX_PEERS = 4096
"""Sender connections remembered for WeightVersion announcements; the oldest hello is forgotten first
(a reconnecting sender gets a new identity, and ROUTER drops messages to one that is gone)."""


class _Rejected(Exception):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class Receiver:
    """Iterate it for ReceivedBatch objects; `receive(timeout_s)` polls once."""

    def __init__(self, config: ReceiverConfig, context: zmq.Context[Any] | None = None) -> None:
        self.config = config
        self.spool = ReceiverSpool(config.spool_dir)
        self._context = context or zmq.Context.instance()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(config.bind)
        self._tap = None
        if config.tap:
            self._tap = self._context.socket(zmq.PUB)
            self._tap.setsockopt(zmq.LINGER, 0)
            self._tap.setsockopt(zmq.SNDHWM, 4)
            self._tap.bind(config.tap)
        _warm_up()
        if config.handover not in ("spool", "consumer"):
            raise ValueError(f"handover must be 'spool' or 'consumer', not {config.handover!r}")
        self._consumer_handover = config.handover == "consumer"
        self._committed = frozenset(config.committed_ids)
        # The batch the consumer holds until it commits it or asks for the next one, and
        # the peer (connection) it came on. Frames are read only inside receive(), after
        # the held batch is committed, so a copy resent on a newer connection finds its
        # id in the index and is acked `duplicate` there.
        self._held: ReceivedBatch | None = None
        self._held_peer = b""
        self._peers: dict[bytes, None] = {}  # senders that said hello, oldest first (for announcements)
        self._weight_version: WeightVersion | None = None
        self.stats: dict[str, int] = {
            "accepted": 0, "duplicates": 0, "quarantined": 0, "hellos": 0, "bytes": 0, "tokens": 0, "trajectories": 0,
            "committed": 0,
        }

    @property
    def address(self) -> str:
        return self._socket.getsockopt_string(zmq.LAST_ENDPOINT)

    def __iter__(self) -> Iterator[ReceivedBatch]:
        while not self._socket.closed:
            batch = self.receive(timeout_s=None)
            if batch is not None:
                yield batch

    def receive(self, timeout_s: float | None = 1.0) -> ReceivedBatch | None:
        """The next accepted batch, or None when `timeout_s` passes first.

        Calling it again commits the previous batch (see `commit`) unless
        the consumer already did.
        """
        if self._held is not None:
            self.commit(self._held)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait_ms = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            if not self._socket.poll(wait_ms):
                return None
            frames = self._socket.recv_multipart(copy=False)
            received = self._handle(frames)
            if received is not None:
                return received
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def commit(self, received: ReceivedBatch) -> None:
        """The consumer is done with `received`: its credit returns to the sender.

        With `handover="consumer"` this is the durable hand-over: the consumer
        calls it once the batch is safe on its side (e.g. in the trainer's
        queue or checkpoint); the id is appended (fsynced) to accepted.log and
        only then is the batch acked, so the sender may delete its copy. A
        batch never committed is resent after a restart of either side.
        Committing a batch twice, or one that is not the held batch, does nothing.
        """
        if received is not self._held:
            return
        self._held = None
        batch_id = received.header.batch_id
        if self._consumer_handover:
            self.spool.record(batch_id)
            self._send(self._held_peer, Ack(batch_id=batch_id, status="accepted", reason=None))
            self.stats["committed"] += 1
            self._emit({"type": "committed", "batch_id": batch_id})
        self._grant(self._held_peer, 1)
        if self.config.release_consumed and received.path is not None:
            self.spool.release(received.path)

    @property
    def weight_version(self) -> WeightVersion | None:
        """The latest published policy version (None before the first)."""
        return self._weight_version

    def publish_weight_version(self, version: WeightVersion) -> int:
        """Announces `version` to every connected sender, and to each sender that says hello later.

        Versions are monotonic: republishing the current one is allowed (it is
        sent again), an older one raises ValueError. Call it from the thread
        that calls `receive` (ZeroMQ sockets are not thread-safe). Returns the
        number of sender connections it was sent to.
        """
        if not isinstance(version, WeightVersion):
            raise TypeError(f"expected a WeightVersion, got {type(version).__name__}")
        if self._weight_version is not None and version.version < self._weight_version.version:
            raise ValueError(f"policy version {version.version} is older than the published {self._weight_version.version}")
        self._weight_version = version
        for peer in self._peers:
            self._send(peer, version)
        self._emit({"type": "weight_version", "version": version.version, "senders": len(self._peers)})
        return len(self._peers)

    def close(self, linger_ms: int = 1000, *, flush: bool = False, grace_ms: int = 500) -> None:
        """Close the sockets; queued replies (acks, the last WeightVersion) get up to `linger_ms`
        to reach connected senders. ZeroMQ sends them from its I/O thread, which a process
        exiting right away kills: `flush=True` waits for them by terminating the receiver's
        context, for a process that is about to exit (the trainers' entry points) and owns
        no other socket on it.

        A sender drops a reply it had not read yet when the connection closes under it
        (measured: the last WeightVersion or, with the consumer hand-over, the last batch's
        ack, sent ~1 ms before close, was sometimes lost, and a worker draining its spool
        then waited for an ack that never came). So `flush=True` first keeps the connections
        up for `grace_ms`, long enough for waiting senders to read what was queued. Nothing
        depends on it for correctness: an unacked batch is resent and deduplicated, and a
        restarted receiver announces the version again on the sender's hello."""
        if flush and grace_ms > 0:
            time.sleep(grace_ms / 1000)
        self.spool.close()
        self._socket.close(linger=linger_ms)
        if self._tap is not None:
            self._tap.close(linger=0)
        if flush:
            self._context.term()

    # ------------------------------------------------------------ internals

    def _send(self, peer: bytes, message: Any) -> None:
        self._socket.send_multipart([peer, encode_control(message)])

    def _grant(self, peer: bytes, credits: int) -> None:
        self._send(peer, Credit(receiver_id=self.config.receiver_id, credits=credits, max_batch_bytes=self.config.max_batch_bytes))

    def _emit(self, event: dict[str, Any]) -> None:
        if self.config.on_event is not None:
            self.config.on_event(event)

    def _handle(self, frames: list[Any]) -> ReceivedBatch | None:
        peer = frames[0].bytes
        parts = frames[1:]
        if len(parts) == 1:
            self._handle_control(peer, parts[0])
            return None
        if len(parts) != 2:
            self._quarantine(peer, parts, None, "bad_frame", f"expected 1 control frame or [header, payload], got {len(parts)} frames")
            return None
        return self._handle_batch(peer, parts[0], parts[1])

    def _handle_control(self, peer: bytes, frame: Any) -> None:
        try:
            message = decode_control(frame.buffer)
        except ControlMessageError as error:
            self._quarantine(peer, [frame], None, "bad_frame", f"control frame: {error}")
            return
        if isinstance(message, Heartbeat):
            # A (re)connected sender has forgotten its credits: give it a full window.
            self.stats["hellos"] += 1
            self._grant(peer, self.config.credits)
            self._peers.pop(peer, None)
            self._peers[peer] = None
            while len(self._peers) > MAX_PEERS:
                del self._peers[next(iter(self._peers))]
            if self._weight_version is not None:
                self._send(peer, self._weight_version)
            return
        self._send(peer, Error(code="unexpected_message", message=f"a receiver does not handle {type(message).__name__}", batch_id=None))

    def _handle_batch(self, peer: bytes, header_frame: Any, payload_frame: Any) -> ReceivedBatch | None:
        try:
            header = decode_control(header_frame.buffer)
        except ControlMessageError as error:
            self._quarantine(peer, [header_frame, payload_frame], None, "bad_header", f"batch header: {error}")
            self._grant(peer, 1)
            return None
        if not isinstance(header, BatchHeader):
            self._quarantine(peer, [header_frame, payload_frame], None, "bad_header", f"first frame is a {type(header).__name__}, not a BatchHeader")
            self._grant(peer, 1)
            return None
        if self.spool.holds(header.batch_id) or header.batch_id in self._committed:
            self.stats["duplicates"] += 1
            self._send(peer, Ack(batch_id=header.batch_id, status="duplicate", reason=None))
            self._grant(peer, 1)
            self._emit({"type": "duplicate", "batch_id": header.batch_id})
            return None
        try:
            decoded = self._validate(header, payload_frame)
        except _Rejected as rejected:
            self._quarantine(peer, [header_frame, payload_frame], header.batch_id, rejected.code, rejected.reason)
            self._send(peer, Ack(batch_id=header.batch_id, status="quarantined", reason=f"{rejected.code}: {rejected.reason}"))
            self._grant(peer, 1)
            return None
        path: Path | None = None
        if not self._consumer_handover:
            path = self.spool.accept(header, header_frame.buffer, payload_frame.buffer)
            self._send(peer, Ack(batch_id=header.batch_id, status="accepted", reason=None))
        self.stats["accepted"] += 1
        self.stats["bytes"] += header.payload_bytes
        self.stats["tokens"] += header.num_tokens
        self.stats["trajectories"] += header.num_trajectories
        if self._tap is not None:
            try:
                self._tap.send_multipart([header_frame, payload_frame], copy=False, flags=zmq.NOBLOCK)
            except zmq.Again:
                pass  # a tap is best effort: a slow notebook must never slow training
        self._emit({
            "type": "accepted", "batch_id": header.batch_id, "num_trajectories": header.num_trajectories,
            "path": None if path is None else str(path),
        })
        self._held = ReceivedBatch(header=header, decoded=decoded, path=path, frame=payload_frame)
        self._held_peer = peer
        return self._held

    def _validate(self, header: BatchHeader, payload_frame: Any) -> DecodedBatch:
        size = len(payload_frame.buffer)
        if size != header.payload_bytes:
            raise _Rejected("bad_length", f"payload is {size} bytes, header says {header.payload_bytes}")
        if size > self.config.max_batch_bytes:
            raise _Rejected("too_large", f"payload of {size} bytes is over max_batch_bytes={self.config.max_batch_bytes}")
        try:
            decoded = decode_batch(pa.py_buffer(payload_frame.buffer), expect="Trajectory")
        except SchemaError as error:
            raise _Rejected(type(error).__name__, str(error)) from error
        if decoded.batch.num_rows != header.num_trajectories:
            raise _Rejected("bad_count", f"payload holds {decoded.batch.num_rows} trajectories, header says {header.num_trajectories}")
        return decoded

    def _quarantine(self, peer: bytes, frames: list[Any], batch_id: str | None, code: str, reason: str) -> None:
        path = self.spool.quarantine(code=code, reason=reason, frames=[f.buffer for f in frames], batch_id=batch_id, peer=peer)
        self.stats["quarantined"] += 1
        if batch_id is None:
            self._send(peer, Error(code=code, message=reason, batch_id=None))
        self._emit({"type": "quarantined", "batch_id": batch_id, "code": code, "reason": reason, "path": str(path)})
