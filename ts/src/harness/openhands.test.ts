/**
 * OpenHands SDK, the real unmodified packages on the mounted Python runtime,
 * in a real sandbox through the real proxy, driven by scripted engines that
 * call its own tools (file_editor, terminal, finish): gold scores 1, an
 * answer at once 0, the main segment holds exactly the engine's tokens, and
 * the tool calls the proxy parsed are the ones the SDK ran.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImage, fixtureImages, leftoverContainers } from "../sandbox/test-support.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import { qwen3 } from "../proxy/test-support.ts";
import { ANSWER_AT_ONCE, HARNESS_TOOLS, OPENHANDS_SDK_VERSION, RUNTIMES_DIR, goldScript } from "./index.ts";
import { expectTokenExact, harnessRollout } from "./test-support.ts";

const entry = HARNESS_TOOLS["openhands"]!;
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("OpenHands SDK in a real sandbox through the real proxy", () => {
  let fix: { task: TaskDefinition; image: string };
  let runner: RolloutRunner;
  beforeAll(async () => {
    // scripts/setup builds the runtimes; a missing one fails here, never skips.
    for (const dir of ["python/bin/python3", "openhands/openhands/sdk"])
      expect(existsSync(join(RUNTIMES_DIR, dir)), `no ${dir} in ${RUNTIMES_DIR}: run scripts/setup`).toBe(true);
    const f = await fixtureImage("fix-add");
    fix = { task: f.task, image: f.image.tag };
    runner = await RolloutRunner.create({ maxAttempts: 1, runtimes: entry.harness.runtimes() });
  });
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  it(`scripted-gold (openhands-sdk ${OPENHANDS_SDK_VERSION}): file_editor creates the gold files, terminal runs solve.sh, finish ends it; reward 1`, async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "scripted-gold", "openhands-gold");
    expect(outcome).toMatchObject({ status: "ok", reward: 1, defenseFlags: [] });
    const replies = goldScript(fix.task, entry.tools);
    expect(report).toMatchObject({ harness: "openhands", segments: 1 });
    expectTokenExact(records, engine, replies);
    expect(engine.callCount).toBe(replies.length);
    // What ran: the SDK sent each tool's observation back on the next call.
    const prompt = (i: number) => qwen3().tokenizer.decode(Array.from(engine.prompts[i]!));
    expect(prompt(replies.length - 1)).toMatch(/<tool_response>\n[^]*(?:exit code 0|Exit code: 0)/i);
    expect(records.counters.tool_calls).toBe(replies.length);
  }, 240_000);

  it("answer-at-once: one plain answer, nothing changed; reward 0", async () => {
    const { outcome, engine, records } = await harnessRollout(runner, fix, entry, "answer-at-once", "openhands-answer");
    expect(outcome).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    expectTokenExact(records, engine, ANSWER_AT_ONCE);
    expect(records.counters.tool_calls).toBe(0);
  }, 240_000);

  it("turn limit: the gold script cut off after 2 model calls (mkdir, write; not the run) ends cleanly as an agent outcome, reward 0", async () => {
    const { outcome, engine, records } = await harnessRollout(runner, fix, entry, "scripted-gold", "openhands-limit", 2);
    expect(outcome).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    expect(engine.callCount).toBe(2);
    expectTokenExact(records, engine, goldScript(fix.task, entry.tools));
  }, 240_000);
});
