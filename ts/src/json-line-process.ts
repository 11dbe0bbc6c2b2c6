/**
 * A child process whose stdout is one JSON object per line (the Python
 * receiver, engine and trainer all announce themselves so): the demo, the
 * benches and the end-to-end tests start them and wait on their events.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { REPO_ROOT } from "./repo-root.ts";

/** The repository's virtual environment's Python (scripts/setup makes it). */
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
      if (left <= 0) throw new JsonLineTimeoutError(`${this.name}: awaited event did not come within ${timeoutMs} ms`);
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


export class JsonLineTimeoutError extends Error {}
