/**
 * Worker stop: `lego rollout` gets SIGTERM mid-run (what its supervisor sends when
 * the job reached --max-steps). It starts nothing more, ends the rollouts in
 * flight by removing its containers, ships no group cut short, says `stopped` in
 * its summary and exits 143, with nothing of its own left on the daemon. Started
 * again on the same spool it resumes the run: the groups shipped before the stop
 * are not run again, the others run whole; the receiver holds each of the 4
 * groups exactly once.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { containersOfProcess, ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS } from "../sandbox/test-support.ts";
import type { JsonLineProcess } from "../transport/bench-peers.ts";
import { receivedRows, startReceiver } from "./test-support.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const work = mkdtempSync(join(tmpdir(), "lego-rollout-worker-stop-"));

function startWorker(trainer: string, extra: string[] = [], spool = "tx") {
  const proc = spawn(LEGO, [
    "rollout", "--tasks", "easy:seed=37,count=4", "--harness", "oracle", "--group-size", "2", "--concurrency", "2",
    "--trainer", trainer, "--spool-dir", join(work, spool), "--producer-id", spool, ...extra,
  ], { stdio: ["ignore", "pipe", "inherit"] });
  const lines: Record<string, unknown>[] = [];
  const listeners: (() => void)[] = [];
  createInterface({ input: proc.stdout! }).on("line", (l) => {
    if (!l.startsWith("{")) return;
    lines.push(JSON.parse(l) as Record<string, unknown>);
    for (const f of listeners) f();
  });
  const exited = Promise.race([
    new Promise<number | null>((r) => proc.once("exit", (code) => r(code))),
    new Promise<never>((_, j) => setTimeout(() => j(new Error("the worker did not exit within 400 s")), 400_000)),
  ]);
  return { proc, lines, exited, onLine: (f: () => void) => listeners.push(f) };
}

describe("worker stop", () => {
  let receiver: JsonLineProcess;
  let address: string;
  beforeAll(async () => {
    await ensureBaseImage();
    ({ receiver, address } = await startReceiver(join(work, "rx")));
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(() => {
    receiver?.stop();
    rmSync(work, { recursive: true, force: true });
  });

  it("SIGTERM ends it cleanly (exit 143, stopped, nothing left) and a restart resumes the run, each group once", { timeout: 900_000 }, async () => {
    const one = startWorker(address);
    // Stopped while the second group's rollouts run: the first has shipped, the second is cut short.
    await new Promise<void>((r) => one.onLine(() => {
      if (one.lines.some((l) => l.event === "group_shipped") && one.lines.filter((l) => l.event === "rollout_started").length > 2) r();
    }));
    one.proc.kill("SIGTERM");
    expect(await one.exited).toBe(143);
    const stopped = one.lines.at(-1)! as Record<string, unknown> & { result: { groupsShipped: number; stopped?: boolean } };
    expect(stopped).toMatchObject({ event: "summary", stopped: true, resumed: false, result: { stopped: true } });
    const shippedBefore = one.lines.filter((l) => l.event === "group_shipped").map((l) => l.groupId as string);
    expect(shippedBefore.length).toBeGreaterThanOrEqual(1);
    expect(shippedBefore.length).toBeLessThan(4);
    // No group started after the stop, and none cut short shipped: what shipped is what the summary counts.
    expect(stopped.result.groupsShipped).toBe(shippedBefore.length);
    expect(await containersOfProcess(one.proc.pid!)).toEqual([]);

    const two = startWorker(address);
    expect(await two.exited).toBe(0);
    const summary = two.lines.at(-1)! as Record<string, unknown> & { result: { groupsShipped: number; groupsShippedBefore: number } };
    expect(summary).toMatchObject({ event: "summary", runId: stopped.runId, resumed: true, stopped: false });
    expect(summary.result.groupsShippedBefore).toBe(shippedBefore.length);
    expect(summary.result.groupsShipped + summary.result.groupsShippedBefore).toBe(4);
    expect(await containersOfProcess(two.proc.pid!)).toEqual([]);

    const rows = receivedRows(join(work, "rx"));
    expect(rows.map((r) => r.trajectory_id).sort()).toEqual([...new Set(rows.map((r) => r.trajectory_id))].sort());
    expect(rows).toHaveLength(8);
    expect(new Set(rows.map((r) => r.group_id)).size).toBe(4);
    expect(rows.every((r) => r.status === "ok" && r.reward === 1)).toBe(true);
  });

  it("SIGTERM ends an --on-policy worker waiting for a trainer step that will not come", { timeout: 300_000 }, async () => {
    // The plain receiver acks but never trains, so no version is announced after the first group:
    // the worker waits for the step (as it would on a trainer that stopped at --max-steps) until the signal.
    const worker = startWorker(address, ["--on-policy"], "on-policy");
    await Promise.race([
      new Promise<void>((r) => worker.onLine(() => { if (worker.lines.some((l) => l.event === "group_shipped")) r(); })),
      new Promise<never>((_, j) => setTimeout(() => j(new Error("no group shipped within 120 s")), 120_000)),
    ]);
    await new Promise((r) => setTimeout(r, 3000));
    expect(worker.lines.filter((l) => l.event === "rollout_started")).toHaveLength(2); // the next group waits
    const signalled = Date.now();
    worker.proc.kill("SIGTERM");
    expect(await worker.exited).toBe(143);
    expect(Date.now() - signalled).toBeLessThan(30_000);
    expect(worker.lines.at(-1)).toMatchObject({ event: "summary", stopped: true, result: { groupsShipped: 1, stopped: true } });
    expect(await containersOfProcess(worker.proc.pid!)).toEqual([]);
  });
});
