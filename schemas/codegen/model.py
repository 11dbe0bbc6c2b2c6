"""Parses schemas/records.toml into a small typed model the emitters share.

The TOML is the only source of truth; this module checks it (unknown types,
duplicate names, references to undefined records) so a mistake fails here with
the record and field named, not as odd generated code.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

SCALARS = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "float32",
    "float64",
    "string",
)
TOKEN_ELEMENTS = ("int32", "float32", "uint8")
# Packed arrays in control messages: msgpack bin holding little-endian values, so per-token
# data costs its raw bytes on both sides (no per-element msgpack ints or floats).
ARRAY_ELEMENTS = ("int32", "float32", "uint8", "uint16")


class SchemaDefinitionError(ValueError):
    """records.toml is inconsistent; the message names the place."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FieldType:
    """One field's type. `kind` is scalar, tokens, routing, strings, array, enum, record or records."""

    kind: str
    scalar: str = ""
    element: str = ""
    ref: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class FieldDef:
    name: str
    type: FieldType
    nullable: bool
    doc: str
    since: str = ""
    """MAJOR.MINOR of the release that added the field to an Arrow record ("" = from the start)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EnumDef:
    name: str
    doc: str
    values: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class IntEnumDef:
    name: str
    doc: str
    values: tuple[tuple[str, int], ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordDef:
    name: str
    doc: str
    fields: tuple[FieldDef, ...]
    arrow: bool
    """True for top-level records that travel as Arrow record batches."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageDef:
    name: str
    kind: str
    doc: str
    fields: tuple[FieldDef, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class SchemaModel:
    version: str
    enums: tuple[EnumDef, ...]
    int_enums: tuple[IntEnumDef, ...]
    records: tuple[RecordDef, ...]
    messages: tuple[MessageDef, ...]

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def record(self, name: str) -> RecordDef:
        for record in self.records:
            if record.name == name:
                return record
        raise KeyError(name)


def _parse_type(text: str, where: str, enums: set[str], records: set[str]) -> tuple[FieldType, bool]:
    nullable = text.endswith("?")
    text = text.removesuffix("?")
    if text in SCALARS:
        return FieldType(kind="scalar", scalar=text), nullable
    if text == "routing":
        return FieldType(kind="routing"), nullable
    if text == "list<string>":
        return FieldType(kind="strings"), nullable
    if m := re.fullmatch(r"tokens<(\w+)>", text):
        if m[1] not in TOKEN_ELEMENTS:
            raise SchemaDefinitionError(f"{where}: tokens<{m[1]}> is not one of {TOKEN_ELEMENTS}")
        return FieldType(kind="tokens", element=m[1]), nullable
    if m := re.fullmatch(r"array<(\w+)>", text):
        if m[1] not in ARRAY_ELEMENTS:
            raise SchemaDefinitionError(f"{where}: array<{m[1]}> is not one of {ARRAY_ELEMENTS}")
        return FieldType(kind="array", element=m[1]), nullable
    if m := re.fullmatch(r"enum:(\w+)", text):
        if m[1] not in enums:
            raise SchemaDefinitionError(f"{where}: enum {m[1]} is not defined under [enums]")
        return FieldType(kind="enum", ref=m[1]), nullable
    if m := re.fullmatch(r"(\w+)(\[\])?", text):
        if m[1] not in records:
            raise SchemaDefinitionError(f"{where}: type {text!r} is neither a known type nor a record")
        return FieldType(kind="records" if m[2] else "record", ref=m[1]), nullable
    raise SchemaDefinitionError(f"{where}: cannot parse type {text!r}")


def _parse_fields(raw: list[dict], where: str, enums: set[str], records: set[str]) -> tuple[FieldDef, ...]:
    seen: set[str] = set()
    fields = []
    for entry in raw:
        name = entry["name"]
        if name in seen:
            raise SchemaDefinitionError(f"{where}.{name}: defined twice")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            raise SchemaDefinitionError(f"{where}.{name}: field names are snake_case")
        seen.add(name)
        ftype, nullable = _parse_type(entry["type"], f"{where}.{name}", enums, records)
        since = entry.get("since", "")
        if since and not re.fullmatch(r"\d+\.\d+", since):
            raise SchemaDefinitionError(f"{where}.{name}: since {since!r} is not MAJOR.MINOR")
        fields.append(FieldDef(name=name, type=ftype, nullable=nullable, doc=entry.get("doc", ""), since=since))
    return tuple(fields)


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _check_since(record: RecordDef, version: str) -> None:
    """A MINOR release may only append nullable top-level columns (docs/schema.md, "Versions")."""
    last: tuple[int, int] | None = None
    for field in record.fields:
        where = f"{record.name}.{field.name}"
        if not field.since:
            if last is not None:
                raise SchemaDefinitionError(f"{where}: comes after a field added later (since {last[0]}.{last[1]}); add fields at the end")
            continue
        if not record.arrow:
            raise SchemaDefinitionError(
                f"{where}: `since` is for top-level columns of Arrow records; a nested struct cannot grow in a MINOR release"
            )
        if not field.nullable:
            raise SchemaDefinitionError(f"{where}: a field added in a MINOR release must be nullable (older batches read it as null)")
        since = _minor(field.since)
        if since[0] != _minor(version)[0] or since > _minor(version):
            raise SchemaDefinitionError(f"{where}: since {field.since} is not a release of schema {version}'s MAJOR up to it")
        if last is not None and since < last:
            raise SchemaDefinitionError(f"{where}: since {field.since} comes after a field since {last[0]}.{last[1]}; keep them in release order")
        last = since


def load_schema(path: Path) -> SchemaModel:
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    version = raw["schema"]["version"]
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise SchemaDefinitionError(f"schema.version {version!r} is not MAJOR.MINOR.PATCH")
    enums = tuple(
        EnumDef(name=name, doc=body.get("doc", ""), values=tuple(body["values"]))
        for name, body in raw.get("enums", {}).items()
    )
    int_enums = tuple(
        IntEnumDef(name=name, doc=body.get("doc", ""), values=tuple(body["values"].items()))
        for name, body in raw.get("int_enums", {}).items()
    )
    enum_names = {e.name for e in enums}
    record_names = set(raw.get("records", {}))
    records = tuple(
        RecordDef(
            name=name,
            doc=body.get("doc", ""),
            arrow=bool(body.get("arrow", False)),
            fields=_parse_fields(body["fields"], name, enum_names, record_names),
        )
        for name, body in raw.get("records", {}).items()
    )
    messages = tuple(
        MessageDef(
            name=name,
            kind=body["kind"],
            doc=body.get("doc", ""),
            fields=_parse_fields(body["fields"], name, enum_names, set()),
        )
        for name, body in raw.get("messages", {}).items()
    )
    for message in messages:
        if any(field.since for field in message.fields):
            raise SchemaDefinitionError(f"{message.name}: `since` is for Arrow records; a message's nullable fields are optional already")
    for message in messages:
        for field in message.fields:
            if field.type.kind not in ("scalar", "enum", "strings", "array"):
                raise SchemaDefinitionError(
                    f"{message.name}.{field.name}: control messages hold scalars, enums, list<string> and array<T> only"
                )
    for record in records:
        _check_since(record, version)
        for field in record.fields:
            if field.type.kind == "array":
                raise SchemaDefinitionError(f"{record.name}.{field.name}: array<T> is for control messages; records use tokens<T>")
    return SchemaModel(version=version, enums=enums, int_enums=int_enums, records=records, messages=messages)
