/** Summaries of a spool folder and of a live tap, for `lego transport stats` and `tap`. */
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { Subscriber } from "zeromq";
import { decodeControl, type BatchHeader } from "../schema/index.ts";
import { TransportTimeoutError } from "./errors.ts";
import { SPOOL_SUFFIX, readSpoolFile } from "./spool-file.ts";

export interface SpoolStats {
  folder: string;
  batches: number;
  trajectories: number;
  tokens: number;
  payload_bytes: number;
  quarantined: number;
  oldest_ms: number | null;
  newest_ms: number | null;
}

function walk(dir: string, out: string[]): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) walk(path, out);
    else if (entry.name.endsWith(SPOOL_SUFFIX)) out.push(path);
  }
  return out;
}

export function isSpoolFolder(target: string): boolean {
  return existsSync(target) && statSync(target).isDirectory();
}

/** Counts a sender spool or a receiver spool (batches/ and quarantine/ under it). */
export function spoolStats(folder: string): SpoolStats {
  const stats: SpoolStats = { folder, batches: 0, trajectories: 0, tokens: 0, payload_bytes: 0, quarantined: 0, oldest_ms: null, newest_ms: null };
  for (const path of walk(folder, [])) {
    if (path.split("/").includes("quarantine")) {
      stats.quarantined += 1;
      continue;
    }
    const { header } = readSpoolFile(path);
    stats.batches += 1;
    stats.trajectories += header.num_trajectories;
    stats.tokens += header.num_tokens;
    stats.payload_bytes += header.payload_bytes;
    stats.oldest_ms = Math.min(stats.oldest_ms ?? Infinity, header.created_at_ms);
    stats.newest_ms = Math.max(stats.newest_ms ?? -Infinity, header.created_at_ms);
  }
  return stats;
}

export interface TappedBatch {
  header: BatchHeader;
  received_at_ms: number;
}

/**
 * Subscribes to a receiver's tap (`--tap ADDR`) and yields the header of each
 * batch it publishes, until `count` batches or `timeoutMs` of silence.
 */
export async function* tapHeaders(address: string, options: { count?: number; timeoutMs?: number } = {}): AsyncGenerator<TappedBatch> {
  const socket = new Subscriber({ linger: 0, receiveTimeout: options.timeoutMs ?? -1 });
  socket.connect(address);
  socket.subscribe();
  try {
    for (let seen = 0; options.count === undefined || seen < options.count; seen++) {
      let frames: Buffer[];
      try {
        frames = await socket.receive();
      } catch (error) {
        if ((error as { code?: string }).code === "EAGAIN") {
          throw new TransportTimeoutError(`tap ${address}: no batch within ${options.timeoutMs} ms`);
        }
        throw error;
      }
      const message = decodeControl(frames[0]!);
      if (message.kind === "batch") yield { header: message, received_at_ms: Date.now() };
    }
  } finally {
    socket.close();
  }
}
