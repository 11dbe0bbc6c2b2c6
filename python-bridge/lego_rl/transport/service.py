"""A receiver behind plain method calls, for hosts that own the loop (a Ray actor, a trainer thread).

No Ray import here: `lego_rl.cluster.transport_actor` wraps this class with
`ray.remote`. Methods return Arrow objects, which Ray moves through its object
store without pickling the token buffers element by element.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from lego_rl.schema import WeightVersion

from .receiver import Handover, Receiver, ReceiverConfig


class ReceiverService:
    """Owns one Receiver; `next_batch` hands out accepted batches one at a time."""

    def __init__(
        self, bind: str, spool_dir: str, credits: int = 8, receiver_id: str = "receiver", tap: str | None = None,
        handover: Handover = "spool",
    ) -> None:
        self._receiver = Receiver(
            ReceiverConfig(
                bind=bind, spool_dir=Path(spool_dir), credits=credits, receiver_id=receiver_id, tap=tap, handover=handover
            )
        )

    def address(self) -> str:
        return self._receiver.address

    def next_batch(self, timeout_s: float = 1.0) -> tuple[dict[str, Any], pa.RecordBatch] | None:
        """(header fields, record batch) of the next accepted batch, or None after `timeout_s`.

        Calling it again commits the previous batch (with `handover="consumer"`, that acks it).
        """
        received = self._receiver.receive(timeout_s=timeout_s)
        if received is None:
            return None
        return asdict(received.header), received.batch

    def publish_weight_version(self, version: int, published_at_ms: float | None = None, checkpoint_path: str | None = None) -> int:
        """Announces a policy version to the connected senders (and later ones); returns how many it reached."""
        return self._receiver.publish_weight_version(
            WeightVersion(
                version=version,
                published_at_ms=time.time() * 1000 if published_at_ms is None else published_at_ms,
                checkpoint_path=checkpoint_path,
            )
        )

    def stats(self) -> dict[str, int]:
        return dict(self._receiver.stats)

    def close(self) -> None:
        self._receiver.close()
