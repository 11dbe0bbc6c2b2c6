/**
 * Records -> Arrow IPC stream, driven by the generated field descriptors.
 *
 * Per-token columns are built straight from the records' typed arrays (one
 * concatenation per column, no per-token JS values). The layout is described
 * in docs/schema.md; `decodeBatch` (arrow-decode.ts) is this module's opposite.
 */
import {
  RecordBatch, RecordBatchStreamWriter, Schema, Struct, Uint16, makeData,
  type Bool, type Data, type DataType, type Field, type Int32, type Int64, type List, type Utf8,
} from "apache-arrow";
import { SchemaError } from "./errors.ts";
import {
  ARROW_RECORDS, RECORD_FIELDS, SCHEMA_VERSION, turnArrowFields, trajectoryArrowFields,
  type ArrowRecordName, type FieldDescriptor, type RecordName, type RecordTypes, type RoutingDtype,
  type ScalarName,
} from "./generated.ts";
import { validateRecords } from "./validate.ts";
import { META_RECORD, META_SCHEMA_VERSION, routingDtype, routingMetadata, type RoutingShape } from "./routing.ts";

const FIELD_BUILDERS: { [R in ArrowRecordName]: (routing: RoutingDtype) => Field[] } = {
  Turn: turnArrowFields,
  Trajectory: trajectoryArrowFields,
};

export interface EncodeOptions {
  /** Overrides the version written in the metadata (tests use it to write a foreign version). */
  readonly version?: string;
  /** Validate like `decodeBatch` so a bad record fails where it was made (default true; tests turn it off). */
  readonly validate?: boolean;
  /**
   * Memory for the per-token columns of multi-row batches (one concatenation
   * per column), valid until the batch is framed. The transport passes reused
   * scratch memory here: fresh allocations are the slow part on small VMs.
   */
  readonly scratch?: (bytes: number) => { buffer: ArrayBuffer; byteOffset: number };
}

type Scratch = EncodeOptions["scratch"];

/** The Arrow schema of a batch of `record` rows, with version and routing metadata. */
export function arrowSchema(record: ArrowRecordName, routing: RoutingShape | null, options: EncodeOptions = {}): Schema {
  if (!(ARROW_RECORDS as readonly string[]).includes(record)) {
    throw new SchemaError(`${record} is not an Arrow record; choose one of ${ARROW_RECORDS.join(", ")}`);
  }
  const metadata = new Map<string, string>([
    [META_SCHEMA_VERSION, options.version ?? SCHEMA_VERSION],
    [META_RECORD, record],
  ]);
  if (routing) for (const [k, v] of routingMetadata(routing)) metadata.set(k, v);
  return new Schema(FIELD_BUILDERS[record](routingDtype(routing)), metadata);
}

const TEXT = new TextEncoder();

function validity(values: readonly unknown[], nullable: boolean): { nullCount: number; nullBitmap?: Uint8Array } {
  if (!nullable) return { nullCount: 0 };
  let nullCount = 0;
  const bitmap = new Uint8Array(Math.ceil(values.length / 8));
  values.forEach((v, i) => {
    if (v === null || v === undefined) nullCount += 1;
    else bitmap[i >> 3]! |= 1 << (i & 7);
  });
  return nullCount ? { nullCount, nullBitmap: bitmap } : { nullCount: 0 };
}

function offsetsOf(lengths: readonly number[], where: string): Int32Array {
  const offsets = new Int32Array(lengths.length + 1);
  let total = 0;
  lengths.forEach((n, i) => {
    total += n;
    offsets[i + 1] = total;
  });
  if (total > 0x7fffffff) {
    throw new SchemaError(`${where} holds ${total} values, over Arrow's 2^31 per batch; split the batch`);
  }
  return offsets;
}

function utf8Data(type: DataType, values: readonly (string | null)[], nullable: boolean): Data {
  const encoded = values.map((v) => (v === null ? new Uint8Array(0) : TEXT.encode(v)));
  const valueOffsets = offsetsOf(encoded.map((b) => b.length), "a string column");
  const data = new Uint8Array(valueOffsets[encoded.length]!);
  encoded.forEach((bytes, i) => data.set(bytes, valueOffsets[i]!));
  return makeData({ type: type as Utf8, length: values.length, ...validity(values, nullable), valueOffsets, data });
}

