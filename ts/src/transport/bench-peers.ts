/** Child processes of the benchmark (bench.ts): the Python receiver and comparison peers, as JSON-line streams. */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { REPO_ROOT } from "../repo-root.ts";
import { TransportTimeoutError } from "./errors.ts";

export const PYTHON = join(REPO_ROOT, ".venv/bin/python");

export type JsonEvent = Record<string, unknown>;

/** A child process whose stdout is one JSON object per line. */
export class JsonLineProcess {
  readonly events: JsonEvent[] = [];
  private readonly waiters = new Set<() => void>();
  private exited = false;
  readonly proc: ChildProcess;

  constructor(readonly name: string, command: string, args: string[], env: Record<string, string> = {}) {
    this.proc = spawn(command, args, { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, ...env } });
    createInterface({ input: this.proc.stdout! }).on("line", (line) => {
      if (line.startsWith("{")) this.events.push(JSON.parse(line) as JsonEvent);
      this.wake();
    });
    this.proc.on("exit", () => {
      this.exited = true;
      this.wake();
    });
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }

  /** The first event matching `predicate`, waiting up to `timeoutMs` for it. */
  async waitFor(predicate: (e: JsonEvent) => boolean, timeoutMs = 60_000): Promise<JsonEvent> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.events.find(predicate);
      if (found) return found;
      if (this.exited) throw new Error(`${this.name} exited (${this.proc.exitCode}) before the awaited event`);
      const left = deadline - Date.now();
      if (left <= 0) throw new TransportTimeoutError(`${this.name}: awaited event did not come within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer);
          this.waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, left);
        this.waiters.add(done);
      });
    }
  }

  stop(): void {
    if (!this.exited) this.proc.kill("SIGTERM");
  }
}

/** Waits for a peer to announce its port in `portFile` (written atomically by bench_peer.py). */
export async function readPort(peer: JsonLineProcess, portFile: string, timeoutMs = 30_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(portFile)) {
    if (Date.now() > deadline) throw new TransportTimeoutError(`${peer.name} did not announce its port in ${portFile}`);
    await new Promise((r) => setTimeout(r, 10)); // polling a file the peer writes once; no event to wait on
  }
  return Number(readFileSync(portFile, "utf8"));
}
