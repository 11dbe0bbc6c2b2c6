/**
 * Engine gone for a while, under `lego rollout --harness reference --engine
 * tcp://…` (the real Python engine serving the tiny random MoE, real sandboxes,
 * the real receiver), 4 groups of 2. A turn that finds the engine away waits
 * for it up to `--engine-wait-ms`, then fails; a turn in flight on an engine
 * that stops answering fails once the ZMTP heartbeat notices (seconds); either
 * way the proxy answers 5xx and the rollout ends env_error engine_unreachable,
 * retried. Two runs:
 * - the engine process is stopped (SIGSTOP) after the first group ships and
 *   resumed (SIGCONT) once a rollout was retried for it: every rollout ends
 *   graded, none dropped;
 * - the engine is killed after the first group and never comes back within
 *   the bound: every later rollout ends env_error and is dropped after its
 *   attempts; the worker still finishes, and ships what was graded.
 * Both: each of the 8 rollouts finishes exactly once, what the receiver holds
 * is exactly the graded ones, and no container of the worker is left.
 */
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { containersOfProcess } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImages } from "../sandbox/test-support.ts";
import { REPO_ROOT } from "../repo-root.ts";
import { JsonLineProcess, PYTHON } from "../json-line-process.ts";
import { receivedRows, startReceiver } from "./test-support.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const work = mkdtempSync(join(tmpdir(), "lego-rollout-engine-outage-"));
const modelDir = join(work, "tiny-qwen3");
type Line = Record<string, unknown>;

function startEngine(): JsonLineProcess {
  return new JsonLineProcess("engine", PYTHON, ["-m", "lego_rl.engine", "--model", modelDir, "--bind", "tcp://127.0.0.1:*"]);
}

/** Runs the worker; `onLine` sees every JSON line as it comes (the test's fault schedule). */
async function runWorker(name: string, engine: string, trainer: string, extra: string[], onLine: (e: Line, all: Line[]) => void) {
  const proc = spawn(LEGO, [
    "rollout", "--tasks", "easy:seed=23,count=4", "--harness", "reference", "--engine", engine, "--model-dir", modelDir,
    "--max-tokens-per-turn", "16", "--max-turns", "2", "--group-size", "2", "--concurrency", "2", "--trainer", trainer,
    "--spool-dir", join(work, `tx-${name}`), "--producer-id", `engine-${name}`, ...extra,
  ], { stdio: ["ignore", "pipe", "inherit"] });
  const lines: Line[] = [];
  createInterface({ input: proc.stdout! }).on("line", (l) => {
    if (!l.startsWith("{")) return;
    const e = JSON.parse(l) as Line;
    lines.push(e);
    onLine(e, lines);
  });
  const code = await Promise.race([
    new Promise<number | null>((r) => proc.once("exit", (c) => r(c))),
    new Promise<never>((_, j) => setTimeout(() => j(new Error(`worker ${name} did not finish in 600 s`)), 600_000)),
  ]);
  return { code, lines, pid: proc.pid! };
}

/** Every rollout finished once; the receiver holds exactly the graded ones; nothing of the worker left. */
async function expectAccounted(run: { lines: Line[]; pid: number }, rx: string) {
  const finished = run.lines.filter((e) => e.event === "rollout_finished");
  expect(finished).toHaveLength(8);
  expect(new Set(finished.map((f) => f.trajectoryId)).size).toBe(8);
  const graded = finished.filter((f) => f.status !== "env_error");
  for (const f of finished.filter((x) => x.status === "env_error")) expect(String(f.envError)).toMatch(/^engine_unreachable/);
  const summary = run.lines.at(-1)!;
  expect(summary).toMatchObject({ event: "summary", trajectoriesShipped: graded.length, droppedEnvErrors: 8 - graded.length });
  expect(run.lines.filter((e) => e.event === "group_shipped")).toHaveLength(4);
  const rows = receivedRows(rx);
  expect(rows.map((r) => r.trajectory_id).sort()).toEqual(graded.map((f) => f.trajectoryId).sort());
  expect(rows.every((r) => r.status !== "env_error")).toBe(true);
  expect(await containersOfProcess(run.pid)).toEqual([]);
  return { finished, graded };
}

describe("worker faults: engine gone for a while", () => {
  const engines: JsonLineProcess[] = [];
  const receivers: JsonLineProcess[] = [];
  beforeAll(async () => {
    execFileSync(PYTHON, ["-m", "lego_rl.model.tiny", "--out", modelDir, "--tokenizer", "qwen3", "--seed", "0"], { cwd: REPO_ROOT, stdio: "ignore", timeout: 110_000 });
    await fixtureImages();
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(() => {
    for (const p of [...engines, ...receivers]) {
      p.proc.kill("SIGCONT");
      p.proc.kill("SIGKILL");
    }
    rmSync(work, { recursive: true, force: true });
  });

  it("an engine stopped mid-run and resumed: turns fail after the bound, rollouts are retried, none dropped", { timeout: 900_000 }, async () => {
    const engine = startEngine();
    engines.push(engine);
    const address = (await engine.waitFor((e) => e.type === "listening", 120_000)).address as string;
    const rx = join(work, "rx-stop");
    const { receiver, address: trainer } = await startReceiver(rx);
    receivers.push(receiver);
    let phase: "before" | "stopped" | "resumed" = "before";
    const run = await runWorker("stop", address, trainer, ["--engine-wait-ms", "10000", "--max-attempts", "3"], (e) => {
      if (phase === "before" && e.event === "group_shipped") {
        phase = "stopped";
        engine.proc.kill("SIGSTOP");
      } else if (phase === "stopped" && e.event === "rollout_retried" && e.envError === "engine_unreachable") {
        phase = "resumed";
        engine.proc.kill("SIGCONT");
      }
    });
    expect(run.code).toBe(0);
    expect(phase).toBe("resumed");
    expect(run.lines.filter((e) => e.event === "rollout_retried" && e.envError === "engine_unreachable").length).toBeGreaterThanOrEqual(1);
    const { graded } = await expectAccounted(run, rx);
    expect(graded).toHaveLength(8); // the retries after the engine came back were all graded
  });

  it("an engine that never comes back within the bound: later rollouts end env_error and are dropped, the run still ends", { timeout: 900_000 }, async () => {
    const engine = startEngine();
    engines.push(engine);
    const address = (await engine.waitFor((e) => e.type === "listening", 120_000)).address as string;
    const rx = join(work, "rx-gone");
    const { receiver, address: trainer } = await startReceiver(rx);
    receivers.push(receiver);
    let killed = false;
    const run = await runWorker("gone", address, trainer, ["--engine-wait-ms", "3000", "--max-attempts", "2"], (e) => {
      if (!killed && e.event === "group_shipped") {
        killed = true;
        engine.proc.kill("SIGKILL");
      }
    });
    expect(run.code).toBe(0);
    expect(killed).toBe(true);
    const { finished } = await expectAccounted(run, rx);
    // The groups started after the kill could not be graded: at least their 4 rollouts were dropped.
    expect(finished.filter((f) => f.status === "env_error").length).toBeGreaterThanOrEqual(4);
  });
});