type TypedArray = Int8Array | Int16Array | Int32Array | Uint8Array | Uint16Array | Uint32Array | Float32Array | Float64Array;
const TYPED: { [K in Exclude<ScalarName, "bool" | "string" | "int64">]: new (n: number) => TypedArray } = {
  int8: Int8Array, int16: Int16Array, int32: Int32Array, uint8: Uint8Array, uint16: Uint16Array,
  uint32: Uint32Array, float32: Float32Array, float64: Float64Array,
};

function scalarData(type: DataType, scalar: ScalarName, values: readonly unknown[], nullable: boolean, where: string): Data {
  const length = values.length;
  const valid = validity(values, nullable);
  if (scalar === "string") return utf8Data(type, values as (string | null)[], nullable);
  if (scalar === "bool") {
    const bits = new Uint8Array(Math.ceil(length / 8));
    values.forEach((v, i) => {
      if (v === true) bits[i >> 3]! |= 1 << (i & 7);
    });
    return makeData({ type: type as Bool, length, ...valid, data: bits });
  }
  if (scalar === "int64") {
    const data = new BigInt64Array(length);
    values.forEach((v, i) => {
      if (v === null) return;
      if (typeof v !== "number" || !Number.isSafeInteger(v)) {
        throw new SchemaError(`${where} must be an integer within +-2^53, got ${String(v)}`);
      }
      data[i] = BigInt(v);
    });
    return makeData({ type: type as Int64, length, ...valid, data });
  }
  const data = new TYPED[scalar](length);
  values.forEach((v, i) => {
    if (v === null) return;
    if (typeof v !== "number") throw new SchemaError(`${where} must be a number, got ${typeof v}`);
    data[i] = v;
  });
  return makeData({ type: type as Int32, length, ...valid, data: data as Int32Array });
}

type TypedCtor = (new (n: number) => TypedArray) & { BYTES_PER_ELEMENT: number };

