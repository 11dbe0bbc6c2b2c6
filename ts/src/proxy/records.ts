/**
 * The cross-language records the proxy produces. They are defined once in
 * `schemas/records.toml` and generated into `ts/src/schema/`; this module only
 * re-exports the names the proxy uses, so the proxy has one import site.
 */
export {
  TokenProvenance,
  type FinishReason,
  type RoutingArray as Routing,
  type SealReason,
  type Segment,
  type SegmentThread,
  type Turn,
  type TurnSpan,
  type TurnTimings,
} from "../schema/index.ts";
