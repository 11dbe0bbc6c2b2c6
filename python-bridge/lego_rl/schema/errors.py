"""Typed errors of the schema codecs. Every message names what is wrong and where."""

from __future__ import annotations


class SchemaError(ValueError):
    """Base class: the bytes or records do not follow schemas/records.toml."""


class TruncatedStreamError(SchemaError):
    """The Arrow IPC stream ends early (no end-of-stream marker or a cut message)."""


class SchemaVersionError(SchemaError):
    """The batch was written with a schema major version this reader does not speak."""

    def __init__(self, found: str, supported: str) -> None:
        super().__init__(
            f"batch was written with schema version {found}, but this reader speaks {supported} "
            f"(major {supported.split('.')[0]}); upgrade the older side so both use the same major version"
        )
        self.found = found
        self.supported = supported


class MissingColumnError(SchemaError):
    """A required column is absent from the batch."""


class ColumnTypeError(SchemaError):
    """A column has another Arrow type than the schema defines."""


class RecordShapeError(SchemaError):
    """Values inside a record disagree (lengths, routing size, masks, bounds, enum values)."""


class ControlMessageError(SchemaError):
    """A msgpack control message is malformed or of an unknown kind."""
