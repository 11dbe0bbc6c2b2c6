"""Records <-> Arrow IPC streams, driven by the generated field descriptors.

Layout (docs/schema.md): one IPC stream per batch holding exactly one record
batch, one row per top-level record (Trajectory or Turn). Segments nest as
list<struct>; every per-token column is list<primitive>, so the values of one
column over the whole batch sit in one contiguous buffer that numpy and torch
can view without a copy. `encode_batch` and `decode_batch` are each other's
opposite.
"""

from __future__ import annotations

import functools

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from . import generated as g
from .errors import (
    ColumnTypeError,
    MissingColumnError,
    SchemaError,
    SchemaVersionError,
    TruncatedStreamError,
)
from .routing import META_RECORD, META_SCHEMA_VERSION, RoutingShape
from .validate import validate_batch

_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_NP_TOKENS = {"int32": np.int32, "float32": np.float32, "uint8": np.uint8}
_PA_SCALARS = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
}


def arrow_schema(record: str, routing: RoutingShape | None, *, version: str = g.SCHEMA_VERSION) -> pa.Schema:
    """The Arrow schema of a batch of `record` rows, with version and routing metadata."""
    if record not in g.ARROW_RECORDS:
        raise SchemaError(f"{record} is not an Arrow record; choose one of {g.ARROW_RECORDS}")
    routing_type = routing.arrow_type if routing else pa.uint8()
    metadata = {META_SCHEMA_VERSION: version.encode(), META_RECORD: record.encode()}
    if routing:
        metadata.update(routing.metadata())
    return pa.schema(g.ARROW_FIELD_BUILDERS[record](routing_type), metadata=metadata)


# ------------------------------------------------------------------ encoding


def _offsets(lengths: Sequence[int]) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise SchemaError(
            f"a list column holds {offsets[-1]} values, over Arrow's 2^31 per batch; split the batch"
        )
    return pa.array(offsets.astype(np.int32))


def _mask(values: Sequence[Any], nullable: bool) -> pa.Array | None:
    if not nullable or all(v is not None for v in values):
        return None
    return pa.array([v is None for v in values], type=pa.bool_())


def _build(
    desc: g.FieldDescriptor, type_: pa.DataType, values: Sequence[Any], routing: RoutingShape | None, where: str
) -> pa.Array:
    if not desc.nullable and any(v is None for v in values):
        raise SchemaError(f"{where}.{desc.name} is required but a record holds None")
    match desc.kind:
        case "scalar":
            return pa.array(values, type=_PA_SCALARS[desc.scalar])
        case "enum":
            for v in values:
                if v is not None and v not in desc.values:
                    raise SchemaError(f"{where}.{desc.name}={v!r} is not one of {desc.values}")
            return pa.array(values, type=pa.string())
        case "strings":
            flat = [s for v in values if v is not None for s in v]
            lengths = [0 if v is None else len(v) for v in values]
            return pa.ListArray.from_arrays(
                _offsets(lengths), pa.array(flat, type=pa.string()), type=type_, mask=_mask(values, desc.nullable)
            )
        case "tokens" | "routing":
            if desc.kind == "routing":
                if routing is None and any(v is not None for v in values):
                    raise SchemaError(f"{where}.{desc.name} holds routing but the batch has no routing shape")
                dtype: Any = routing.numpy_dtype if routing else np.uint8
            else:
                dtype = _NP_TOKENS[desc.element]
            arrays = [np.asarray(v if v is not None else (), dtype=dtype).reshape(-1) for v in values]
            flat_values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)
            return pa.ListArray.from_arrays(
                _offsets([a.size for a in arrays]), pa.array(flat_values), type=type_, mask=_mask(values, desc.nullable)
            )
        case "record":
            return _build_struct(desc.record, values, routing, f"{where}.{desc.name}", mask=_mask(values, desc.nullable))
        case "records":
            flat_records = [r for v in values if v is not None for r in v]
            lengths = [0 if v is None else len(v) for v in values]
            inner = _build_struct(desc.record, flat_records, routing, f"{where}.{desc.name}[]")
            return pa.ListArray.from_arrays(_offsets(lengths), inner, type=type_, mask=_mask(values, desc.nullable))
    raise AssertionError(desc)


