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
3. A good batch is written to the receiver spool (fsync + rename) *before* the
   Ack: that is the durable hand-over that lets the sender delete its copy.
   Batch ids already in the spool index are acked `duplicate` and not yielded
   again, so redelivery after any crash is idempotent.
4. Decoding is zero-copy: the Arrow columns are views over the ZeroMQ frame.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    decode_batch,
    decode_control,
    encode_control,
)

from .receiver_spool import ReceiverSpool

EventSink = Callable[[dict[str, Any]], None]


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
    path: Path
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
        self._owed: bytes | None = None  # the peer whose credit comes back on the next receive()
        self._consumed: Path | None = None  # the batch the consumer holds until the next receive()
        self.stats: dict[str, int] = {
            "accepted": 0, "duplicates": 0, "quarantined": 0, "hellos": 0, "bytes": 0, "tokens": 0, "trajectories": 0,
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

        Calling it again tells the receiver the consumer is done with the
        previous batch: that returns its credit to the sender.
        """
        if self._owed is not None:
            self._grant(self._owed, 1)
            self._owed = None
        if self._consumed is not None:
            self.spool.release(self._consumed)
            self._consumed = None
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

    def close(self) -> None:
        self._socket.close(linger=0)
        if self._tap is not None:
            self._tap.close(linger=0)

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
        if self.spool.holds(header.batch_id):
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
        path = self.spool.accept(header, header_frame.buffer, payload_frame.buffer)
        self._send(peer, Ack(batch_id=header.batch_id, status="accepted", reason=None))
        self._owed = peer
        if self.config.release_consumed:
            self._consumed = path
        self.stats["accepted"] += 1
        self.stats["bytes"] += header.payload_bytes
        self.stats["tokens"] += header.num_tokens
        self.stats["trajectories"] += header.num_trajectories
        if self._tap is not None:
            try:
                self._tap.send_multipart([header_frame, payload_frame], copy=False, flags=zmq.NOBLOCK)
            except zmq.Again:
                pass  # a tap is best effort: a slow notebook must never slow training
        self._emit({"type": "accepted", "batch_id": header.batch_id, "num_trajectories": header.num_trajectories, "path": str(path)})
        return ReceivedBatch(header=header, decoded=decoded, path=path, frame=payload_frame)

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
