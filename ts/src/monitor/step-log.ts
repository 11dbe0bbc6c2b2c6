/**
 * Feeds a trainer step log (one JSON object per line, written by lego_rl.trainer.driver)
 * through a Monitor, and appends raised alerts as JSON lines to an alert log beside it.
 * A malformed line is reported with its line number rather than skipped, so no step is lost silently.
 */
import { appendFileSync, readFileSync } from "node:fs";
import type { Monitor } from "./monitor.ts";
import type { Alert, Signal } from "./rules.ts";

export class StepLogError extends Error {}

export function parseStepLine(line: string, lineNo: number): { step: number; signal: Signal } {
  let obj: unknown;
  try {
    obj = JSON.parse(line);
  } catch (e) {
    throw new StepLogError(`step log line ${lineNo} is not JSON: ${(e as Error).message}`);
  }
  if (typeof obj !== "object" || obj === null || typeof (obj as { step?: unknown }).step !== "number") {
    throw new StepLogError(`step log line ${lineNo} has no numeric "step"`);
  }
  const signal: Signal = {};
  for (const [k, v] of Object.entries(obj)) if (typeof v === "number") signal[k] = v;
  return { step: (obj as { step: number }).step, signal };
}

/** Replays a whole step log; returns every alert it raised. */
export function monitorStepLog(monitor: Monitor, stepLogPath: string, alertLogPath?: string): Alert[] {
  const raised: Alert[] = [];
  const lines = readFileSync(stepLogPath, "utf8").split("\n");
  lines.forEach((line, i) => {
    if (line.trim() === "") return;
    const { step, signal } = parseStepLine(line, i + 1);
    for (const a of monitor.observe(step, signal)) {
      raised.push(a);
      if (alertLogPath !== undefined) appendFileSync(alertLogPath, `${JSON.stringify(a)}\n`);
    }
  });
  return raised;
}
