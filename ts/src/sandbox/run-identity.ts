import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import { randomUUID } from "node:crypto";
import { sandboxHost } from "./host-settings.ts";

/**
 * Who owns a container: the run id plus the creating process's pid and its
 * kernel start time (field 22 of /proc/PID/stat), so a recycled pid is not
 * mistaken for a live run by the reaper.
 */
export interface RunIdentity {
  runId: string;
  pid: number;
  pidStart: string;
  host: string;
}

export function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // comm (field 2) may contain spaces and parens; fields after the last ')' are fixed.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // A killed process stays in /proc as a zombie until reaped: it is dead to us.
    if (rest[0] === "Z" || rest[0] === "X") return undefined;
    return rest[19]; // field 22 overall = index 19 after pid, comm
  } catch {
    return undefined; // no such process
  }
}

let current: RunIdentity | undefined;

/** This process's run identity, fixed at first use (one run id per process unless the entry point set `runId`). */
export function currentRun(): RunIdentity {
  current ??= {
    runId: sandboxHost().runId ?? `run-${randomUUID().slice(0, 8)}`,
    pid: process.pid,
    pidStart: processStartTime(process.pid) ?? "0",
    host: hostname(),
  };
  return current;
}

/** True when the process that labelled a container still runs on this host. */
export function ownerAlive(pid: number, pidStart: string, host: string): boolean {
  if (host !== hostname()) return true; // another machine's run: not ours to judge
  return processStartTime(pid) === pidStart;
}
