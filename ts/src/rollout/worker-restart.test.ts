/**
 * Worker restart: `lego rollout` is SIGKILLed mid-run (process group and all),
 * so containers of its in-flight rollouts are orphaned; it is started again
 * with the same spool dir and flags. The new worker reaps the dead run's
 * containers and resumes the same run (its journal, journal.ts): same run id,
 * only the groups the killed one had not shipped run, the shipped ones are
 * not run again. Twice: with the trainer down during the kill (shipped groups
 * sit spooled, unacknowledged, and are resent) and with it up (shipped groups
 * were acknowledged and left the spool; only the journal knows them). Either
 * way the receiver holds each of the 4 groups exactly once, all under the
 * killed run's id: no trajectory or batch twice, none lost.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
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
function startWorker(trainer: string, spool: string): { proc: ChildProcess; lines: Record<string, unknown>[]; exited: Promise<number | null>; onLine: (f: () => void) => void } {
  const proc = spawn(LEGO, [
    "rollout", "--tasks", TASKS, "--harness", "oracle", "--group-size", "2", "--concurrency", "2", "--trainer", trainer,
    "--spool-dir", spool, "--producer-id", "restart", "--max-attempts", "2",
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

  /** Kills the worker once it has reported `groups` shipped; returns the shipped group ids and the run id. */
  async function killAfter(w: ReturnType<typeof startWorker>, groups: number, until?: () => boolean): Promise<{ shipped: string[]; runId: string }> {
    const shippedN = new Promise<void>((r) => w.onLine(() => {
      if (w.lines.filter((l) => l.event === "group_shipped").length >= groups) r();
    }));
    await Promise.race([shippedN, w.exited.then((c) => { throw new Error(`worker exited (${c}) before shipping ${groups} groups`); })]);
    if (until) await expect.poll(until, { timeout: 60_000, interval: 50 }).toBe(true);
    process.kill(-w.proc.pid!, "SIGKILL");
    await w.exited;
    expect(w.lines.some((l) => l.event === "summary")).toBe(false); // it really died mid-run
    const shipped = w.lines.filter((l) => l.event === "group_shipped").map((l) => l.groupId as string);
    return { shipped, runId: /^(.*)-g\d+-/.exec(shipped[0]!)![1]! };
  }

  async function finishRestarted(address: string, spool: string, rx: string, killed: { shipped: string[]; runId: string }) {
    const two = startWorker(address, spool);
    const code = await Promise.race([two.exited, new Promise<never>((_, j) => setTimeout(() => j(new Error("restarted worker did not finish in 400 s")), 400_000))]);
    expect(code).toBe(0);
    const summary = two.lines.at(-1)! as Record<string, unknown> & { result: { groupsShipped: number; groupsShippedBefore: number } };
    // Same run, resumed: what the killed worker shipped is not run again, the rest is.
    expect(summary).toMatchObject({ event: "summary", runId: killed.runId, resumed: true, droppedEnvErrors: 0 });
    expect(summary.result.groupsShippedBefore).toBeGreaterThanOrEqual(killed.shipped.length);
    expect(summary.result.groupsShipped + summary.result.groupsShippedBefore).toBe(4);
    const rerun = two.lines.filter((l) => l.event === "group_shipped").map((l) => l.groupId as string);
    expect(rerun.filter((g) => killed.shipped.includes(g))).toEqual([]);

    const rows = receivedRows(rx);
    const ids = rows.map((r) => r.trajectory_id as string);
    expect(ids).toHaveLength(8);
    expect(new Set(ids).size).toBe(8);
    const groups = new Set(rows.map((r) => r.group_id as string));
    expect(groups.size).toBe(4);
    for (const g of groups) {
      expect(g.startsWith(`${killed.runId}-g`)).toBe(true);
      const mine = rows.filter((r) => r.group_id === g);
      expect(mine).toHaveLength(2);
      expect(new Set(mine.map((r) => r.batch_id)).size).toBe(1);
    }
    for (const g of killed.shipped) expect(groups.has(g)).toBe(true);
    expect(new Set(rows.map((r) => r.batch_id)).size).toBe(4);
    expect(rows.every((r) => r.status === "ok" && r.reward === 1)).toBe(true);
    // The killed run's orphaned containers were reaped by the restarted worker, which left none of its own.
    expect(await leftoverContainers()).toEqual([]);
    return summary;
  }

  it("trainer down during the kill: the spooled groups are resent, the rest run, each group once", { timeout: 600_000 }, async () => {
    const rx = join(work, "rx-down");
    const spool = join(work, "tx-down");
    // Learn a free address from a first receiver, then take the trainer down before the worker starts.
    const first = await startReceiver(rx);
    receivers.push(first.receiver);
    const address = first.address;
    await crash(first.receiver);

    const killed = await killAfter(startWorker(address, spool), 2);
    expect(killed.shipped.length).toBeGreaterThanOrEqual(2);

    const second = new JsonLineProcess("receiver2", PYTHON, ["-m", "lego_rl.transport", "receive", "--bind", address, "--spool", rx]);
    receivers.push(second);
    await second.waitFor((e) => e.type === "listening", 30_000);
    const summary = await finishRestarted(address, spool, rx, killed);
    // The old spool's batches went out again through the new sender.
    expect((summary.sender as { accepted: number }).accepted).toBeGreaterThanOrEqual(4);
  });

  it("trainer up during the kill: acknowledged groups are not run again", { timeout: 600_000 }, async () => {
    const rx = join(work, "rx-up");
    const spool = join(work, "tx-up");
    const { receiver, address } = await startReceiver(rx);
    receivers.push(receiver);
    // Killed once a shipped group was acknowledged and left the worker's spool (one batch per group).
    const w = startWorker(address, spool);
    const spooled = () => readdirSync(spool).filter((f) => f.endsWith(".lgrb")).length;
    const killed = await killAfter(w, 2, () => spooled() < w.lines.filter((l) => l.event === "group_shipped").length);
    expect(new Set(receivedRows(rx).map((r) => r.group_id)).size).toBeGreaterThanOrEqual(1);
    await finishRestarted(address, spool, rx, killed);
  });
});
