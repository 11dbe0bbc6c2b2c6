/** Typed errors of the schema codecs. Every message names what is wrong and where. */

export class SchemaError extends Error {
  override name = "SchemaError";
}

/** The Arrow IPC stream ends early (no end-of-stream marker or a cut message). */
export class TruncatedStreamError extends SchemaError {
  override name = "TruncatedStreamError";
}

/** The batch was written with a schema major version this reader does not speak. */
export class SchemaVersionError extends SchemaError {
  override name = "SchemaVersionError";
  constructor(
    readonly found: string,
    readonly supported: string,
  ) {
    super(
      `batch was written with schema version ${found}, but this reader speaks ${supported} ` +
        `(major ${supported.split(".")[0]}); upgrade the older side so both use the same major version`,
    );
  }
}

/** A required column is absent from the batch. */
export class MissingColumnError extends SchemaError {
  override name = "MissingColumnError";
}

/** A column has another Arrow type than the schema defines. */
export class ColumnTypeError extends SchemaError {
  override name = "ColumnTypeError";
}

/** Values inside a record disagree (lengths, routing size, masks, bounds, enum values). */
export class RecordShapeError extends SchemaError {
  override name = "RecordShapeError";
}

/** A msgpack control message is malformed or of an unknown kind. */
export class ControlMessageError extends SchemaError {
  override name = "ControlMessageError";
}
