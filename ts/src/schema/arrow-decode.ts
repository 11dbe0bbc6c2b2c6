/**
 * Arrow IPC stream -> validated records; the opposite of `encodeBatch`.
 *
 * Per-token arrays in the returned records are views (`subarray`) over the
 * decoded buffers, not copies.
 */
import { RecordBatchReader, type Data, type RecordBatch, type Schema } from "apache-arrow";
import {
  ColumnTypeError, MissingColumnError, SchemaError, SchemaVersionError, TruncatedStreamError,
} from "./errors.ts";
import {
  ARROW_RECORDS, RECORD_FIELDS, SCHEMA_MAJOR, SCHEMA_VERSION,
  type ArrowRecordName, type FieldDescriptor, type RecordName, type RecordTypes,
} from "./generated.ts";
import { arrowSchema } from "./arrow-encode.ts";
import { META_RECORD, META_SCHEMA_VERSION, routingFromMetadata, type RoutingShape } from "./routing.ts";
import { validateRecords } from "./validate.ts";

const END_OF_STREAM = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
const TEXT = new TextDecoder("utf-8", { fatal: true });

export interface DecodedBatch<R extends ArrowRecordName = ArrowRecordName> {
  readonly record: R;
  readonly schemaVersion: string;
  readonly routing: RoutingShape | null;
  readonly rows: RecordTypes[R][];
  /** The Arrow batch itself, for callers that want columns rather than records. */
  readonly batch: RecordBatch;
}

function endsWithEos(bytes: Uint8Array): boolean {
  if (bytes.length < END_OF_STREAM.length) return false;
  const tail = bytes.subarray(bytes.length - END_OF_STREAM.length);
  return END_OF_STREAM.every((b, i) => tail[i] === b);
}

/** Whether a batch written at `version` predates the MINOR release `since` (so it lacks that column). */
function predates(version: string, since: string | undefined): boolean {
  if (!since) return false;
  const [major, minor] = version.split(".").map(Number);
  const [sinceMajor, sinceMinor] = since.split(".").map(Number);
  return major === sinceMajor && minor! < sinceMinor!;
}

function checkColumns(record: ArrowRecordName, found: Schema, expected: Schema, version: string): void {
  for (const field of expected.fields) {
    const match = found.fields.find((f) => f.name === field.name);
    if (!match) {
      // A column a later MINOR release added is absent from older batches; it reads as null.
      if (predates(version, RECORD_FIELDS[record].find((d) => d.name === field.name)?.since)) continue;
      throw new MissingColumnError(`${record} batch has no column '${field.name}' (required by schema ${SCHEMA_VERSION})`);
    }
    if (String(match.type) !== String(field.type) || match.nullable !== field.nullable) {
      throw new ColumnTypeError(
        `${record}.${field.name} is ${String(match.type)}${match.nullable ? "" : " not null"}, ` +
          `schema ${SCHEMA_VERSION} defines ${String(field.type)}${field.nullable ? "" : " not null"}`,
      );
    }
  }
}

function isValid(data: Data, i: number): boolean {
  const bitmap = data.nullBitmap;
  if (!data.nullCount || !bitmap || bitmap.length === 0) return true;
  const bit = data.offset + i;
  return ((bitmap[bit >> 3]! >> (bit & 7)) & 1) === 1;
}

function columnValues(desc: FieldDescriptor, data: Data): unknown[] {
  const out: unknown[] = new Array(data.length);
  const t = desc.type;
  const offsets = data.valueOffsets as Int32Array | undefined;
  for (let i = 0; i < data.length; i++) {
    if (!isValid(data, i)) {
      out[i] = null;
      continue;
    }
    switch (t.kind) {
      case "scalar":
        if (t.scalar === "string") {
          const start = offsets![data.offset + i]!;
          const end = offsets![data.offset + i + 1]!;
          out[i] = TEXT.decode((data.values as Uint8Array).subarray(start, end));
        } else if (t.scalar === "bool") {
          const bit = data.offset + i;
          out[i] = (((data.values as Uint8Array)[bit >> 3]! >> (bit & 7)) & 1) === 1;
        } else if (t.scalar === "int64") {
          out[i] = Number((data.values as BigInt64Array)[data.offset + i]);
        } else {
          out[i] = (data.values as Int32Array)[data.offset + i];
        }
        break;
      case "enum": {
        const start = offsets![data.offset + i]!;
        out[i] = TEXT.decode((data.values as Uint8Array).subarray(start, offsets![data.offset + i + 1]!));
        break;
      }
      default:
        break;
    }
  }
  if (t.kind === "tokens" || t.kind === "routing") {
    const child = data.children[0]!;
    const values = child.values as Int32Array;
    for (let i = 0; i < data.length; i++) {
      if (out[i] === null) continue;
      out[i] = values.subarray(child.offset + offsets![data.offset + i]!, child.offset + offsets![data.offset + i + 1]!);
    }
  } else if (t.kind === "strings") {
    const child = data.children[0]!;
    const strings = columnValues({ name: "item", nullable: false, type: { kind: "scalar", scalar: "string" } }, child);
    for (let i = 0; i < data.length; i++) {
      if (out[i] === null) continue;
      out[i] = strings.slice(offsets![data.offset + i]!, offsets![data.offset + i + 1]!);
    }
  } else if (t.kind === "record") {
    return structRows(t.record, data).map((row, i) => (isValid(data, i) ? row : null));
  } else if (t.kind === "records") {
    const inner = structRows(t.record, data.children[0]!);
    for (let i = 0; i < data.length; i++) {
      if (out[i] === null) continue;
      out[i] = inner.slice(offsets![data.offset + i]!, offsets![data.offset + i + 1]!);
    }
  }
  return out;
}

