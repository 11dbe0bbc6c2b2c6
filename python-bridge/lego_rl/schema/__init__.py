"""The cross-language records of lego-rl, as Python sees them.

Types come from `generated.py` (written by scripts/gen-schemas from
schemas/records.toml); this package adds the Arrow and msgpack codecs.
"""

from .arrow_codec import DecodedBatch, arrow_schema, batch_records, decode_batch, encode_batch
from .compare import record_differences
from .control_codec import decode_control, encode_control
from .errors import (
    ColumnTypeError,
    ControlMessageError,
    MissingColumnError,
    RecordShapeError,
    SchemaError,
    SchemaVersionError,
    TruncatedStreamError,
)
from .generated import (
    SCHEMA_VERSION,
    Ack,
    BatchHeader,
    ControlMessage,
    Credit,
    Error,
    Heartbeat,
    Segment,
    TokenProvenance,
    Trajectory,
    TrajectoryMetrics,
    Turn,
    TurnSpan,
    TurnTimings,
    WeightVersion,
)
from .routing import RoutingShape
from .validate import trainable_problems

from .generated import (  # the engine's control-plane records
    SCHEMA_MAJOR,
    Abort,
    EngineHello,
    EngineInfo,
    GenerateRequest,
    GenerateResult,
    TokenChunk,
    UpdateWeights,
    WeightsUpdated,
)

__all__ = [
    "Abort",
    "Ack",
    "BatchHeader",
    "ColumnTypeError",
    "ControlMessage",
    "ControlMessageError",
    "Credit",
    "DecodedBatch",
    "EngineHello",
    "EngineInfo",
    "Error",
    "GenerateRequest",
    "GenerateResult",
    "Heartbeat",
    "MissingColumnError",
    "RecordShapeError",
    "RoutingShape",
    "SCHEMA_MAJOR",
    "SCHEMA_VERSION",
    "SchemaError",
    "SchemaVersionError",
    "Segment",
    "TokenChunk",
    "TokenProvenance",
    "Trajectory",
    "TrajectoryMetrics",
    "TruncatedStreamError",
    "Turn",
    "TurnSpan",
    "TurnTimings",
    "UpdateWeights",
    "WeightVersion",
    "WeightsUpdated",
    "arrow_schema",
    "batch_records",
    "decode_batch",
    "decode_control",
    "encode_batch",
    "encode_control",
    "record_differences",
    "trainable_problems",
]
