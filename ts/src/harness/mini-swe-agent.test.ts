/**
 * mini-swe-agent, the real unmodified package on the mounted Python runtime,
 * in a real sandbox through the real proxy, driven by scripted engines that
 * call its one tool (bash: heredocs write the gold files, its echo command
 * submits): gold scores 1, an answer at once 0, the main segment holds
 * exactly the engine's tokens, and the tool calls the proxy parsed are the
 * ones it ran.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImage, fixtureImages, leftoverContainers } from "../sandbox/test-support.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import { qwen3 } from "../proxy/test-support.ts";
import { ANSWER_AT_ONCE, HARNESS_TOOLS, MINI_SWE_AGENT_VERSION, RUNTIMES_DIR, goldScript } from "./index.ts";
import { expectTokenExact, harnessRollout } from "./test-support.ts";

const entry = HARNESS_TOOLS["mini-swe-agent"]!;
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("mini-swe-agent in a real sandbox through the real proxy", () => {
  let fix: { task: TaskDefinition; image: string };
  let runner: RolloutRunner;
  beforeAll(async () => {
    // scripts/setup builds the runtimes; a missing one fails here, never skips.
    for (const dir of ["python/bin/python3", "mini-swe-agent/minisweagent"])
      expect(existsSync(join(RUNTIMES_DIR, dir)), `no ${dir} in ${RUNTIMES_DIR}: run scripts/setup`).toBe(true);
    const f = await fixtureImage("fix-add");
    fix = { task: f.task, image: f.image.tag };
    runner = await RolloutRunner.create({ maxAttempts: 1, runtimes: entry.harness.runtimes() });
  });
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  it(`scripted-gold (mini-swe-agent ${MINI_SWE_AGENT_VERSION}): bash writes the gold files and runs solve.sh, its echo submits; reward 1`, async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "scripted-gold", "mini-gold");
    expect(outcome).toMatchObject({ status: "ok", reward: 1, defenseFlags: [] });
    const replies = goldScript(fix.task, entry.tools);
    expect(report).toMatchObject({ harness: "mini-swe-agent", segments: 1 });
    expectTokenExact(records, engine, replies);
    expect(engine.callCount).toBe(replies.length);
    // What ran: each command's observation (its own JSON template) came back on the next call.
    const prompt = (i: number) => qwen3().tokenizer.decode(Array.from(engine.prompts[i]!));
    expect(prompt(replies.length - 1).match(/<tool_response>\n\{\n\s*"returncode": 0,/g)).toHaveLength(replies.length - 1);
    expect(records.counters.tool_calls).toBe(replies.length);
  }, 240_000);

  it("answer-at-once: a plain answer is a format error to it, dropped from its history; after 3 in a row it stops; reward 0", async () => {
    const { outcome, engine, records } = await harnessRollout(runner, fix, entry, "answer-at-once", "mini-answer");
    expect(outcome).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    // It drops a reply without a tool call from its history (the format error
    // replaces it), so each next prompt does not extend the last: one segment per call.
    expectTokenExact(records, engine, ANSWER_AT_ONCE, 3);
    expect(engine.callCount).toBe(3); // AgentConfig.max_consecutive_format_errors
    expect(records.counters.tool_calls).toBe(0);
  }, 240_000);

  it("turn limit: the gold script cut off after 1 model call (the write, not the run) ends cleanly as an agent outcome, reward 0", async () => {
    const { outcome, engine, records } = await harnessRollout(runner, fix, entry, "scripted-gold", "mini-limit", 1);
    expect(outcome).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    expect(engine.callCount).toBe(1);
    expectTokenExact(records, engine, goldScript(fix.task, entry.tools));
  }, 240_000);
});
