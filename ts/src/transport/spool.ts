/**
 * The sender's spool: one durable file per batch, deleted only once the
 * receiver has acknowledged it. A restarted sender resends whatever is left.
 *
 *   DIR/<seq>-<batch_id>.lgrb      batches awaiting an ack
 *   DIR/quarantine/<name>.lgrb     batches the receiver refused, with <name>.reason.json
 *   DIR/free/<n>.reuse             acked files kept to be written over (page-cache reuse)
 */
import { closeSync, mkdirSync, openSync, readdirSync, readSync, rmSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { decodeControl, type BatchHeader } from "../schema/index.ts";
import { SpoolFormatError } from "./errors.ts";
import { SPOOL_SUFFIX, readSpoolFile, writeSpoolFile, type SpoolFile } from "./spool-file.ts";

export interface SpoolEntry {
  readonly header: BatchHeader;
  readonly path: string;
}

/** Batch ids become file names, so they are kept to a portable alphabet. */
const SAFE_ID = /^[A-Za-z0-9._:@-]{1,200}$/;

export function spoolFileName(header: BatchHeader): string {
  if (!SAFE_ID.test(header.batch_id)) {
    throw new SpoolFormatError(header.batch_id, "batch id must match [A-Za-z0-9._:@-]{1,200} to be a file name");
  }
  return `${String(header.seq).padStart(17, "0")}-${header.batch_id}${SPOOL_SUFFIX}`;
}

/** Reads only the header of a spool file (the payload may be tens of MiB). */
function readHeader(path: string): BatchHeader {
  const fd = openSync(path, "r");
  try {
    const prefix = new Uint8Array(12);
    if (readSync(fd, prefix, 0, 12, 0) !== 12) throw new SpoolFormatError(path, "shorter than its 12-byte prefix");
    const length = new DataView(prefix.buffer).getUint32(8, true);
    const bytes = new Uint8Array(length);
    if (readSync(fd, bytes, 0, length, 12) !== length) throw new SpoolFormatError(path, "header cut short");
    const message = decodeControl(bytes);
    if (message.kind !== "batch") throw new SpoolFormatError(path, `header is a ${message.kind} message`);
    return message;
  } finally {
    closeSync(fd);
  }
}

export class Spool {
  readonly quarantineDir: string;
  private readonly freeDir: string;
  private readonly free: string[];
  private freeSeq = 0;

  constructor(
    readonly dir: string,
    /** Acked files kept for reuse; 0 deletes them at once. */
    private readonly keepFree = 8,
  ) {
    this.quarantineDir = join(dir, "quarantine");
    this.freeDir = join(dir, "free");
    mkdirSync(this.quarantineDir, { recursive: true });
    mkdirSync(this.freeDir, { recursive: true });
    this.free = readdirSync(this.freeDir).map((name) => join(this.freeDir, name));
    // A temp file is a write that never reached its rename: the batch was never spooled.
    for (const name of readdirSync(dir)) if (name.includes(".tmp-")) rmSync(join(dir, name), { force: true });
  }

  /** Durably stores one batch; returns once it is on disk. */
  append(header: BatchHeader, payload: Uint8Array): SpoolEntry {
    const path = join(this.dir, spoolFileName(header));
    writeSpoolFile(path, header, payload, this.free.pop());
    return { header, path };
  }

  /** Batches awaiting an ack, oldest first. */
  list(): SpoolEntry[] {
    return readdirSync(this.dir)
      .filter((name) => name.endsWith(SPOOL_SUFFIX))
      .sort()
      .map((name) => {
        const path = join(this.dir, name);
        return { header: readHeader(path), path };
      });
  }

  read(entry: SpoolEntry): SpoolFile {
    return readSpoolFile(entry.path);
  }

  /** The receiver holds the batch durably: it may leave the spool. */
  remove(entry: SpoolEntry): void {
    if (this.free.length < this.keepFree) {
      // Out of the resend path by one atomic rename; the bytes are written over later.
      const target = join(this.freeDir, `${process.pid}-${this.freeSeq++}.reuse`);
      renameSync(entry.path, target);
      this.free.push(target);
    } else {
      rmSync(entry.path, { force: true });
    }
  }

  /** The receiver refused the batch: keep the bytes, with the reason, out of the resend path. */
  quarantine(entry: SpoolEntry, reason: string): void {
    const name = spoolFileName(entry.header);
    const target = join(this.quarantineDir, name);
    renameSync(entry.path, target);
    writeFileSync(`${target}.reason.json`, JSON.stringify({ batch_id: entry.header.batch_id, reason }, null, 2));
  }
}