function concatTyped(parts: readonly ArrayLike<number>[], ctor: TypedCtor, scratch: Scratch): TypedArray {
  const total = parts.reduce((n, p) => n + p.length, 0);
  let out: TypedArray;
  if (scratch) {
    const { buffer, byteOffset } = scratch(total * ctor.BYTES_PER_ELEMENT);
    out = new (ctor as unknown as new (b: ArrayBuffer, o: number, n: number) => TypedArray)(buffer, byteOffset, total);
  } else {
    out = new ctor(total);
  }
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

const TOKEN_CTORS = { int32: Int32Array, float32: Float32Array, uint8: Uint8Array } as const;

function buildColumn(desc: FieldDescriptor, field: Field, values: readonly unknown[], where: string, scratch: Scratch): Data {
  const path = `${where}.${desc.name}`;
  if (!desc.nullable && values.some((v) => v === null || v === undefined)) {
    throw new SchemaError(`${path} is required but a record holds ${values.find((v) => v == null)}`);
  }
  const type = field.type as DataType;
  const t = desc.type;
  switch (t.kind) {
    case "scalar":
      return scalarData(type, t.scalar, values, desc.nullable, path);
    case "enum":
      for (const v of values) {
        if (v !== null && !t.values.includes(v as string)) {
          throw new SchemaError(`${path}=${JSON.stringify(v)} is not one of ${t.values.join(", ")}`);
        }
      }
      return utf8Data(type, values as (string | null)[], desc.nullable);
    case "strings": {
      const lists = values.map((v) => (v ?? []) as string[]);
      const child = utf8Data((type as List).children[0]!.type, lists.flat(), false);
      const valueOffsets = offsetsOf(lists.map((l) => l.length), path);
      return makeData({ type: type as List, length: values.length, ...validity(values, desc.nullable), valueOffsets, child });
    }
    case "tokens":
    case "routing": {
      const elementType = (type as List).children[0]!.type as DataType;
      const ctor = t.kind === "tokens" ? TOKEN_CTORS[t.element] : elementType instanceof Uint16 ? Uint16Array : Uint8Array;
      const arrays = values.map((v) => (v ?? new ctor(0)) as TypedArray);
      for (const a of arrays) {
        if (!(a instanceof ctor)) {
          throw new SchemaError(`${path} must be a ${ctor.name}, got ${a?.constructor?.name ?? typeof a}`);
        }
      }
      const valueOffsets = offsetsOf(arrays.map((a) => a.length), path);
      const flat = arrays.length === 1 ? arrays[0]! : concatTyped(arrays, ctor as TypedCtor, scratch);
      const child = makeData({ type: elementType as Int32, length: flat.length, nullCount: 0, data: flat as Int32Array });
      return makeData({ type: type as List, length: values.length, ...validity(values, desc.nullable), valueOffsets, child });
    }
    case "record": {
      // A null struct still has a slot in each child column; a fixed filler keeps the bytes deterministic.
      const rows = values.map((v) => (v ?? placeholderRow(t.record)) as object);
      return buildStruct(t.record, type as Struct, rows, path, scratch, validity(values, desc.nullable));
    }
    case "records": {
      const lists = values.map((v) => (v ?? []) as object[]);
      const child = buildStruct(t.record, (type as List).children[0]!.type as Struct, lists.flat(), `${path}[]`, scratch);
      const valueOffsets = offsetsOf(lists.map((l) => l.length), path);
      return makeData({ type: type as List, length: values.length, ...validity(values, desc.nullable), valueOffsets, child });
    }
  }
}

function buildStruct(
  record: RecordName, type: Struct, rows: readonly object[], where: string, scratch: Scratch,
  valid: { nullCount: number; nullBitmap?: Uint8Array } = { nullCount: 0 },
): Data<Struct> {
  const descriptors = RECORD_FIELDS[record];
  const children = descriptors.map((desc, i) =>
    buildColumn(desc, type.children[i]!, rows.map((r) => (r as Record<string, unknown>)[desc.name] ?? null), where, scratch),
  );
  return makeData({ type, length: rows.length, ...valid, children });
}

/** The filler under a null struct: a value of each required field's type (nullable ones stay null). */
function placeholderRow(record: RecordName): Record<string, unknown> {
  const row: Record<string, unknown> = {};
  for (const desc of RECORD_FIELDS[record]) {
    if (desc.nullable) {
      row[desc.name] = null;
      continue;
    }
    const t = desc.type;
    switch (t.kind) {
      case "scalar":
        row[desc.name] = t.scalar === "string" ? "" : t.scalar === "bool" ? false : 0;
        break;
      case "enum":
        row[desc.name] = t.values[0];
        break;
      case "strings":
      case "records":
        row[desc.name] = [];
        break;
      case "tokens":
        row[desc.name] = new TOKEN_CTORS[t.element](0);
        break;
      case "record":
        row[desc.name] = placeholderRow(t.record);
        break;
      case "routing":
        throw new SchemaError(`${record}.${desc.name}: a required routing column cannot sit under a nullable struct`);
    }
  }
  return row;
}

/**
 * The record batch `encodeBatch` writes, before IPC framing. Per-token columns
 * of a one-row batch are the records' own typed arrays (no copy), so a caller
 * can frame them into memory it reuses (ts/src/transport/ipc-frame.ts).
 */
export function recordBatchOf<R extends ArrowRecordName>(
  record: R,
  rows: readonly RecordTypes[R][],
  routing: RoutingShape | null,
  options: EncodeOptions = {},
): RecordBatch {
  if (options.validate ?? true) validateRecords(record, rows, routing);
  const schema = arrowSchema(record, routing, options);
  const struct = buildStruct(record, new Struct(schema.fields), rows, record, options.scratch);
  return new RecordBatch(schema, struct);
}

/** Encodes rows of `record` as one Arrow IPC stream holding one record batch. */
export function encodeBatch<R extends ArrowRecordName>(
  record: R,
  rows: readonly RecordTypes[R][],
  routing: RoutingShape | null,
  options: EncodeOptions = {},
): Uint8Array {
  return RecordBatchStreamWriter.writeAll([recordBatchOf(record, rows, routing, options)]).toUint8Array(true);
}
