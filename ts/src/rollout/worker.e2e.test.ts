/**
 * End to end with real processes: `lego rollout` (oracle, then empty agent) →
 * real sandboxes on easy tasks → the data plane → the real Python receiver.
 * The receiver's spooled batches are read back with pyarrow: every group,
 * reward and provenance field arrives, and every trajectory exactly once.
 */
import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { receivedRows, receiverFixture } from "./test-support.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const work = mkdtempSync(join(tmpdir(), "lego-rollout-e2e-"));
const TASKS = "easy:seed=7,count=2";
const G = 2;

async function rollout(harness: string, trainer: string): Promise<Record<string, unknown>[]> {
  const { stdout } = await promisify(execFile)(LEGO, [
    "rollout", "--tasks", TASKS, "--harness", harness, "--group-size", String(G), "--concurrency", "2", "--trainer", trainer,
    "--spool-dir", join(work, `spool-${harness}`), "--producer-id", `e2e-${harness}`,
  ], { timeout: 300_000, maxBuffer: 1 << 24 });
  return stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe("lego rollout end to end", () => {
  const rx = receiverFixture(work);

  it("ships oracle groups with reward 1 and empty-agent groups with reward 0, each trajectory exactly once", { timeout: 700_000 }, async () => {
    const oracle = await rollout("oracle", rx.address);
    const empty = await rollout("empty", rx.address);
    for (const [name, lines, reward] of [["oracle", oracle, 1], ["empty", empty, 0]] as const) {
      const summary = lines.at(-1)!;
      expect(summary).toMatchObject({ event: "summary", groupsShipped: 2, trajectoriesShipped: 2 * G, droppedEnvErrors: 0, statuses: { ok: 2 * G }, rewardByHarness: { [name]: reward } });
      expect(summary.sender).toMatchObject({ accepted: 2, queued: 0, inFlight: 0 });
      expect(lines.filter((l) => l.event === "group_shipped")).toHaveLength(2);
      expect(lines.filter((l) => l.event === "rollout_finished")).toHaveLength(2 * G);
    }
    const rows = receivedRows(rx.rxSpool);
    expect(rows).toHaveLength(2 * 2 * G);
    const ids = rows.map((r) => r.trajectory_id as string);
    expect(new Set(ids).size).toBe(ids.length); // exactly once
    for (const harness of ["oracle", "empty"]) {
      const mine = rows.filter((r) => r.harness === harness);
      expect(mine).toHaveLength(2 * G);
      expect(mine.every((r) => r.status === "ok" && r.reward === (harness === "oracle" ? 1 : 0) && r.attempt === 0)).toBe(true);
      // A group is one task's G rollouts, shipped together in one batch.
      const groups = new Map<string, Record<string, unknown>[]>();
      for (const r of mine) groups.set(r.group_id as string, [...(groups.get(r.group_id as string) ?? []), r]);
      expect(groups.size).toBe(2);
      for (const g of groups.values()) {
        expect(g).toHaveLength(G);
        expect(new Set(g.map((r) => r.task_id)).size).toBe(1);
        expect(new Set(g.map((r) => r.batch_id)).size).toBe(1);
      }
      expect(new Set(mine.map((r) => r.task_id)).size).toBe(2);
    }
    expect(rx.receiver.events.filter((e) => e.type === "accepted")).toHaveLength(4);
    expect(rx.receiver.events.filter((e) => e.type === "duplicate" || e.type === "quarantined")).toEqual([]);
  });
});
