/**
 * The reference harness, for real: the agent in a real sandbox, through the
 * real proxy, driven by scripted engines. Gold (the fixture's gold patch said
 * with edit_file, write_file and bash) scores 1, an answer at once 0, the
 * segments hold exactly the engine's tokens, and the tool calls the proxy
 * recorded are, call by call, the ones its trajectory says it ran. The
 * shipped Trajectory counts the re-reads after edit its calls made: none for
 * gold, one when the agent `cat`s the file it just fixed.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildTrajectory, RolloutRunner, UNBOUNDED_SHIP } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import { ANSWER_AT_ONCE, HARNESS_TOOLS, goldScript, toolCall } from "./index.ts";
import { editKindsFixture, expectTokenExact, expectToolCallsExecuted, harnessRollout } from "./test-support.ts";

const entry = HARNESS_TOOLS.reference!;

describe("reference harness in a real sandbox through the real proxy", () => {
  let fix: { task: TaskDefinition; image: string };
  let runner: RolloutRunner;
  beforeAll(async () => {
    fix = await editKindsFixture();
    runner = await RolloutRunner.create({ maxAttempts: 1 });
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  it("scripted-gold: the gold patch through edit_file (two hunks, the first widened), write_file and bash rm, then submit; reward 1", async () => {
    const { outcome, report, engine, records, session } = await harnessRollout(runner, fix, entry, "scripted-gold", "ref-gold");
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 1, defenseFlags: [] });
    const replies = goldScript(fix.task, entry.tools);
    expect(report).toMatchObject({ harness: "reference", exitCode: 0, timedOut: false, turns: replies.length, segments: 1, side_threads: 0 });
    expectTokenExact(records, engine, replies);
    expectToolCallsExecuted(records, report, entry.harness);
    expect(report.toolCalls.map((c) => c.name)).toEqual(["edit_file", "edit_file", "bash", "write_file", "submit"]);
    expect(session).toMatchObject({ toolCalls: 5, rereadsAfterEdit: 0 });
  }, 180_000);

  it("gold, then `cat clamp.py` (the file it just edited, by its relative path), then submit: the shipped Trajectory has rereads_after_edit 1", async () => {
    const gold = goldScript(fix.task, entry.tools);
    const script = [...gold.slice(0, -1), { text: toolCall("bash", { command: "cat clamp.py" }) }, gold.at(-1)!];
    const { outcome, report, session } = await harnessRollout(runner, fix, entry, "scripted-gold", "ref-reread", { script });
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 1, defenseFlags: [] });
    expect(report.toolCalls.map((c) => [c.name, c.ok])).toContainEqual(["bash", true]);
    const trajectory = buildTrajectory({
      identity: { trajectoryId: "ref-reread", groupId: "g", taskId: fix.task.name, harness: "reference" }, session, outcome, wallTimeS: 1, routing: null, ship: UNBOUNDED_SHIP,
    });
    expect(trajectory.metrics).toMatchObject({ tool_calls: 6, rereads_after_edit: 1 });
  }, 180_000);

  it("answer-at-once: one plain answer, nothing changed; reward 0; its trajectory ends on that answer", async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "answer-at-once", "ref-answer");
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    expect(report).toMatchObject({ exitCode: 0, turns: 1, toolCalls: [], finalMessage: (ANSWER_AT_ONCE[0] as { text: string }).text });
    expectTokenExact(records, engine, ANSWER_AT_ONCE);
    expectToolCallsExecuted(records, report, entry.harness);
  }, 180_000);
});
