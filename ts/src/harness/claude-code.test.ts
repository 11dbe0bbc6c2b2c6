/**
 * Claude Code, the real unmodified binary from the mounted runtime, in a real
 * sandbox through the real proxy, driven by scripted engines that call its own
 * tools (Read, Edit, Bash): gold scores 1, an answer at once 0, the main
 * thread's segment holds exactly the engine's tokens, any hidden call would
 * reach the proxy as a side thread, and the tool calls the proxy recorded are,
 * call by call, the ones its stream-json says it executed.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import { ANSWER_AT_ONCE, CLAUDE_CODE_VERSION, HARNESS_TOOLS, RUNTIMES_DIR, goldScript } from "./index.ts";
import { editKindsFixture, expectTokenExact, expectToolCallsExecuted, harnessRollout } from "./test-support.ts";

const entry = HARNESS_TOOLS["claude-code"]!;

describe("Claude Code in a real sandbox through the real proxy", () => {
  let fix: { task: TaskDefinition; image: string };
  let runner: RolloutRunner;
  beforeAll(async () => {
    // scripts/setup builds the runtimes; a missing one fails here, never skips.
    expect(existsSync(join(RUNTIMES_DIR, "harness/node_modules/@anthropic-ai/claude-code-linux-x64/claude")), `no Claude Code runtime in ${RUNTIMES_DIR}: run scripts/setup`).toBe(true);
    fix = await editKindsFixture();
    runner = await RolloutRunner.create({ maxAttempts: 1, runtimes: entry.harness.runtimes() });
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  it(`scripted-gold (claude-code ${CLAUDE_CODE_VERSION}): Read, then Edit per hunk, Edit creates, Bash removes, a plain answer ends it; reward 1`, async () => {
    const { outcome, report, engine, records, session } = await harnessRollout(runner, fix, entry, "scripted-gold", "claude-gold");
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 1, defenseFlags: [] });
    const replies = goldScript(fix.task, entry.tools);
    expect(report).toMatchObject({ harness: "claude-code", exitCode: 0, segments: 1, side_threads: 0, finalMessage: (replies.at(-1) as { text: string }).text });
    // Under -p --bare, 2.1.332 makes no hidden call (no title, no quota probe): one appearing would fail here.
    expectTokenExact(records, engine, replies);
    expectToolCallsExecuted(records, report, entry.harness);
    expect(report.toolCalls.map((c) => c.name)).toEqual(["Read", "Edit", "Edit", "Bash", "Edit"]);
    // Its Read comes before the file's first Edit: not a re-read after edit.
    expect(session).toMatchObject({ toolCalls: 5, rereadsAfterEdit: 0 });
  }, 240_000);

  it("answer-at-once: one plain answer, nothing changed; reward 0", async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "answer-at-once", "claude-answer");
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    expect(report).toMatchObject({ exitCode: 0, toolCalls: [], finalMessage: (ANSWER_AT_ONCE[0] as { text: string }).text });
    expectTokenExact(records, engine, ANSWER_AT_ONCE);
    expectToolCallsExecuted(records, report, entry.harness);
  }, 240_000);
});
