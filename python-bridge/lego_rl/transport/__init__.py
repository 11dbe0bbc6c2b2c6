"""The receiving side of the data plane: Arrow batches over ZeroMQ, acked, spooled.

`Receiver` (receiver.py) is a plain iterator of validated, zero-copy batches;
`read_spool_file` reads the on-disk layout both languages share;
`lego_rl.cluster.transport_actor` wraps the receiver for Ray.
"""

from .errors import SpoolFormatError, TapTimeoutError, TransportError
from .heap import reuse_heap_memory
from .receiver import ReceivedBatch, Receiver, ReceiverConfig
from .receiver_spool import ReceiverSpool
from .service import ReceiverService
from .spool_file import SUFFIX as SPOOL_SUFFIX
from .spool_file import SpoolRecord, read_spool_file

__all__ = [
    "ReceivedBatch",
    "Receiver",
    "ReceiverConfig",
    "ReceiverService",
    "ReceiverSpool",
    "SPOOL_SUFFIX",
    "SpoolFormatError",
    "SpoolRecord",
    "TapTimeoutError",
    "TransportError",
    "read_spool_file",
    "reuse_heap_memory",
]
