/**
 * Codex CLI, the real unmodified binary from the mounted runtime, in a real
 * sandbox through the real proxy, driven by scripted engines: the gold patch
 * goes through its own apply_patch (in its patch format, via exec_command,
 * which it intercepts: codex-patch.ts), gold scores 1, an answer at once 0,
 * the main thread's segment holds exactly the engine's tokens, and the calls
 * the proxy recorded are, call by call, the file_change items its --json
 * stream says its apply_patch engine applied.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import { ANSWER_AT_ONCE, CODEX_VERSION, HARNESS_TOOLS, RUNTIMES_DIR, goldScript } from "./index.ts";
import { editKindsFixture, expectTokenExact, expectToolCallsExecuted, harnessRollout } from "./test-support.ts";

const entry = HARNESS_TOOLS.codex!;

describe("Codex CLI in a real sandbox through the real proxy", () => {
  let fix: { task: TaskDefinition; image: string };
  let runner: RolloutRunner;
  beforeAll(async () => {
    // scripts/setup builds the runtimes; a missing one fails here, never skips.
    expect(existsSync(join(RUNTIMES_DIR, "harness/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex")), `no Codex CLI runtime in ${RUNTIMES_DIR}: run scripts/setup`).toBe(true);
    fix = await editKindsFixture();
    runner = await RolloutRunner.create({ maxAttempts: 1, runtimes: entry.harness.runtimes() });
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  it(`scripted-gold (codex ${CODEX_VERSION}): one apply_patch per hunk, new file and removal, a plain answer ends it; reward 1`, async () => {
    const { outcome, report, engine, records, session } = await harnessRollout(runner, fix, entry, "scripted-gold", "codex-gold");
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 1, defenseFlags: [] });
    const replies = goldScript(fix.task, entry.tools);
    expect(report).toMatchObject({ harness: "codex", exitCode: 0, segments: 1, side_threads: 0, finalMessage: (replies.at(-1) as { text: string }).text });
    // 0.171.0 under exec makes no hidden call (no title, no compaction on these short runs).
    expectTokenExact(records, engine, replies);
    expectToolCallsExecuted(records, report, entry.harness);
    expect(report.toolCalls.map((c) => c.arguments)).toEqual([
      { changes: [{ path: "/workspace/clamp.py", kind: "update" }] },
      { changes: [{ path: "/workspace/clamp.py", kind: "update" }] },
      { changes: [{ path: "/workspace/legacy.py", kind: "delete" }] },
      { changes: [{ path: "/workspace/units.py", kind: "add" }] },
    ]);
    expect(session).toMatchObject({ toolCalls: 4, rereadsAfterEdit: 0 });
  }, 240_000);

  it("answer-at-once: one plain answer, nothing changed; reward 0", async () => {
    const { outcome, report, engine, records } = await harnessRollout(runner, fix, entry, "answer-at-once", "codex-answer");
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    expect(report).toMatchObject({ exitCode: 0, toolCalls: [], finalMessage: (ANSWER_AT_ONCE[0] as { text: string }).text });
    expectTokenExact(records, engine, ANSWER_AT_ONCE);
    expectToolCallsExecuted(records, report, entry.harness);
  }, 240_000);
});
