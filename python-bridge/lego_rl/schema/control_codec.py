"""Control messages <-> msgpack, byte-identical with the TypeScript side.

Both sides write a map whose keys follow records.toml (`kind` first, every key
present). Numbers follow JavaScript semantics because msgpackr cannot tell an
integral float from an int: an integral value in [-2^31, 2^32) is written as
the smallest msgpack int and any other number as float64. This module
normalizes Python values to that rule before packing and back after unpacking.
`array<T>` fields travel as one msgpack bin of little-endian values and decode
to read-only numpy views over the frame (no per-element work on either side).
`encode_control` and `decode_control` are each other's opposite.
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np

from . import generated as g
from .errors import ControlMessageError

_INT_MIN, _INT_MAX = -(2**31), 2**32 - 1
_SAFE = 2**53
_INT_SCALARS = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"}
# Explicit little-endian dtypes: the wire is LE whatever the host's byte order.
_ARRAY_DTYPES = {"int32": np.dtype("<i4"), "float32": np.dtype("<f4"), "uint8": np.dtype("<u1"), "uint16": np.dtype("<u2")}


def _array_to_wire(desc: g.FieldDescriptor, value: Any, where: str) -> bytes:
    dtype = _ARRAY_DTYPES[desc.element]
    try:
        array = np.asarray(value)
        if array.ndim != 1 and array.size > 0:
            array = array.reshape(-1)
        if array.size == 0:
            return b""
        if array.dtype.kind in "iu" and dtype.kind in "iu":
            # Refuse rather than wrap: an int64 routing id of 70000 must not become 4464.
            info = np.iinfo(dtype)
            low, high = int(array.min()), int(array.max())
            if low < info.min or high > info.max:
                raise ControlMessageError(f"{where}.{desc.name} holds {low}..{high}, outside {desc.element}")
        elif array.dtype.kind not in "iuf" or (array.dtype.kind == "f" and dtype.kind != "f"):
            raise ControlMessageError(f"{where}.{desc.name} must hold {desc.element} values, got dtype {array.dtype}")
        return np.ascontiguousarray(array, dtype=dtype).tobytes()
    except ControlMessageError:
        raise
    except (TypeError, ValueError, OverflowError) as error:
        raise ControlMessageError(f"{where}.{desc.name} is not an array of {desc.element}: {error}") from error


def _array_from_wire(desc: g.FieldDescriptor, value: Any, where: str) -> np.ndarray:
    dtype = _ARRAY_DTYPES[desc.element]
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ControlMessageError(f"{where}.{desc.name} must be a msgpack bin of little-endian {desc.element}, got {type(value).__name__}")
    if len(value) % dtype.itemsize:
        raise ControlMessageError(f"{where}.{desc.name} has {len(value)} bytes, not a whole number of {desc.element} values")
    return np.frombuffer(value, dtype=dtype)


def _wire_number(value: int | float) -> int | float:
    """The value msgpackr would write for the same JS number."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and _INT_MIN <= value <= _INT_MAX:
        return int(value)
    if isinstance(value, int) and not _INT_MIN <= value <= _INT_MAX:
        if abs(value) > _SAFE:
            raise ControlMessageError(f"integer {value} exceeds the +-2^53 range both languages represent exactly")
        return float(value)
    return value


def _to_wire(desc: g.FieldDescriptor, value: Any, where: str) -> Any:
    if value is None:
        if not desc.nullable:
            raise ControlMessageError(f"{where}.{desc.name} is required but is None")
        return None
    if desc.kind == "enum":
        if value not in desc.values:
            raise ControlMessageError(f"{where}.{desc.name}={value!r} is not one of {desc.values}")
        return value
    if desc.kind == "strings":
        return list(value)
    if desc.kind == "array":
        return _array_to_wire(desc, value, where)
    if desc.scalar in _INT_SCALARS or desc.scalar.startswith("float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ControlMessageError(f"{where}.{desc.name} must be a number, got {type(value).__name__}")
        return _wire_number(value)
    return value


def encode_control(message: g.ControlMessage) -> bytes:
    """Packs a control message dataclass into canonical msgpack bytes."""
    kind = type(message).KIND
    wire: dict[str, Any] = {"kind": kind}
    for desc in g.MESSAGE_FIELDS[kind]:
        wire[desc.name] = _to_wire(desc, getattr(message, desc.name), type(message).__name__)
    return msgpack.packb(wire, use_bin_type=True)


def _from_wire(desc: g.FieldDescriptor, value: Any, where: str) -> Any:
    if value is None:
        if not desc.nullable:
            raise ControlMessageError(f"{where}.{desc.name} is required but missing or nil")
        return None
    expected: tuple[type, ...]
    match desc.kind, desc.scalar:
        case ("enum", _):
            if value not in desc.values:
                raise ControlMessageError(f"{where}.{desc.name}={value!r} is not one of {desc.values}")
            return value
        case ("strings", _):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ControlMessageError(f"{where}.{desc.name} must be a list of strings")
            return value
        case ("array", _):
            return _array_from_wire(desc, value, where)
        case (_, "string"):
            expected = (str,)
        case (_, "bool"):
            expected = (bool,)
        case (_, scalar) if scalar in _INT_SCALARS:
            if isinstance(value, float) and value.is_integer():
                return int(value)
            expected = (int,)
        case _:
            if isinstance(value, int) and not isinstance(value, bool):
                return float(value)
            expected = (float,)
    if isinstance(value, bool) and bool not in expected or not isinstance(value, expected):
        raise ControlMessageError(
            f"{where}.{desc.name} must be {expected[0].__name__}, got {type(value).__name__} {value!r}"
        )
    return value


def decode_control(data: bytes | memoryview) -> g.ControlMessage:
    """Unpacks and checks a control message; raises ControlMessageError naming the problem."""
    try:
        wire = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (msgpack.UnpackException, ValueError) as error:
        raise ControlMessageError(f"control frame of {len(data)} bytes is not valid msgpack: {error}") from error
    if not isinstance(wire, dict):
        raise ControlMessageError(f"control frame must be a msgpack map, got {type(wire).__name__}")
    kind = wire.get("kind")
    cls = g.MESSAGE_CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ControlMessageError(f"unknown control message kind {kind!r}; known: {sorted(g.MESSAGE_CLASSES)}")
    values = {d.name: _from_wire(d, wire.get(d.name), cls.__name__) for d in g.MESSAGE_FIELDS[kind]}
    return cls(**values)
