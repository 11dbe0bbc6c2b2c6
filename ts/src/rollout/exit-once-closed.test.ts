import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";

/** Runs a Node.js script that imports exitOnceClosed; resolves with its exit code, stderr and wall time. */
function runScript(body: string): Promise<{ code: number | null; stderr: string; ms: number }> {
  const started = Date.now();
  const script = `import { exitOnceClosed } from ${JSON.stringify(new URL("./exit-once-closed.ts", import.meta.url).pathname)};\n${body}`;
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stdout.resume();  // a pipe, as under a supervisor: listed by Node, but not what holds the process
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const bound = setTimeout(() => child.kill("SIGKILL"), 30_000);
  return new Promise((resolve) => child.on("exit", (code) => {
    clearTimeout(bound);
    resolve({ code, stderr, ms: Date.now() - started });
  }));
}

describe("a stopped worker's exit", () => {
  it("comes after the grace with the exit code set, naming the handle that still held the process", { timeout: 40_000 }, async () => {
    const run = await runScript(`
      import { createServer } from "node:net";
      createServer().listen(0, "127.0.0.1");  // a handle nobody closes
      setInterval(() => {}, 60_000);  // and a timer
      process.exitCode = 143;
      exitOnceClosed(300);`);
    expect(run.code).toBe(143);
    expect(run.stderr).toBe("lego rollout: stopped, but Server, 1 timer(s) still held the process 0.3 s after its summary; exiting\n");
  });

  it("does not hold a process whose loop empties on its own", { timeout: 40_000 }, async () => {
    const run = await runScript(`
      process.exitCode = 143;
      exitOnceClosed(20_000);
      setTimeout(() => {}, 100);`);
    expect(run.code).toBe(143);
    expect(run.stderr).toBe("");
    expect(run.ms).toBeLessThan(15_000);  // the 20 s grace never ran out
  });
});