def _build_struct(
    record: str, values: Sequence[Any], routing: RoutingShape | None, where: str, *, mask: pa.Array | None = None
) -> pa.StructArray:
    descs = g.RECORD_FIELDS[record]
    routing_type = routing.arrow_type if routing else pa.uint8()
    fields = g.ARROW_FIELD_BUILDERS[record](routing_type)
    # A null struct still has a slot in each child column; a fixed filler keeps the bytes deterministic.
    rows = [v if v is not None else _placeholder_row(record) for v in values]
    children = [_build(d, f.type, [getattr(v, d.name) for v in rows], routing, where) for d, f in zip(descs, fields)]
    return pa.StructArray.from_arrays(children, fields=fields, mask=mask)


_SCALAR_FILLER: dict[str, Any] = {"string": "", "bool": False, "float32": 0.0, "float64": 0.0}


def _placeholder_row(record: str) -> Any:
    """The filler under a null struct: a value of each required field's type (nullable ones stay None)."""
    values: dict[str, Any] = {}
    for desc in g.RECORD_FIELDS[record]:
        if desc.nullable:
            values[desc.name] = None
            continue
        match desc.kind:
            case "scalar":
                values[desc.name] = _SCALAR_FILLER.get(desc.scalar, 0)
            case "enum":
                values[desc.name] = desc.values[0]
            case "strings" | "records":
                values[desc.name] = []
            case "tokens":
                values[desc.name] = np.zeros(0, dtype=_NP_TOKENS[desc.element])
            case "record":
                values[desc.name] = _placeholder_row(desc.record)
            case _:
                raise SchemaError(f"{record}.{desc.name}: a required {desc.kind} column cannot sit under a nullable struct")
    return g.RECORD_CLASSES[record](**values)


def encode_batch(
    record: str,
    rows: Sequence[Any],
    routing: RoutingShape | None,
    *,
    version: str = g.SCHEMA_VERSION,
    validate: bool = True,
) -> pa.Buffer:
    """Encodes rows of `record` as one Arrow IPC stream (one record batch).

    Validates like `decode_batch` so a bad record fails where it was made;
    `validate=False` exists only to let tests craft invalid batches.
    """
    schema = arrow_schema(record, routing, version=version)
    struct = _build_struct(record, rows, routing, record)
    batch = pa.RecordBatch.from_arrays(struct.flatten(), schema=schema)
    if validate:
        validate_batch(record, batch, routing)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


# ------------------------------------------------------------------ decoding


@dataclass(frozen=True, kw_only=True, slots=True)
class DecodedBatch:
    """A validated record batch and what its metadata says about it."""

    record: str
    schema_version: str
    routing: RoutingShape | None
    batch: pa.RecordBatch
    """Columns are views over the buffer that was decoded (no copy)."""


def _as_buffer(data: bytes | bytearray | memoryview | pa.Buffer) -> pa.Buffer:
    return data if isinstance(data, pa.Buffer) else pa.py_buffer(data)


@functools.lru_cache(maxsize=64)
def _expected_schema(record: str, routing: RoutingShape | None) -> pa.Schema:
    """`arrow_schema` for decoding: a receiver checks every batch against the same few schemas."""
    return arrow_schema(record, routing)


def _predates(version: str, since: str) -> bool:
    """Whether a batch written at `version` predates the MINOR release `since` (so it lacks that column)."""
    if not since:
        return False
    major, minor = (int(p) for p in version.split(".")[:2])
    since_major, since_minor = (int(p) for p in since.split("."))
    return major == since_major and minor < since_minor


def _check_columns(record: str, schema: pa.Schema, expected: pa.Schema, version: str) -> list[pa.Field]:
    """Refuses missing or mistyped columns; returns the columns a later MINOR release added that the batch predates."""
    if schema.equals(expected, check_metadata=False):
        return []  # the usual case, in one comparison; otherwise name the first column that differs
    since = {d.name: d.since for d in g.RECORD_FIELDS[record]}
    absent = []
    for field in expected:
        index = schema.get_field_index(field.name)
        if index < 0:
            if _predates(version, since.get(field.name, "")):
                absent.append(field)
                continue
            raise MissingColumnError(f"{record} batch has no column {field.name!r} (required by schema {g.SCHEMA_VERSION})")
        found = schema.field(index)
        if not found.type.equals(field.type):
            raise ColumnTypeError(f"{record}.{field.name} is {found.type}, schema {g.SCHEMA_VERSION} defines {field.type}")
    return absent


