/**
 * OpenHands SDK, the real unmodified packages on the mounted Python runtime,
 * in a real sandbox through the real proxy, driven by scripted engines that
 * call its own tools (file_editor str_replace and create, terminal, finish):
 * gold scores 1, an answer at once 0, the main segment holds exactly the
 * engine's tokens, and the tool calls the proxy recorded are, call by call,
 * the ones its event log says the SDK ran.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import { ANSWER_AT_ONCE, HARNESS_TOOLS, OPENHANDS_SDK_VERSION, RUNTIMES_DIR, goldScript } from "./index.ts";
import { editKindsFixture, expectTokenExact, expectToolCallsExecuted, harnessRollout } from "./test-support.ts";

const entry = HARNESS_TOOLS["openhands"]!;

describe("OpenHands SDK in a real sandbox through the real proxy", () => {
  let fix: { task: TaskDefinition; image: string };
  let runner: RolloutRunner;
  beforeAll(async () => {
    // scripts/setup builds the runtimes; a missing one fails here, never skips.
    for (const dir of ["python/bin/python3", "openhands/openhands/sdk"])
      expect(existsSync(join(RUNTIMES_DIR, dir)), `no ${dir} in ${RUNTIMES_DIR}: run scripts/setup`).toBe(true);
    fix = await editKindsFixture();
    runner = await RolloutRunner.create({ maxAttempts: 1, runtimes: entry.harness.runtimes() });
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  it(`scripted-gold (openhands-sdk ${OPENHANDS_SDK_VERSION}): file_editor str_replace per hunk, terminal removes, file_editor creates, finish ends it; reward 1`, async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "scripted-gold", "openhands-gold");
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 1, defenseFlags: [] });
    const replies = goldScript(fix.task, entry.tools);
    expect(report).toMatchObject({ harness: "openhands", exitCode: 0, segments: 1, side_threads: 0, finalMessage: "Done: the fix is applied." });
    expectTokenExact(records, engine, replies);
    expect(engine.callCount).toBe(replies.length);
    expectToolCallsExecuted(records, report, entry.harness);
    expect(report.toolCalls.map((c) => `${c.name}:${String(c.arguments["command"]).split(" ")[0]}`)).toEqual(
      ["file_editor:str_replace", "file_editor:str_replace", "terminal:rm", "file_editor:create", "finish:undefined"]);
  }, 240_000);

  it("answer-at-once: one plain answer, nothing changed; reward 0", async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "answer-at-once", "openhands-answer");
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    expect(report).toMatchObject({ exitCode: 0, toolCalls: [], finalMessage: (ANSWER_AT_ONCE[0] as { text: string }).text });
    expectTokenExact(records, engine, ANSWER_AT_ONCE);
    expectToolCallsExecuted(records, report, entry.harness);
  }, 240_000);

  it("turn limit: the gold script cut off after 2 model calls (the two edits, not the rest) ends cleanly as an agent outcome, reward 0", async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "scripted-gold", "openhands-limit", { maxTurns: 2 });
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    expect(engine.callCount).toBe(2);
    expectTokenExact(records, engine, goldScript(fix.task, entry.tools));
    expectToolCallsExecuted(records, report, entry.harness);
  }, 240_000);
});