function structRows(record: RecordName, data: Data, childIndex?: readonly number[]): object[] {
  const descriptors = RECORD_FIELDS[record];
  // Struct children are not sliced with their parent: apply the parent's offset.
  const columns = descriptors.map((desc, i) => {
    const index = childIndex ? childIndex[i]! : i;
    // Only a column added after the batch was written is absent (checkColumns): null in every row.
    if (index < 0) return new Array<unknown>(data.length).fill(null);
    const child = data.children[index]!;
    return columnValues(desc, data.offset ? child.slice(data.offset, data.length) : child);
  });
  const rows: object[] = new Array(data.length);
  for (let r = 0; r < data.length; r++) {
    const row: Record<string, unknown> = {};
    descriptors.forEach((desc, i) => (row[desc.name] = columns[i]![r]));
    rows[r] = row;
  }
  return rows;
}

/**
 * Reads and validates one IPC stream written by `encodeBatch` (either language).
 * Throws a SchemaError subclass naming the problem.
 */
export function decodeBatch<R extends ArrowRecordName>(bytes: Uint8Array, expect?: R): DecodedBatch<R> {
  if (!endsWithEos(bytes)) {
    throw new TruncatedStreamError(
      `Arrow IPC stream of ${bytes.length} bytes does not end with the end-of-stream marker; ` +
        "it was cut short or is not an IPC stream",
    );
  }
  let batches: RecordBatch[];
  let schema: Schema;
  try {
    const reader = RecordBatchReader.from(bytes);
    reader.open();
    schema = reader.schema;
    batches = [...reader];
    if (!schema) throw new Error("the stream holds no schema message");
  } catch (error) {
    throw new TruncatedStreamError(`Arrow IPC stream of ${bytes.length} bytes is corrupt or truncated: ${String(error)}`, {
      cause: error,
    });
  }
  const version = schema.metadata.get(META_SCHEMA_VERSION);
  if (!version) throw new SchemaVersionError("(none)", SCHEMA_VERSION);
  if (version.split(".")[0] !== String(SCHEMA_MAJOR)) throw new SchemaVersionError(version, SCHEMA_VERSION);
  const record = schema.metadata.get(META_RECORD) as ArrowRecordName | undefined;
  if (!record || !(ARROW_RECORDS as readonly string[]).includes(record)) {
    throw new SchemaError(`batch metadata names record ${JSON.stringify(record)}; expected one of ${ARROW_RECORDS.join(", ")}`);
  }
  if (expect !== undefined && record !== expect) throw new SchemaError(`expected a ${expect} batch, got a ${record} batch`);
  let routing: RoutingShape | null;
  try {
    routing = routingFromMetadata(schema.metadata);
  } catch (error) {
    throw new SchemaError(`${record} batch: ${(error as Error).message}`);
  }
  checkColumns(record, schema, arrowSchema(record, routing), version);
  if (batches.length !== 1) {
    throw new SchemaError(`${record} IPC stream holds ${batches.length} record batches; the schema expects exactly 1`);
  }
  const batch = batches[0]!;
  // Top-level columns are looked up by name so a newer MINOR version may append columns.
  const childIndex = RECORD_FIELDS[record].map((d) => schema.fields.findIndex((f) => f.name === d.name));
  const rows = structRows(record, batch.data, childIndex) as RecordTypes[R][];
  validateRecords(record, rows, routing);
  return { record: record as R, schemaVersion: version, routing, rows, batch };
}