def decode_batch(data: bytes | bytearray | memoryview | pa.Buffer, *, expect: str | None = None) -> DecodedBatch:
    """Reads and validates one IPC stream written by `encode_batch` (either language).

    Raises a SchemaError subclass naming the problem: truncated stream, unknown
    major version, missing or mistyped column, inconsistent record.
    """
    buffer = _as_buffer(data)
    if buffer.size < len(_END_OF_STREAM) or buffer[-len(_END_OF_STREAM):].to_pybytes() != _END_OF_STREAM:
        raise TruncatedStreamError(
            f"Arrow IPC stream of {buffer.size} bytes does not end with the end-of-stream marker; "
            "it was cut short or is not an IPC stream"
        )
    try:
        reader = pa.ipc.open_stream(buffer)
        batches = list(reader)
    except (pa.ArrowInvalid, OSError) as error:
        raise TruncatedStreamError(f"Arrow IPC stream of {buffer.size} bytes is corrupt or truncated: {error}") from error
    schema = reader.schema
    metadata = schema.metadata or {}
    version = metadata.get(META_SCHEMA_VERSION, b"").decode()
    if not version:
        raise SchemaVersionError("(none)", g.SCHEMA_VERSION)
    if version.split(".")[0] != str(g.SCHEMA_MAJOR):
        raise SchemaVersionError(version, g.SCHEMA_VERSION)
    record = metadata.get(META_RECORD, b"").decode()
    if record not in g.ARROW_RECORDS:
        raise SchemaError(f"batch metadata names record {record!r}; expected one of {g.ARROW_RECORDS}")
    if expect is not None and record != expect:
        raise SchemaError(f"expected a {expect} batch, got a {record} batch")
    try:
        routing = RoutingShape.from_metadata(metadata)
    except ValueError as error:
        raise SchemaError(f"{record} batch: {error}") from error
    absent = _check_columns(record, schema, _expected_schema(record, routing), version)
    if len(batches) != 1:
        raise SchemaError(f"{record} IPC stream holds {len(batches)} record batches; the schema expects exactly 1")
    batch = batches[0]
    if absent:
        # Columns added after the batch was written read as null; they are the record's last
        # fields, so appending them keeps the descriptor order `batch_records` relies on.
        batch = pa.RecordBatch.from_arrays(
            batch.columns + [pa.nulls(batch.num_rows, f.type) for f in absent],
            schema=pa.schema(list(batch.schema) + absent, metadata=batch.schema.metadata),
        )
    validate_batch(record, batch, routing)
    return DecodedBatch(record=record, schema_version=version, routing=routing, batch=batch)


# ------------------------------------------------------------ materializing


def _values(desc: g.FieldDescriptor, array: pa.Array) -> list[Any]:
    match desc.kind:
        case "scalar" | "enum" | "strings":
            return array.to_pylist()
        case "tokens" | "routing":
            offsets = array.offsets.to_numpy()
            flat: npt.NDArray[Any] = array.values.to_numpy(zero_copy_only=True)
            nulls = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
            return [
                None if nulls is not None and nulls[i] else flat[offsets[i] : offsets[i + 1]]
                for i in range(len(array))
            ]
        case "record":
            rows = _records(desc.record, array)
            if not array.null_count:
                return rows
            valid = array.is_valid().to_numpy(zero_copy_only=False)
            return [row if valid[i] else None for i, row in enumerate(rows)]
        case "records":
            offsets = array.offsets.to_numpy()
            inner = _records(desc.record, array.values)
            return [inner[offsets[i] : offsets[i + 1]] for i in range(len(array))]
    raise AssertionError(desc)


def _records(record: str, struct: pa.StructArray) -> list[Any]:
    descs = g.RECORD_FIELDS[record]
    children = struct.flatten()
    columns = [_values(d, child) for d, child in zip(descs, children)]
    cls = g.RECORD_CLASSES[record]
    return [cls(**{d.name: col[i] for d, col in zip(descs, columns)}) for i in range(len(struct))]


def batch_records(decoded: DecodedBatch) -> list[Any]:
    """The rows as generated dataclasses; token arrays are numpy views, not copies."""
    struct = pa.StructArray.from_arrays(decoded.batch.columns, fields=list(decoded.batch.schema))
    return _records(decoded.record, struct)
