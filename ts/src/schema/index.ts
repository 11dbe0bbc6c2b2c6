/** The cross-language records of lego-rl, as TypeScript sees them (see schemas/records.toml). */
export * from "./generated.ts";
export { arrowSchema, encodeBatch, recordBatchOf, type EncodeOptions } from "./arrow-encode.ts";
export { decodeBatch, type DecodedBatch } from "./arrow-decode.ts";
export { recordDifferences } from "./compare.ts";
export { decodeControl, encodeControl } from "./control-codec.ts";
export {
  ColumnTypeError, ControlMessageError, MissingColumnError, RecordShapeError, SchemaError, SchemaVersionError,
  TruncatedStreamError,
} from "./errors.ts";
export {
  allocRouting, checkRoutingShape, routingDtype, routingFromMetadata, routingPerToken, type RoutingShape,
} from "./routing.ts";
export { trainableProblems, validateRecords, validateSegment } from "./validate.ts";
export * as synthetic from "./synthetic.ts";
