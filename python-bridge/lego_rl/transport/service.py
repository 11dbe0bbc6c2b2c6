"""A receiver behind plain method calls, for hosts that own the loop (a Ray actor, a trainer thread).

No Ray import here: `lego_rl.cluster.transport_actor` wraps this class with
`ray.remote`. Methods return Arrow objects, which Ray moves through its object
store without pickling the token buffers element by element.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from .receiver import Receiver, ReceiverConfig


class ReceiverService:
    """Owns one Receiver; `next_batch` hands out accepted batches one at a time."""

    def __init__(self, bind: str, spool_dir: str, credits: int = 8, receiver_id: str = "receiver", tap: str | None = None) -> None:
        self._receiver = Receiver(
            ReceiverConfig(bind=bind, spool_dir=Path(spool_dir), credits=credits, receiver_id=receiver_id, tap=tap)
        )

    def address(self) -> str:
        return self._receiver.address

    def next_batch(self, timeout_s: float = 1.0) -> tuple[dict[str, Any], pa.RecordBatch] | None:
        """(header fields, record batch) of the next accepted batch, or None after `timeout_s`."""
        received = self._receiver.receive(timeout_s=timeout_s)
        if received is None:
            return None
        return asdict(received.header), received.batch

    def stats(self) -> dict[str, int]:
        return dict(self._receiver.stats)

    def close(self) -> None:
        self._receiver.close()
