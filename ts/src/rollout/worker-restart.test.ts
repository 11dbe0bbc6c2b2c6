/**
 * Worker restart: `lego rollout` is SIGKILLed mid-run while the trainer is
 * down, so groups it shipped sit spooled and unacknowledged and containers of
 * its in-flight rollouts are orphaned. The trainer comes back; the worker is
 * started again with the same spool dir and producer id. The new worker reaps
 * the dead run's containers, its sender resends the old spool, and the
 * receiver gets every spooled group of the killed run exactly once, beside the
 * new run's groups: no trajectory or batch twice, none of the spooled lost.
 * (The restarted run runs its tasks again under a new run id; resuming only
 * the unshipped groups is planned, see docs/rollout.md.)
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import { JsonLineProcess, PYTHON } from "../transport/bench-peers.ts";
import { receivedRows, startReceiver } from "./test-support.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const work = mkdtempSync(join(tmpdir(), "lego-rollout-worker-restart-"));
const TASKS = "easy:seed=13,count=4";

/** `lego rollout` in its own process group (bin/lego is a bash wrapper around node), its JSON lines collected. */
function startWorker(trainer: string): { proc: ChildProcess; lines: Record<string, unknown>[]; exited: Promise<number | null>; onLine: (f: () => void) => void } {
  const proc = spawn(LEGO, [
    "rollout", "--tasks", TASKS, "--harness", "oracle", "--group-size", "2", "--concurrency", "2", "--trainer", trainer,
    "--spool-dir", join(work, "tx"), "--producer-id", "restart", "--max-attempts", "2",
  ], { detached: true, stdio: ["ignore", "pipe", "inherit"] });
  const lines: Record<string, unknown>[] = [];
  const listeners: (() => void)[] = [];
  createInterface({ input: proc.stdout! }).on("line", (l) => {
    if (!l.startsWith("{")) return;
    lines.push(JSON.parse(l) as Record<string, unknown>);
    for (const f of listeners) f();
  });
  const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
  return { proc, lines, exited, onLine: (f) => listeners.push(f) };
}

function crash(p: JsonLineProcess): Promise<void> {
  return new Promise((r) => {
    if (p.proc.exitCode !== null || p.proc.signalCode !== null) return r();
    p.proc.once("exit", () => r());
    p.proc.kill("SIGKILL");
  });
}

describe("worker faults: worker restart", () => {
  const receivers: JsonLineProcess[] = [];
  beforeAll(async () => {
    await ensureBaseImage();
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    for (const r of receivers) await crash(r);
    expect(await leftoverContainers()).toEqual([]);
    rmSync(work, { recursive: true, force: true });
  });

  it("resends the killed worker's spooled groups after restart, each exactly once", { timeout: 600_000 }, async () => {
    const rx = join(work, "rx");
    // Learn a free address from a first receiver, then take the trainer down before the worker starts.
    const first = await startReceiver(rx);
    receivers.push(first.receiver);
    const address = first.address;
    await crash(first.receiver);

    const one = startWorker(address);
    const shippedTwo = new Promise<void>((r) => one.onLine(() => {
      if (one.lines.filter((l) => l.event === "group_shipped").length >= 2) r();
    }));
    await Promise.race([shippedTwo, one.exited.then((c) => { throw new Error(`worker exited (${c}) before shipping 2 groups`); })]);
    process.kill(-one.proc.pid!, "SIGKILL");
    await one.exited;
    const spooledGroups = one.lines.filter((l) => l.event === "group_shipped").map((l) => l.groupId as string);
    expect(spooledGroups.length).toBeGreaterThanOrEqual(2);
    expect(one.lines.some((l) => l.event === "summary")).toBe(false); // it really died mid-run

    const second = new JsonLineProcess("receiver2", PYTHON, ["-m", "lego_rl.transport", "receive", "--bind", address, "--spool", rx]);
    receivers.push(second);
    await second.waitFor((e) => e.type === "listening", 30_000);
    const two = startWorker(address);
    const code = await Promise.race([two.exited, new Promise<never>((_, j) => setTimeout(() => j(new Error("restarted worker did not finish in 400 s")), 400_000))]);
    expect(code).toBe(0);
    const summary = two.lines.at(-1)!;
    expect(summary).toMatchObject({ event: "summary", groupsShipped: 4, trajectoriesShipped: 8, droppedEnvErrors: 0 });
    // The new sender accepted its own 4 batches plus the old spool's.
    expect((summary.sender as { accepted: number; queued: number }).accepted).toBeGreaterThanOrEqual(4 + spooledGroups.length);

    const rows = receivedRows(rx);
    const ids = rows.map((r) => r.trajectory_id as string);
    expect(new Set(ids).size).toBe(ids.length);
    const batches = new Set(rows.map((r) => r.batch_id as string));
    const groupsAtReceiver = new Set(rows.map((r) => r.group_id as string));
    // Every group the killed worker spooled arrived, each in exactly one batch, two rollouts each.
    for (const g of spooledGroups) {
      const mine = rows.filter((r) => r.group_id === g);
      expect(mine).toHaveLength(2);
      expect(new Set(mine.map((r) => r.batch_id)).size).toBe(1);
    }
    expect(groupsAtReceiver.size).toBe(4 + spooledGroups.length);
    expect(batches.size).toBe(groupsAtReceiver.size);
    expect(rows.every((r) => r.status === "ok" && r.reward === 1)).toBe(true);
    // The killed run's orphaned containers were reaped by the restarted worker.
    expect(await leftoverContainers()).toEqual([]);
  });
});
