/** The data plane's public surface: Arrow batches over ZeroMQ with acks, credits and a disk spool. */
export { DEFAULT_MAX_BATCH_BYTES, encodeTrajectoryBatch, estimateBytes, planBatches, trajectoryTokens, type EncodedBatch } from "./batcher.ts";
export { SenderClosedError, SpoolFormatError, TransportError, TransportTimeoutError, isTransportError } from "./errors.ts";
export { Sender, SENDER_DEFAULTS, type SenderConfig, type SenderEvent, type SenderStats } from "./sender.ts";
export { Spool, spoolFileName, type SpoolEntry } from "./spool.ts";
export { parseSpoolFile, readSpoolFile, SPOOL_SUFFIX, writeSpoolFile, type SpoolFile } from "./spool-file.ts";
export { isSpoolFolder, spoolStats, tapHeaders, type SpoolStats, type TappedBatch } from "./spool-stats.ts";
export { replicate, syntheticTrajectory } from "./workload.ts";
