/**
 * OpenCode, the real unmodified binary from the mounted runtime, in a real
 * sandbox through the real proxy, driven by scripted engines that call its own
 * tools (edit, write, bash): gold scores 1, an answer at once 0, the main
 * thread's segment holds exactly the engine's tokens, its title call reaches
 * the proxy as a side thread of its own, and the tool calls the proxy recorded
 * are, call by call, the ones its JSON event stream says it ran.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import { ANSWER_AT_ONCE, HARNESS_TOOLS, OPENCODE_VERSION, RUNTIMES_DIR, goldScript } from "./index.ts";
import { editKindsFixture, expectTokenExact, expectToolCallsExecuted, harnessRollout } from "./test-support.ts";

const entry = HARNESS_TOOLS.opencode!;
/**
 * At start OpenCode's Vcs service finds the default branch with `git for-each-ref
 * refs/heads`, which the sandbox's git shim counts as a history probe (monitoring
 * only, reward unchanged). No config turns that service off; the detector stays as it is.
 */
const OPENCODE_GIT_FLAG = "git_history_probe";
/** OpenCode takes 30 s a rollout on an idle host and 150 s at load 20 on 2 cores: the bound leaves room for that. */
const LIMITS = { timeoutSec: 400 };

describe("OpenCode in a real sandbox through the real proxy", () => {
  let fix: { task: TaskDefinition; image: string };
  let runner: RolloutRunner;
  beforeAll(async () => {
    // scripts/setup builds the runtimes; a missing one fails here, never skips.
    expect(existsSync(join(RUNTIMES_DIR, "harness/node_modules/opencode-linux-x64/bin/opencode")), `no OpenCode runtime in ${RUNTIMES_DIR}: run scripts/setup`).toBe(true);
    fix = await editKindsFixture();
    runner = await RolloutRunner.create({ maxAttempts: 1, runtimes: entry.harness.runtimes() });
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  it(`scripted-gold (opencode ${OPENCODE_VERSION}): edit per hunk, bash removes, write creates, a plain answer ends it; reward 1`, async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "scripted-gold", "opencode-gold", LIMITS);
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 1, defenseFlags: [OPENCODE_GIT_FLAG] });
    const replies = goldScript(fix.task, entry.tools);
    expect(report).toMatchObject({ harness: "opencode", exitCode: 0, segments: 1 + records.side_thread_ids.length, finalMessage: (replies.at(-1) as { text: string }).text });
    expectTokenExact(records, engine, replies, { sideThreads: "title" });
    expectToolCallsExecuted(records, report, entry.harness);
    expect(report.toolCalls.map((c) => c.name)).toEqual(["edit", "edit", "bash", "write"]);
  }, 480_000);

  it("answer-at-once: one plain answer, nothing changed; reward 0", async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "answer-at-once", "opencode-answer", LIMITS);
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 0, defenseFlags: [OPENCODE_GIT_FLAG] });
    expect(report).toMatchObject({ exitCode: 0, toolCalls: [], finalMessage: (ANSWER_AT_ONCE[0] as { text: string }).text });
    expectTokenExact(records, engine, ANSWER_AT_ONCE, { sideThreads: "title" });
    expectToolCallsExecuted(records, report, entry.harness);
  }, 480_000);
});
