/**
 * Trajectories -> batches of moderate size. Messages stay at or under
 * `maxBatchBytes` (default 16 MiB) because large messages are slow twice:
 * glibc maps every allocation over 32 MiB fresh (page faults on each batch)
 * and a receiver must hold a whole message before it can ack it.
 * A single trajectory larger than the limit travels alone.
 */
import { PayloadPool, ScratchArena, collectFrame } from "./ipc-frame.ts";
import {
  SCHEMA_VERSION, recordBatchOf, routingPerToken, type BatchHeader, type RoutingShape, type Trajectory,
} from "../schema/index.ts";

export const DEFAULT_MAX_BATCH_BYTES = 16 * 1024 * 1024;

/** Per-token bytes of a segment: token id, logprob, loss mask, provenance (+ routing and its recorded flag). */
function bytesPerToken(routing: RoutingShape | null): number {
  if (!routing) return 4 + 4 + 1 + 1;
  const element = routing.num_experts <= 256 ? 1 : 2;
  return 4 + 4 + 1 + 1 + 1 + routingPerToken(routing) * element;
}

export function trajectoryTokens(trajectory: Trajectory): number {
  let tokens = 0;
  for (const segment of trajectory.segments) tokens += segment.token_ids.length;
  return tokens;
}

/** An upper-bound-ish estimate of a trajectory's share of an IPC stream. */
export function estimateBytes(trajectory: Trajectory, routing: RoutingShape | null): number {
  return trajectoryTokens(trajectory) * bytesPerToken(routing) + 512 + 256 * trajectory.segments.length;
}

/** Splits rows, in order, into groups whose estimated size stays under `maxBatchBytes`. */
export function planBatches(
  trajectories: readonly Trajectory[],
  routing: RoutingShape | null,
  maxBatchBytes = DEFAULT_MAX_BATCH_BYTES,
): Trajectory[][] {
  const groups: Trajectory[][] = [];
  let current: Trajectory[] = [];
  let size = 0;
  for (const trajectory of trajectories) {
    const bytes = estimateBytes(trajectory, routing);
    if (current.length > 0 && size + bytes > maxBatchBytes) {
      groups.push(current);
      current = [];
      size = 0;
    }
    current.push(trajectory);
    size += bytes;
  }
  if (current.length > 0) groups.push(current);
  return groups;
}

export interface EncodedBatch {
  readonly header: BatchHeader;
  readonly payload: Uint8Array;
}

export interface BatchIdentity {
  readonly batchId: string;
  readonly producerId: string;
  readonly seq: number;
}

/** A batch's header and its IPC stream, framed but not yet copied anywhere. */
export interface FramedBatch {
  readonly header: BatchHeader;
  /** Copies the IPC stream (header.payload_bytes bytes) into target[0, payload_bytes). */
  readonly writeTo: (target: Uint8Array) => void;
}

/**
 * Frames one group as an Arrow IPC stream (schema/arrow-encode.ts) with the header that
 * precedes it and hands it to `use`, which copies it where it must go (a pooled buffer,
 * a spool file's mapped pages) before `scratch` is reset.
 * `validate` re-runs the schema checks here; off by default because the receiver validates
 * every batch anyway (vectorised) and a full JS scan of the routing ids costs more than the
 * encoding itself (~60 ms per 32k-token, 48 x top-8 trajectory on the 2-core VM).
 */
export function frameTrajectoryBatch<T>(
  rows: readonly Trajectory[],
  routing: RoutingShape | null,
  identity: BatchIdentity,
  validate: boolean,
  scratch: ScratchArena,
  use: (batch: FramedBatch) => T,
): T {
  try {
    const frame = collectFrame(recordBatchOf("Trajectory", rows, routing, { validate, scratch: scratch.take }));
    const header: BatchHeader = {
      kind: "batch",
      batch_id: identity.batchId,
      producer_id: identity.producerId,
      seq: identity.seq,
      schema_version: SCHEMA_VERSION,
      created_at_ms: Date.now(),
      num_trajectories: rows.length,
      num_tokens: rows.reduce((n, t) => n + trajectoryTokens(t), 0),
      payload_bytes: frame.length,
    };
    return use({ header, writeTo: (target) => frame.writeTo(target) });
  } finally {
    scratch.reset();
  }
}

/** `frameTrajectoryBatch` into a buffer of its own (from `pool`). */
export function encodeTrajectoryBatch(
  rows: readonly Trajectory[],
  routing: RoutingShape | null,
  identity: BatchIdentity,
  validate = false,
  pool: PayloadPool = new PayloadPool(0),
  scratch: ScratchArena = new ScratchArena(),
): EncodedBatch {
  return frameTrajectoryBatch(rows, routing, identity, validate, scratch, ({ header, writeTo }) => {
    const payload = pool.acquire(header.payload_bytes);
    writeTo(payload);
    return { header, payload };
  });
}
