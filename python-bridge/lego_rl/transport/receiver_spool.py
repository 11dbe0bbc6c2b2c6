"""The receiver's durable hand-over: a batch is acked only once it is here.

    DIR/batches/<batch_id>.lgrb         accepted batches (spool_file.py layout)
    DIR/accepted.log                    one accepted batch id per line (fsynced)
    DIR/quarantine/<name>.bin           bytes that failed validation, as received
    DIR/quarantine/<name>.reason.json   why, which peer, frame sizes
    DIR/free/<n>.reuse                  consumed batch files kept to be written over

The dedup index is the union of accepted.log and the file names in batches/,
so it survives a restart even if the process died between the rename of a
batch and the append to the log, and even after a consumer deletes batches.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import TextIO

from lego_rl.schema import BatchHeader

from .spool_file import SUFFIX, spool_prefix, write_durably

_SAFE = re.compile(r"^[A-Za-z0-9._:@-]{1,200}$")


def safe_name(batch_id: str) -> str:
    """A file name for a batch id; ids outside the portable alphabet are hashed."""
    if _SAFE.match(batch_id):
        return batch_id
    return "id-" + hashlib.sha256(batch_id.encode()).hexdigest()[:32]


class ReceiverSpool:
    def __init__(self, root: str | os.PathLike[str], keep_free: int = 8) -> None:
        self.root = Path(root)
        self.keep_free = keep_free
        self.free_dir = self.root / "free"
        self.free_dir.mkdir(parents=True, exist_ok=True)
        self._free = sorted(self.free_dir.iterdir())
        self._free_seq = 0
        self.batches = self.root / "batches"
        self.quarantine_dir = self.root / "quarantine"
        self.index_path = self.root / "accepted.log"
        self.batches.mkdir(parents=True, exist_ok=True)
        self.quarantine_dir.mkdir(parents=True, exist_ok=True)
        for stale in self.batches.glob("*.tmp-*"):  # a write that never reached its rename
            stale.unlink(missing_ok=True)
        self._ids: set[str] = set()
        self._log: TextIO | None = None  # accepted.log, opened on the first append
        if self.index_path.exists():
            self._ids.update(line for line in self.index_path.read_text().splitlines() if line)
        self._names = {p.name[: -len(SUFFIX)] for p in self.batches.glob(f"*{SUFFIX}")}

    def holds(self, batch_id: str) -> bool:
        return batch_id in self._ids or safe_name(batch_id) in self._names

    def __len__(self) -> int:
        return len(self._ids | self._names)

    def accept(self, header: BatchHeader, header_bytes: bytes | memoryview, payload: memoryview) -> Path:
        """Durably stores an accepted batch and records its id; returns its path."""
        name = safe_name(header.batch_id)
        path = self.batches / f"{name}{SUFFIX}"
        write_durably(path, [spool_prefix(header_bytes), payload], reuse=self._free.pop() if self._free else None)
        self._names.add(name)
        self.record(header.batch_id)
        return path

    def record(self, *batch_ids: str) -> None:
        """Appends ids to the dedup index with one fsync for all of them (group commit).

        The consumer hand-over (`ReceiverConfig.handover="consumer"`) stores no
        batch file: this line is all the receiver keeps of a committed batch.
        """
        if self._log is None:
            self._log = open(self.index_path, "a")
            if self._log.tell() > 0 and not self.index_path.read_bytes().endswith(b"\n"):
                self._log.write("\n")  # a line cut short by a crash (never acked) must not run into the next id
        self._log.write("".join(f"{batch_id}\n" for batch_id in batch_ids))
        self._log.flush()
        os.fsync(self._log.fileno())
        self._ids.update(batch_ids)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def release(self, path: Path) -> None:
        """The consumer is done with an accepted batch: its file leaves batches/ (its id stays in the index)."""
        if len(self._free) < self.keep_free:
            target = self.free_dir / f"{os.getpid()}-{self._free_seq}.reuse"
            self._free_seq += 1
            os.replace(path, target)
            self._free.append(target)
        else:
            path.unlink(missing_ok=True)
        self._names.discard(path.name[: -len(SUFFIX)])

    def quarantine(
        self, *, code: str, reason: str, frames: list[memoryview], batch_id: str | None, peer: bytes | None
    ) -> Path:
        """Keeps bytes that failed validation, as received, beside a JSON reason."""
        stem = f"{time.time_ns()}-{safe_name(batch_id) if batch_id else 'frame'}"
        data_path = self.quarantine_dir / f"{stem}.bin"
        write_durably(data_path, list(frames))
        note = {
            "code": code,
            "reason": reason,
            "batch_id": batch_id,
            "peer": peer.hex() if peer else None,
            "frame_sizes": [len(f) for f in frames],
            "received_at_ms": time.time() * 1000,
        }
        (self.quarantine_dir / f"{stem}.reason.json").write_text(json.dumps(note, indent=2))
        return data_path
