/**
 * A RunView over a recorded run folder: RUN_DIR/steps.jsonl (the trainer's step log) and the
 * sender spool files under RUN_DIR/spool. Re-read on every call so a live run shows new steps.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Monitor, parseStepLine } from "../monitor/index.ts";
import { decodeBatch, type Trajectory } from "../schema/index.ts";
import { readSpoolFile } from "../transport/index.ts";
import type { RunView } from "./server.ts";

export function runDirView(runDir: string): RunView {
  const steps = () => {
    const p = join(runDir, "steps.jsonl");
    if (!existsSync(p)) return [];
    return readFileSync(p, "utf8").split("\n").flatMap((l, i) => (l.trim() === "" ? [] : [parseStepLine(l, i + 1)]));
  };
  return {
    steps,
    alerts: () => {
      const m = new Monitor();
      for (const s of steps()) m.observe(s.step, s.signal);
      return m.alerts;
    },
    trajectories: () => {
      const dir = join(runDir, "spool");
      if (!existsSync(dir)) return [];
      return readdirSync(dir).filter((f) => f.endsWith(".arrow")).sort()
        .flatMap((f) => decodeBatch(readSpoolFile(join(dir, f)).payload, "Trajectory").rows as Trajectory[]);
    },
  };
}
