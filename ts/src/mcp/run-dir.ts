/**
 * A RunView over a recorded or live run folder: RUN_DIR/steps.jsonl (the trainer's step log)
 * and the spool files (`*.lgrb`, docs/transport.md) anywhere under RUN_DIR/spool — a sender's
 * spool or a receiver's `batches/`; `quarantine/` and `free/` are not the run's data.
 * Re-read on every call so a live run shows new steps. The MCP server and the Live UI both
 * read runs through this one view.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { batchSignal, Monitor, parseStepLine } from "../monitor/index.ts";
import { decodeBatch, type BatchHeader, type Trajectory } from "../schema/index.ts";
import { readSpoolFile, SPOOL_SUFFIX } from "../transport/index.ts";
import type { RunView, SpooledBatch } from "./server.ts";

const NOT_RUN_DATA = new Set(["quarantine", "free"]);

/** The run folder is missing or one of its files cannot be read; names the file and what is wrong. */
export class RunDirError extends Error {
  constructor(readonly path: string, reason: string) {
    super(`${path}: ${reason}`);
    this.name = "RunDirError";
  }
}

function spoolFiles(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.isDirectory()) { if (!NOT_RUN_DATA.has(e.name)) spoolFiles(join(dir, e.name), out); }
    else if (e.name.endsWith(SPOOL_SUFFIX)) out.push(join(dir, e.name));
  }
  return out;
}

const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e));

export function runDirView(runDir: string): RunView {
  const requireDir = () => {
    if (!existsSync(runDir) || !statSync(runDir).isDirectory()) {
      throw new RunDirError(runDir, "no such run folder (it holds steps.jsonl and spool/; pass the folder the trainer and rollout worker write)");
    }
  };
  const steps = () => {
    requireDir();
    const p = join(runDir, "steps.jsonl");
    if (!existsSync(p)) return [];
    try {
      return readFileSync(p, "utf8").split("\n").flatMap((l, i) => (l.trim() === "" ? [] : [parseStepLine(l, i + 1)]));
    } catch (e) {
      throw new RunDirError(p, errorText(e));
    }
  };
  const batches = (): SpooledBatch[] => {
    requireDir();
    const dir = join(runDir, "spool");
    if (!existsSync(dir)) return [];
    return spoolFiles(dir)
      .flatMap((path) => {
        try {
          const file = readSpoolFile(path);
          return [{ header: file.header as BatchHeader, trajectories: decodeBatch(file.payload, "Trajectory").rows as Trajectory[] }];
        } catch (e) {
          // Gone between listing and reading: the trainer released it (consumed batches leave batches/), not a bad file.
          if (!existsSync(path)) return [];
          throw new RunDirError(path, errorText(e));
        }
      })
      // Producer order: a receiver's spool may hold several producers, each numbering its own batches.
      .sort((a, b) => a.header.created_at_ms - b.header.created_at_ms || a.header.seq - b.header.seq);
  };
  return {
    steps,
    batches,
    alerts: () => {
      // Trainer steps and rollout batches each run through their own monitor: their windows count different things.
      const m = new Monitor();
      for (const s of steps()) m.observe(s.step, s.signal);
      const b = new Monitor();
      for (const x of batches()) b.observe(x.header.seq, batchSignal(x.trajectories));
      return [...m.alerts, ...b.alerts];
    },
    trajectories: () => batches().flatMap((b) => b.trajectories),
  };
}
