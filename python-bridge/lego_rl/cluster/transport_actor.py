"""The transport receiver as a Ray actor: rollout workers push batches to it over ZeroMQ.

The actor binds the receiver on its node; the trainer pulls accepted batches
with `next_batch.remote(timeout_s)`. One CPU: the receiver is I/O bound and
its credits already bound its memory.
"""

from __future__ import annotations

from typing import Any

import ray

from ..transport import ReceiverService

TransportActor = ray.remote(num_cpus=1)(ReceiverService)


def start_transport_actor(bind: str, spool_dir: str, *, credits: int = 8, name: str | None = None) -> Any:
    """Starts the actor and returns its handle once the receiver is bound."""
    options = {"name": name} if name else {}
    actor = TransportActor.options(**options).remote(bind, spool_dir, credits)
    ray.get(actor.address.remote())  # surfaces a bind failure here, not on first use
    return actor
