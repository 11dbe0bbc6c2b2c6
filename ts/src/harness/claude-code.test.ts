/**
 * Claude Code, the real unmodified binary from the mounted runtime, in a real
 * sandbox through the real proxy, driven by scripted engines that call its own
 * tools (Write, Bash): gold scores 1, an answer at once 0, the main thread's
 * segments hold exactly the engine's tokens, and any hidden call it makes
 * reaches the proxy as a side thread, never inside the main segment.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImage, fixtureImages, leftoverContainers } from "../sandbox/test-support.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import type { ScriptedEngine, ScriptedReply } from "../engine/index.ts";
import { checkSegment, qwen3 } from "../proxy/test-support.ts";
import type { SessionRecords } from "../proxy/index.ts";
import type { Task } from "../tasks/task.ts";
import { ANSWER_AT_ONCE, CLAUDE_CODE_VERSION, HARNESS_TOOLS, RUNTIMES_DIR, goldScript, proxiedLauncher, scriptedHarnessEngine } from "./index.ts";

const entry = HARNESS_TOOLS["claude-code"]!;
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("Claude Code in a real sandbox through the real proxy", () => {
  let fix: { task: TaskDefinition; image: string };
  let runner: RolloutRunner;
  beforeAll(async () => {
    // scripts/setup builds the runtimes; a missing one fails here, never skips.
    expect(existsSync(join(RUNTIMES_DIR, "harness/node_modules/@anthropic-ai/claude-code-linux-x64/claude")), `no Claude Code runtime in ${RUNTIMES_DIR}: run scripts/setup`).toBe(true);
    const f = await fixtureImage("fix-add");
    fix = { task: f.task, image: f.image.tag };
    runner = await RolloutRunner.create({ maxAttempts: 1, runtimes: entry.harness.runtimes() });
  });
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  async function rollout(engineName: string, rolloutId: string) {
    let engine: ScriptedEngine | undefined;
    let records: SessionRecords | undefined;
    const launcher = proxiedLauncher({
      harness: entry.harness,
      engineName,
      model: qwen3(),
      limits: { maxTurns: 8, timeoutSec: 150 },
      engine: (model, def) => (engine = scriptedHarnessEngine(engineName, model, def, entry.tools)),
      onRecords: (_id, r) => (records = r),
    });
    const agent = await launcher.start({} as Task, fix.task, rolloutId);
    const outcome = await runner.run({ ...fix, rolloutId, agent: agent.program, proxySocket: agent.proxySocket, agentTimeoutSec: agent.agentTimeoutSec });
    const report = await agent.finish!(outcome);
    return { outcome, report, engine: engine!, records: records! };
  }

  function expectTokenExact(records: SessionRecords, engine: ScriptedEngine, replies: ScriptedReply[]) {
    const model = qwen3();
    const turns = new Map(records.turns.map((t) => [t.turn_id, t]));
    const main = records.segments.filter((s) => s.thread === "main");
    expect(main).toHaveLength(1);
    for (const s of records.segments) expect(checkSegment(s, turns).retokenizedPolicyTokens).toBe(0);
    // Hidden calls (title generation and the like) are side threads, each its own segment.
    for (const s of records.segments.filter((s) => s.thread !== "main")) expect(records.side_thread_ids).toContain(s.thread_id);
    const mainTurns = main[0]!.turns.map((span) => turns.get(span.turn_id)!);
    expect(mainTurns.map((t) => Array.from(t.completion_ids))).toEqual(
      replies.slice(0, mainTurns.length).map((r) => ("text" in r ? [...model.tokenizer.encode(r.text), model.codec.endOfTurnId] : r.token_ids)));
    expect(records.turns).toHaveLength(engine.callCount);
    // Under -p --bare, 2.1.332 makes no hidden call (no title, no quota probe): were one to
    // appear it would be a side thread above, and this line says it is new.
    expect(records.side_thread_ids).toEqual([]);
  }

  it(`scripted-gold (claude-code ${CLAUDE_CODE_VERSION}): Edit creates the gold files, Bash runs solve.sh, a plain answer ends it; reward 1`, async () => {
    const { outcome, report, engine, records } = await rollout("scripted-gold", "claude-gold");
    expect(outcome).toMatchObject({ status: "ok", reward: 1, defenseFlags: [] });
    const replies = goldScript(fix.task, entry.tools);
    expect(report).toMatchObject({ harness: "claude-code", segments: 1 + records.side_thread_ids.length });
    expectTokenExact(records, engine, replies);
    // What ran: Claude Code sent the tool results back as tool_result blocks on the next calls.
    const prompt = (i: number) => qwen3().tokenizer.decode(Array.from(engine.prompts[i]!));
    expect(prompt(1)).toMatch(/<tool_response>\n[^]*\/tmp\/lego-gold\/solve\.sh/);
    expect(records.counters.tool_calls).toBe(replies.length - 1);
  }, 240_000);

  it("answer-at-once: one plain answer, nothing changed; reward 0", async () => {
    const { outcome, engine, records } = await rollout("answer-at-once", "claude-answer");
    expect(outcome).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    expectTokenExact(records, engine, ANSWER_AT_ONCE);
    expect(records.counters.tool_calls).toBe(0);
  }, 240_000);
});
