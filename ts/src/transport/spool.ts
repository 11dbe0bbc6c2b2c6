/**
 * The sender's spool: one durable file per batch, deleted only once the
 * receiver has acknowledged it. A restarted sender resends whatever is left.
 *
 *   DIR/<seq>-<batch_id>.lgrb      batches awaiting an ack
 *   DIR/quarantine/<name>.lgrb     batches the receiver refused, with <name>.reason.json
 *   DIR/free/<n>.reuse             acked files kept to be written over (page-cache reuse)
 *
 * With the native mapping (mapped-file.ts), `appendInPlace` writes a framed
 * batch straight into the spool file's mapped pages (one copy instead of two)
 * and returns a view of them for ZeroMQ to send. A file and its mapping stay
 * together: acked, they go back to the free list as one slot.
 */
import { randomBytes } from "node:crypto";
import { closeSync, fstatSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readdirSync, readSync, rmSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { decodeControl, encodeControl, type BatchHeader } from "../schema/index.ts";
import { SpoolFormatError } from "./errors.ts";
import { allocateFile, fileMappingUnavailable, mapFile } from "./mapped-file.ts";
import { SPOOL_SUFFIX, fsyncDir, readSpoolFile, spoolPrefix, writeSpoolFile, type SpoolFile } from "./spool-file.ts";

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

/** An open spool file mapped into memory: `view` covers `capacity` bytes, the file holds `size`. */
interface MappedSlot {
  path: string;
  readonly fd: number;
  readonly view: Uint8Array;
  size: number;
}

/** Mappings grow in whole MiB with a quarter to spare, so batches of similar size reuse a slot. */
function mappingCapacity(bytes: number): number {
  return Math.ceil((bytes * 1.25) / (1 << 20)) * (1 << 20);
}

export class Spool {
  readonly quarantineDir: string;
  private readonly freeDir: string;
  private readonly free: string[];
  /** Free files that are mapped, ready to be written over. */
  private readonly mappedFree: MappedSlot[] = [];
  /** Spooled (unacked) batches written in place, by path. */
  private readonly mappedBusy = new Map<string, MappedSlot>();

  constructor(
    readonly dir: string,
    /** Acked files kept for reuse; 0 deletes them at once. */
    private readonly keepFree = 8,
    /** Write batches in place through a file mapping when the native module is loaded (false: always write()). */
    private readonly fileMapping = true,
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

  /**
   * `append` without the intermediate buffer: `writeTo` copies the batch's
   * payload (header.payload_bytes bytes) straight into the spool file's mapped
   * pages, which are fsynced and renamed like any spool file. Returns the entry
   * and a view of the payload, valid until the batch leaves the spool; null
   * when file mapping is unavailable or switched off (then use `append`).
   */
  appendInPlace(header: BatchHeader, writeTo: (target: Uint8Array) => void): { entry: SpoolEntry; payload: Uint8Array } | null {
    if (!this.fileMapping || fileMappingUnavailable !== null) return null;
    const path = join(this.dir, spoolFileName(header));
    const prefix = spoolPrefix(encodeControl(header));
    const size = prefix.length + header.payload_bytes;
    const slot = this.mappedSlot(size);
    try {
      // The same size as last time: nothing to do. Growing reserves the blocks (full disk: ENOSPC, not SIGBUS).
      if (size > slot.size) allocateFile(slot.fd, size);
      else if (size < slot.size) ftruncateSync(slot.fd, size);
      slot.size = size;
      slot.view.set(prefix, 0);
      const payload = slot.view.subarray(prefix.length, size);
      writeTo(payload);
      fsyncSync(slot.fd);
      renameSync(slot.path, path);
      slot.path = path;
      fsyncDir(this.dir);
      this.mappedBusy.set(path, slot);
      return { entry: { header, path }, payload };
    } catch (error) {
      this.drop(slot);
      throw error;
    }
  }

  /** A mapped free file with room for `size` bytes: reused, remapped larger, or new. */
  private mappedSlot(size: number): MappedSlot {
    const index = this.mappedFree.findIndex((s) => s.view.length >= size);
    if (index >= 0) return this.mappedFree.splice(index, 1)[0]!;
    // Too small or none: remap a free file larger (its pages stay in the page cache) or start one.
    const old = this.mappedFree.shift();
    if (old) this.drop(old);
    const path = old?.path ?? this.free.pop() ?? this.freeName();
    const fd = openSync(path, "a+"); // read-write, created if missing, never truncated
    try {
      return { path, fd, view: mapFile(fd, mappingCapacity(size))!, size: fstatSync(fd).size };
    } catch (error) {
      closeSync(fd);
      throw error;
    }
  }

  /**
   * A name no other file in free/ has: a mapped slot is one inode, so renaming
   * another file onto its name would make its later rename move the wrong file
   * (a counter per Spool repeated names across spools of one process).
   */
  private freeName(): string {
    return join(this.freeDir, `${process.pid}-${randomBytes(8).toString("hex")}.reuse`);
  }

  /** Forgets a slot: its descriptor closes now, its mapping when the last view of it is collected. */
  private drop(slot: MappedSlot): void {
    closeSync(slot.fd);
  }

  /** Closes the mapped files' descriptors (the files stay: unacked batches are resent after a restart). */
  close(): void {
    for (const slot of [...this.mappedFree, ...this.mappedBusy.values()]) this.drop(slot);
    this.mappedFree.length = 0;
    this.mappedBusy.clear();
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
    const slot = this.mappedBusy.get(entry.path);
    if (slot) {
      this.mappedBusy.delete(entry.path);
      if (this.mappedFree.length < this.keepFree) {
        const target = this.freeName();
        renameSync(entry.path, target);
        slot.path = target;
        this.mappedFree.push(slot);
      } else {
        this.drop(slot);
        rmSync(entry.path, { force: true });
      }
      return;
    }
    if (this.free.length < this.keepFree) {
      // Out of the resend path by one atomic rename; the bytes are written over later.
      const target = this.freeName();
      renameSync(entry.path, target);
      this.free.push(target);
    } else {
      rmSync(entry.path, { force: true });
    }
  }

  /** The receiver refused the batch: keep the bytes, with the reason, out of the resend path. */
  quarantine(entry: SpoolEntry, reason: string): void {
    const slot = this.mappedBusy.get(entry.path);
    if (slot) {
      this.mappedBusy.delete(entry.path);
      this.drop(slot);
    }
    const name = spoolFileName(entry.header);
    const target = join(this.quarantineDir, name);
    renameSync(entry.path, target);
    writeFileSync(`${target}.reason.json`, JSON.stringify({ batch_id: entry.header.batch_id, reason }, null, 2));
  }
}
