/**
 * Host-side bookkeeping for images, in one JSON file per kind under
 * the sandbox state folder (host-settings.ts; default ~/.cache/lego-rl/sandbox):
 *   usage.json       tag → last time a rollout asked for the image (for LRU GC;
 *                    Docker itself records no last-use time for images)
 *   quarantine.json  tag → why `lego sandbox check` failed it
 * Writes are whole-file replace (rename), so a reader never sees half a file;
 * two processes touching at once may lose one timestamp, which only makes an
 * image look slightly older to GC.
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { sandboxHost } from "./host-settings.ts";

export function stateDir(): string {
  const dir = sandboxHost().stateDir;
  mkdirSync(dir, { recursive: true });
  return dir;
}

function read<T>(name: string): Record<string, T> {
  try {
    return JSON.parse(readFileSync(join(stateDir(), name), "utf8")) as Record<string, T>;
  } catch {
    return {}; // first use on this machine
  }
}

function write<T>(name: string, data: Record<string, T>): void {
  const path = join(stateDir(), name);
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(data, null, 1));
  renameSync(tmp, path);
}

export function touchImage(tag: string, now = Date.now()): void {
  const usage = read<number>("usage.json");
  usage[tag] = now;
  write("usage.json", usage);
}

export function imageLastUsed(): Record<string, number> {
  return read<number>("usage.json");
}

export interface QuarantineRecord {
  reason: string;
  at: string;
  task: string;
}

export function quarantine(tag: string, rec: QuarantineRecord): void {
  const q = read<QuarantineRecord>("quarantine.json");
  q[tag] = rec;
  write("quarantine.json", q);
}

export function release(tag: string): void {
  const q = read<QuarantineRecord>("quarantine.json");
  if (!(tag in q)) return;
  delete q[tag];
  write("quarantine.json", q);
}

export function quarantined(tag: string): QuarantineRecord | undefined {
  return read<QuarantineRecord>("quarantine.json")[tag];
}
