/**
 * Trainer restart during a worker run of 4 groups: the real Python receiver
 * is SIGKILLed after the first group ships and started again (same address,
 * same spool) after the third. The worker keeps running and spooling while
 * the trainer is gone; after the reconnect the sender sends what waited, and
 * the receiver's dedup index (kept in its spool across the restart) makes any
 * batch whose ack died with the old process land once. Every trajectory
 * arrives exactly once; no container is left.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import { defaultTasksConfig, openTaskSource, oracleAgent, type Task } from "../tasks/index.ts";
import { Sender, type SenderEvent } from "../transport/index.ts";
import { JsonLineProcess, PYTHON } from "../transport/bench-peers.ts";
import { RolloutEvents, RolloutRunner, runWorkerLoop } from "./index.ts";
import { receivedRows, startReceiver } from "./test-support.ts";

const work = mkdtempSync(join(tmpdir(), "lego-rollout-trainer-restart-"));

/** SIGKILL (no clean shutdown, like a crashed trainer); resolves once the process is gone and its port free. */
function crash(p: JsonLineProcess): Promise<void> {
  return new Promise((resolve) => {
    if (p.proc.exitCode !== null || p.proc.signalCode !== null) return resolve();
    p.proc.once("exit", () => resolve());
    p.proc.kill("SIGKILL");
  });
}

describe("worker faults: trainer restart", () => {
  let tasks: Task[];
  const receivers: JsonLineProcess[] = [];
  beforeAll(async () => {
    await ensureBaseImage();
    tasks = (await openTaskSource("easy:seed=11,count=4", defaultTasksConfig())).tasks;
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    for (const r of receivers) await crash(r);
    expect(await leftoverContainers()).toEqual([]);
    rmSync(work, { recursive: true, force: true });
  });

  it("spools while the receiver is down, sends after it is back, every trajectory once", { timeout: 600_000 }, async () => {
    const rx = join(work, "rx");
    const first = await startReceiver(rx);
    receivers.push(first.receiver);
    const address = first.address;
    const senderEvents: SenderEvent[] = [];
    const sender = new Sender({ address, spoolDir: join(work, "tx"), producerId: "trainer-restart", onEvent: (e) => senderEvents.push(e) });
    const runner = new RolloutRunner({ concurrency: 2, maxAttempts: 1 });
    const events = new RolloutEvents();
    let shippedGroups = 0;
    let shippedWhileDown = 0;
    let down = false;
    // Set from the event listener; a holder object so the type checker does not narrow them to null.
    const fault: { killed: Promise<void> | null; restart: Promise<JsonLineProcess> | null } = { killed: null, restart: null };
    events.subscribe((e) => {
      if (e.kind !== "group_shipped") return;
      shippedGroups += 1;
      if (down) shippedWhileDown += 1;
      if (shippedGroups === 1) {
        down = true;
        fault.killed = crash(first.receiver);
      }
      if (shippedGroups === 3) {
        down = false;
        // Same address and spool: a trainer restarted in place, with its dedup index on disk.
        fault.restart = fault.killed!.then(() => {
          const p = new JsonLineProcess("receiver2", PYTHON, ["-m", "lego_rl.transport", "receive", "--bind", address, "--spool", rx]);
          receivers.push(p);
          return p;
        });
      }
    });
    let result;
    try {
      result = await runWorkerLoop(tasks, { runner, launcher: oracleAgent, sink: sender, events }, {
        groupSize: 2, concurrency: 2, maxAttempts: 2, runId: "trestart", routing: null, staleness: { maxStaleness: null },
      });
      expect(fault.restart).not.toBeNull();
      const second = await fault.restart!;
      await second.waitFor((e) => e.type === "listening", 30_000);
      await sender.drain(120_000);
    } finally {
      await runner.close();
      await sender.close();
    }
    expect(result).toEqual({ groupsShipped: 4, trajectoriesShipped: 8, droppedEnvErrors: 0, groupsShippedBefore: 0 });
    // The outage was real: the sender saw the connection go and come back, and groups were spooled meanwhile.
    expect(senderEvents.filter((e) => e.type === "disconnected").length).toBeGreaterThanOrEqual(1);
    expect(senderEvents.filter((e) => e.type === "connected").length).toBeGreaterThanOrEqual(2);
    expect(shippedWhileDown).toBeGreaterThanOrEqual(1);
    const spooledIds = senderEvents.flatMap((e) => (e.type === "spooled" ? [e.batch_id] : []));
    const acked = senderEvents.flatMap((e) => (e.type === "acked" ? [e.batch_id] : []));
    expect(new Set(acked)).toEqual(new Set(spooledIds));

    const rows = receivedRows(rx);
    const ids = rows.map((r) => r.trajectory_id as string);
    expect(ids).toHaveLength(8);
    expect(new Set(ids).size).toBe(8);
    // A group is one batch at the receiver, never split across or repeated in two.
    const batchOfGroup = new Map<string, Set<string>>();
    for (const r of rows) batchOfGroup.set(r.group_id as string, (batchOfGroup.get(r.group_id as string) ?? new Set()).add(r.batch_id as string));
    expect(batchOfGroup.size).toBe(4);
    expect([...batchOfGroup.values()].every((s) => s.size === 1)).toBe(true);
    expect(rows.every((r) => r.status === "ok" && r.reward === 1)).toBe(true);
    expect(await leftoverContainers()).toEqual([]);
  });
});
