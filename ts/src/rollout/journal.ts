/**
 * The worker's run journal, for exact resume after the worker is killed: a
 * JSON-lines file in the spool dir (`rollout-journal.jsonl`, beside the
 * sender's batches) holding the run's identity and every group it shipped.
 *
 * Identity: a run is its run id (the prefix of every group and trajectory id)
 * plus a fingerprint of what decides its groups (producer id, harness, group
 * size, the task ids in order). A worker started on a spool dir whose journal
 * holds an unfinished run with the same fingerprint resumes it: same run id,
 * so the groups it had not shipped run under their original ids, and the ones
 * it shipped are skipped. A finished run (the worker drained and wrote `done`)
 * or an empty journal starts a new run id. An unfinished run of another
 * fingerprint is refused (its unshipped groups would silently never run).
 *
 * Exactly once: a group is journaled shipped in the sender's `spooled` event,
 * which the sender emits synchronously right after the batch is durable on
 * disk and before it can be sent, so an ack (which deletes the spool entry)
 * can never come before the journal line; the line is fsynced. A crash before
 * it leaves no spooled batch (the group runs again, nothing duplicated); after
 * it, the spool holds or the receiver acked the batch (resent once, skipped).
 * Shipping is serialized so each spooled batch belongs to the group being sent.
 * Sandbox containers keep their per-process run label (the reaper's), which
 * is not this identity.
 */
import { createHash, randomBytes } from "node:crypto";
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { WorkerConfigError } from "./config.ts";

export const JOURNAL_FILE = "rollout-journal.jsonl";

type Line =
  | { run: string; fingerprint: string }
  | { shipped: number; group: string; batches: string[]; trajectories: number }
  | { done: string };

export interface RunFingerprintInput {
  producerId: string;
  harness: string;
  groupSize: number;
  taskIds: readonly string[];
}

export function runFingerprint(i: RunFingerprintInput): string {
  return createHash("sha256").update(JSON.stringify([i.producerId, i.harness, i.groupSize, i.taskIds])).digest("hex").slice(0, 16);
}

export class RunJournal {
  private readonly shippedIndices = new Set<number>();
  private chain: Promise<unknown> = Promise.resolve();
  private pending: { index: number; groupId: string; batches: string[]; recorded: boolean; trajectories: number } | null = null;

  private constructor(readonly path: string, readonly runId: string, readonly resumed: boolean, shipped: Iterable<number>) {
    for (const s of shipped) this.shippedIndices.add(s);
  }

  /** Opens the journal in `dir`: resumes its unfinished run when the fingerprint matches, else starts a new run. */
  static open(dir: string, fingerprint: string, producerId: string): RunJournal {
    mkdirSync(dir, { recursive: true });
    const path = join(dir, JOURNAL_FILE);
    let run: { id: string; fingerprint: string } | null = null;
    const shipped: number[] = [];
    if (existsSync(path)) {
      const text = readFileSync(path, "utf8");
      const lines = text.split("\n");
      for (const [n, raw] of lines.entries()) {
        if (!raw.trim()) continue;
        let line: Line;
        try {
          line = JSON.parse(raw) as Line;
        } catch {
          // A kill cannot tear a line (each is one small write), a power loss can tear the last one:
          // its group then runs again under the same ids (the one case a duplicate can arise).
          if (n >= lines.length - 2) break;
          throw new WorkerConfigError(`${path}: line ${n + 1} is not JSON; the journal is damaged (move it away to start a new run)`);
        }
        if ("run" in line) {
          run = { id: line.run, fingerprint: line.fingerprint };
          shipped.length = 0;
        } else if ("shipped" in line) shipped.push(line.shipped);
        else if ("done" in line) run = null;
      }
    }
    if (run && run.fingerprint !== fingerprint) {
      throw new WorkerConfigError(
        `${path}: run ${run.id} is unfinished and was started with other tasks, harness, group size or producer id; `
        + "run it to the end with the same settings, or move the journal away to abandon its unshipped groups",
      );
    }
    if (run) return new RunJournal(path, run.id, true, shipped);
    const id = `${producerId}-${Date.now().toString(36)}${randomBytes(2).toString("hex")}`;
    const j = new RunJournal(path, id, false, []);
    j.append({ run: id, fingerprint });
    return j;
  }

  /** Groups this run shipped before (skipped on resume). */
  get shippedBefore(): number {
    return this.shippedIndices.size;
  }

  isShipped(index: number): boolean {
    return this.shippedIndices.has(index);
  }

  /**
   * Ships one group through `send` (serialized with other groups' shipping); the
   * group is journaled at its first spooled batch (see onSpooled), or when `send`
   * returns having spooled nothing (a group with no graded rollout).
   */
  ship<T>(index: number, groupId: string, trajectories: number, send: () => Promise<T>): Promise<T> {
    const run = this.chain.then(async () => {
      this.pending = { index, groupId, batches: [], recorded: false, trajectories };
      try {
        const r = await send();
        if (!this.pending.recorded) this.record();
        return r;
      } finally {
        this.pending = null;
      }
    });
    this.chain = run.catch(() => {});
    return run;
  }

  /** The sender's `spooled` event (synchronous, before the batch can be sent). */
  onSpooled(batchId: string): void {
    if (!this.pending) return; // a batch resent from an older spool
    this.pending.batches.push(batchId);
    if (!this.pending.recorded) this.record();
  }

  /** The run drained: the next worker on this spool starts a new run. */
  finish(): void {
    this.append({ done: this.runId });
  }

  private record(): void {
    const p = this.pending!;
    p.recorded = true;
    this.shippedIndices.add(p.index);
    this.append({ shipped: p.index, group: p.groupId, batches: [...p.batches], trajectories: p.trajectories });
  }

  private append(line: Line): void {
    const fd = openSync(this.path, "a");
    try {
      writeSync(fd, `${JSON.stringify(line)}\n`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }
}
