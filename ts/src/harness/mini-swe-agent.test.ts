/**
 * mini-swe-agent, the real unmodified package on the mounted Python runtime,
 * in a real sandbox through the real proxy, driven by scripted engines that
 * call its one tool (bash: a python3 replacement per hunk, a heredoc for the
 * new file, rm, its echo command submits): gold scores 1, an answer at once 0,
 * the main segment holds exactly the engine's tokens, and the tool calls the
 * proxy recorded are, call by call, the actions its trajectory says it ran.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import { ANSWER_AT_ONCE, HARNESS_TOOLS, MINI_SWE_AGENT_VERSION, RUNTIMES_DIR, goldScript } from "./index.ts";
import { editKindsFixture, expectTokenExact, expectToolCallsExecuted, harnessRollout } from "./test-support.ts";

const entry = HARNESS_TOOLS["mini-swe-agent"]!;

describe("mini-swe-agent in a real sandbox through the real proxy", () => {
  let fix: { task: TaskDefinition; image: string };
  let runner: RolloutRunner;
  beforeAll(async () => {
    // scripts/setup builds the runtimes; a missing one fails here, never skips.
    for (const dir of ["python/bin/python3", "mini-swe-agent/minisweagent"])
      expect(existsSync(join(RUNTIMES_DIR, dir)), `no ${dir} in ${RUNTIMES_DIR}: run scripts/setup`).toBe(true);
    fix = await editKindsFixture();
    runner = await RolloutRunner.create({ maxAttempts: 1, runtimes: entry.harness.runtimes() });
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  it(`scripted-gold (mini-swe-agent ${MINI_SWE_AGENT_VERSION}): bash runs a python3 replacement per hunk, rm, a heredoc for the new file, its echo submits; reward 1`, async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "scripted-gold", "mini-gold");
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 1, defenseFlags: [] });
    const replies = goldScript(fix.task, entry.tools);
    expect(report).toMatchObject({ harness: "mini-swe-agent", exitCode: 0, segments: 1, side_threads: 0, finalMessage: "Submitted" });
    expectTokenExact(records, engine, replies);
    expect(engine.callCount).toBe(replies.length);
    expectToolCallsExecuted(records, report, entry.harness);
    expect(report.toolCalls.map((c) => String(c.arguments["command"]).split(" ")[0])).toEqual(["python3", "python3", "rm", "mkdir", "echo"]);
  }, 240_000);

  it("answer-at-once: a plain answer is a format error to it, dropped from its history; after 3 in a row it stops; reward 0", async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "answer-at-once", "mini-answer");
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    // It drops a reply without a tool call from its history (the format error
    // replaces it), so each next prompt does not extend the last: one segment per call.
    expectTokenExact(records, engine, ANSWER_AT_ONCE, { mainSegments: 3 });
    expect(engine.callCount).toBe(3); // AgentConfig.max_consecutive_format_errors
    expect(report).toMatchObject({ exitCode: 0, toolCalls: [], finalMessage: "RepeatedFormatError" });
    expectToolCallsExecuted(records, report, entry.harness);
  }, 240_000);

  it("turn limit: the gold script cut off after 1 model call (the first hunk only) ends cleanly as an agent outcome, reward 0", async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "scripted-gold", "mini-limit", { maxTurns: 1 });
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    expect(engine.callCount).toBe(1);
    expectTokenExact(records, engine, goldScript(fix.task, entry.tools));
    expectToolCallsExecuted(records, report, entry.harness);
    expect(report.finalMessage).toBe("LimitsExceeded");
  }, 240_000);
});
