/** The end summary from events alone: reward and statuses by harness, failures by type, flags, throughput, time per stage; its table and JSON lines. */
import { describe, expect, it } from "vitest";
import { RolloutEvents } from "./events.ts";
import { SummaryCollector, formatSummary, jsonLines } from "./summary.ts";

describe("run summary", () => {
  it("splits by harness and counts failures, flags and stage time", () => {
    const events = new RolloutEvents(() => 1000);
    const summary = new SummaryCollector(events);
    const lines: string[] = [];
    jsonLines(events, (l) => lines.push(l));
    const fin = (id: string, harness: string, status: "ok" | "timeout" | "env_error" | "agent_error", reward: number | null, extra: Record<string, unknown> = {}) =>
      events.emit({ kind: "rollout_finished", groupId: "g", trajectoryId: id, taskId: "task-a", harness, status, reward, wallTimeS: 2, envError: null, stageMs: { setup: 1000, agent: 3000, grading: 2000 }, ...extra });
    fin("1", "reference/scripted-gold", "ok", 1);
    fin("2", "reference/scripted-gold", "timeout", 0, { defenseFlags: ["timeout"] });
    fin("3", "claude-code/scripted-gold", "ok", 1);
    fin("4", "claude-code/scripted-gold", "env_error", null, { envError: "container_died: gone" });
    events.emit({ kind: "over_length", groupId: "g", trajectoryId: "1", tokens: 10, limit: 5, action: "dropped", reason: "too long" });
    events.emit({ kind: "group_shipped", groupId: "g", taskId: "task-a", trajectories: 2, droppedEnvErrors: 1, droppedOverLength: 1 });
    const s = summary.summary();
    expect(s.rewardByHarness).toEqual({ "reference/scripted-gold": 0.5, "claude-code/scripted-gold": 1 });
    expect(s.statusesByHarness).toEqual({ "reference/scripted-gold": { ok: 1, timeout: 1 }, "claude-code/scripted-gold": { ok: 1, env_error: 1 } });
    expect(s.failures).toEqual({ timeout: 1, "env_error:container_died": 1, over_length: 1 });
    expect(s.defenseFlags).toEqual({ timeout: 1 });
    expect(s.stageS).toEqual({ setup: 1, agent: 3, grading: 2 });
    expect(s.overLength).toEqual({ dropped: 1, truncated: 0 });
    expect(s.throughput.rolloutsPerMin).toBeGreaterThan(0);
    const table = formatSummary(s);
    expect(table).toMatch(/task-a\s+reference\/scripted-gold\s+n=2\s+reward=0\.500/);
    expect(table).toMatch(/failures: timeout 1, env_error:container_died 1, over_length 1/);
    expect(table).toMatch(/over length: 1 dropped, 0 truncated/);
    expect(table).toMatch(/per rollout: setup 1 s, agent 3 s, grading 2 s/);
    // One JSON object per event, named by `event`, stamped with the time.
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(parsed.map((p) => p.event)).toEqual(["rollout_finished", "rollout_finished", "rollout_finished", "rollout_finished", "over_length", "group_shipped"]);
    expect(parsed.every((p) => p.at === 1000 && !("kind" in p))).toBe(true);
    expect(lines.every((l) => l.endsWith("\n") && !l.slice(0, -1).includes("\n"))).toBe(true);
  });
});
