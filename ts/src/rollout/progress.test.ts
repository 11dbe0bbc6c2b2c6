/**
 * The terminal view, drawn by cli-progress into a stream that says it is a
 * terminal: its last frame shows groups and rollouts done, rollouts in
 * flight, the reward so far and the failures by type; log lines go above it.
 */
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { RolloutEvents } from "./events.ts";
import { ProgressView } from "./progress.ts";

function terminal(): { stream: PassThrough & { isTTY: boolean; columns: number }; text: () => string } {
  const stream = Object.assign(new PassThrough(), { isTTY: true, columns: 200 });
  const chunks: Buffer[] = [];
  stream.on("data", (c: Buffer) => chunks.push(c));
  return { stream, text: () => Buffer.concat(chunks).toString("utf8") };
}

describe("progress view", () => {
  it("shows groups done, rollouts in flight, reward so far and failures by type", () => {
    const events = new RolloutEvents();
    const t = terminal();
    const view = new ProgressView(events, { groups: 2, rollouts: 4 }, t.stream);
    const fin = (id: string, status: "ok" | "timeout" | "env_error", reward: number | null, envError: string | null = null) =>
      events.emit({ kind: "rollout_finished", groupId: "g0", trajectoryId: id, taskId: "t", harness: "reference", status, reward, wallTimeS: 1, envError });
    for (const id of ["a", "b", "c", "d"]) events.emit({ kind: "rollout_started", groupId: "g0", trajectoryId: id, taskId: "t", attempt: 1 });
    fin("a", "ok", 1);
    fin("b", "timeout", 0);
    fin("c", "env_error", null, "container_died: gone");
    events.emit({ kind: "group_shipped", groupId: "g0", taskId: "t", trajectories: 2, droppedEnvErrors: 1 });
    view.log("a log line");
    view.stop();
    const out = t.text();
    // The last frame (cli-progress redraws in place; the final one is at the end).
    const last = out.slice(out.lastIndexOf("groups"));
    expect(last).toMatch(/groups\s+\[[^\]]*\] 1\/2 \| reward so far 0\.500/);
    expect(last).toMatch(/rollouts \[[^\]]*\] 3\/4 \| in flight 1 \| failures: timeout 1, env_error:container_died 1/);
    expect(out).toContain("a log line\n");
    // It stopped listening: later events change nothing it drew.
    const len = out.length;
    fin("d", "ok", 1);
    expect(t.text().length).toBe(len);
  });
});
