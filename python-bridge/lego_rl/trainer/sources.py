"""Where training batches come from: a spool folder now, the live receiver through the same protocol.

A source yields `TrainingBatch`es; the driver calls `done()` only after the
update it made from the batch is checkpointed, so a source may then forget it
(delete it from its spool, ack it upstream). Until then it must keep it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

import pyarrow as pa

from ..schema import DecodedBatch, SchemaError, WeightVersion, decode_batch

if TYPE_CHECKING:
    from ..transport import ReceivedBatch, Receiver


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingBatch:
    batch_id: str
    load: Callable[[], DecodedBatch]
    """Decodes the batch; called only for batches not trained yet (a resume skips the rest by id)."""
    done: Callable[[], None]
    """Call once the update made from this batch is durable (checkpointed)."""


class BatchSource(Protocol):
    def __iter__(self) -> Iterator[TrainingBatch]: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class SpoolFolderSource:
    """Every `*.arrow` file of a folder in name order; a trained batch moves to `trained/`.

    The batch id is the file stem. Invalid files move to `quarantine/` with a
    `.reason.txt` beside them, and the source carries on.
    """

    folder: Path

    def _move(self, path: Path, sub: str) -> Path:
        target = self.folder / sub
        target.mkdir(exist_ok=True)
        os.replace(path, target / path.name)
        return target / path.name

    def __iter__(self) -> Iterator[TrainingBatch]:
        for path in sorted(self.folder.glob("*.arrow")):
            try:
                decoded = decode_batch(pa.memory_map(str(path)).read_buffer(), expect="Trajectory")
            except SchemaError as error:
                moved = self._move(path, "quarantine")
                moved.with_suffix(".reason.txt").write_text(f"{type(error).__name__}: {error}\n")
                continue
            yield TrainingBatch(batch_id=path.stem, load=lambda d=decoded: d, done=lambda p=path: self._move(p, "trained"))


@dataclass(frozen=True, kw_only=True, slots=True)
class ReceiverSource:
    """Live batches from the data-plane receiver, after the ones its spool already holds.

    A batch the receiver accepted (and acked to its sender) before a trainer or
    receiver restart is still in the receiver's spool; those are replayed first,
    oldest first, and the loop skips the ids it has already trained. Then the
    receiver's live batches follow. Spool files stay as an archive notebooks read.
    """

    receiver: Receiver
    log: Callable[[str], None] = print
    producers_finished: Callable[[], bool] | None = None
    """Asked between batches and while none arrives: True once no producer will send again (a job's own
    rollout fleet has finished), and the source then ends when the receiver has nothing left. It may
    raise to end training (a fleet that cannot go on). None: the source never ends."""
    poll_s: float = 1.0
    """With `producers_finished`: how long to wait for a batch before asking it again."""

    def _spooled(self) -> Iterator[TrainingBatch]:
        from ..transport import read_spool_file
        from ..transport import SpoolFormatError
        from ..transport import SPOOL_SUFFIX as SUFFIX

        for path in sorted(self.receiver.spool.batches.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime_ns):
            try:
                record = read_spool_file(path)
            except SpoolFormatError as error:
                self.log(f"receiver spool: skipping unreadable {path.name}: {error}")
                continue
            yield TrainingBatch(
                batch_id=record.header.batch_id,
                load=lambda r=record: decode_batch(r.payload, expect="Trajectory"),
                done=lambda: None,
            )

    def __iter__(self) -> Iterator[TrainingBatch]:
        yield from self._spooled()
        for received in self._live():
            # With handover="consumer" the commit is the durable hand-over: the sender may
            # forget the batch only once the checkpoint holding its update is on disk.
            yield TrainingBatch(batch_id=received.header.batch_id, load=lambda r=received: r.decoded,
                                done=lambda r=received: self.receiver.commit(r))

    def _live(self) -> Iterator[ReceivedBatch]:
        if self.producers_finished is None:
            yield from self.receiver
            return
        while True:
            received = self.receiver.receive(timeout_s=self.poll_s)
            # Asked with or without a batch, so a failed producer ends training while others still send.
            # A producer finishes only once its batches are acknowledged, so "finished" and then nothing
            # received means nothing of theirs is still on the way.
            done = self.producers_finished()
            if received is not None:
                yield received
            elif done:
                return

    def announce(self, version: int, checkpoint_path: str | None = None) -> None:
        """Tell every rollout worker's sender the trainer's policy version (their staleness bound reads it)."""
        self.receiver.publish_weight_version(
            WeightVersion(version=version, published_at_ms=time.time() * 1000.0, checkpoint_path=checkpoint_path)
        )
