/**
 * Mixed harnesses in one run, end to end with real processes: `lego rollout
 * --harness reference=0.5,claude-code=0.5 --engine scripted-gold` → the real
 * reference agent and the real Claude Code binary in real sandboxes, each
 * through its own proxy session → the real Python receiver. Each group runs
 * one harness; every trajectory records its harness, and the summary splits
 * reward and statuses by harness.
 */
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { RUNTIMES_DIR } from "../harness/index.ts";
import { receivedRows, receiverFixture } from "./test-support.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const work = mkdtempSync(join(tmpdir(), "lego-rollout-mixed-"));
const G = 2;

describe("lego rollout with mixed harnesses", () => {
  const rx = receiverFixture(work, async () => {
    // scripts/setup builds the runtimes; a missing one fails here, never skips.
    expect(existsSync(join(RUNTIMES_DIR, "harness/node_modules/@anthropic-ai/claude-code-linux-x64/claude")), `no Claude Code runtime in ${RUNTIMES_DIR}: run scripts/setup`).toBe(true);
  });

  it("runs each group with one harness, records it on every trajectory and splits the summary by it", { timeout: 900_000 }, async () => {
    const { stdout } = await promisify(execFile)(LEGO, [
      "rollout", "--tasks", "easy:seed=11,count=2", "--harness", "reference=0.5,claude-code=0.5", "--engine", "scripted-gold", "--max-turns", "8",
      "--group-size", String(G), "--concurrency", "2", "--trainer", rx.address, "--spool-dir", join(work, "tx"), "--producer-id", "mixed",
    ], { timeout: 840_000, maxBuffer: 1 << 24 });
    const lines = stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    const summary = lines.at(-1)!;
    const names = ["reference/scripted-gold", "claude-code/scripted-gold"];
    expect(summary).toMatchObject({
      event: "summary", groupsShipped: 2, trajectoriesShipped: 2 * G, droppedEnvErrors: 0,
      rewardByHarness: { [names[0]!]: 1, [names[1]!]: 1 },
      statusesByHarness: { [names[0]!]: { ok: G }, [names[1]!]: { ok: G } },
    });
    const cells = summary.rewardByTaskHarness as { task: string; harness: string; rollouts: number }[];
    expect(cells.map((c) => c.harness).sort()).toEqual([...names].sort());

    const rows = receivedRows(rx.rxSpool);
    expect(rows).toHaveLength(2 * G);
    expect(new Set(rows.map((r) => r.trajectory_id)).size).toBe(2 * G);
    const groups = new Map<string, Record<string, unknown>[]>();
    for (const r of rows) groups.set(r.group_id as string, [...(groups.get(r.group_id as string) ?? []), r]);
    // One harness per group, and each of the two harnesses got one of the two groups.
    expect([...groups.values()].map((g) => new Set(g.map((r) => r.harness)).size)).toEqual([1, 1]);
    expect([...groups.values()].map((g) => g[0]!.harness).sort()).toEqual([...names].sort());
    expect(rows.every((r) => r.status === "ok" && r.reward === 1)).toBe(true);
  });
});
