/**
 * OpenCode, the real unmodified binary from the mounted runtime, in a real
 * sandbox through the real proxy, driven by scripted engines that call its own
 * tools (write, bash): gold scores 1, an answer at once 0, the main thread's
 * segment holds exactly the engine's tokens, and its title call reaches the
 * proxy as a side thread of its own.
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
import { ANSWER_AT_ONCE, HARNESS_TOOLS, OPENCODE_VERSION, RUNTIMES_DIR, SIDE_REPLY, goldScript, proxiedLauncher, scriptedHarnessEngine } from "./index.ts";

const entry = HARNESS_TOOLS.opencode!;
/**
 * At start OpenCode's Vcs service finds the default branch with `git for-each-ref
 * refs/heads`, which the sandbox's git shim counts as a history probe (monitoring
 * only, reward unchanged). No config turns that service off; the detector stays as it is.
 */
const OPENCODE_GIT_FLAG = "git_history_probe";
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("OpenCode in a real sandbox through the real proxy", () => {
  let fix: { task: TaskDefinition; image: string };
  let runner: RolloutRunner;
  beforeAll(async () => {
    // scripts/setup builds the runtimes; a missing one fails here, never skips.
    expect(existsSync(join(RUNTIMES_DIR, "harness/node_modules/opencode-linux-x64/bin/opencode")), `no OpenCode runtime in ${RUNTIMES_DIR}: run scripts/setup`).toBe(true);
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
      // OpenCode takes 30 s a rollout on an idle host and 150 s at load 20 on 2 cores: the bound leaves room for that.
      limits: { maxTurns: 8, timeoutSec: 400 },
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
    const encoded = (text: string) => [...model.tokenizer.encode(text), model.codec.endOfTurnId];
    const turns = new Map(records.turns.map((t) => [t.turn_id, t]));
    const main = records.segments.filter((s) => s.thread === "main");
    expect(main).toHaveLength(1);
    for (const s of records.segments) expect(checkSegment(s, turns).retokenizedPolicyTokens).toBe(0);
    const mainTurns = main[0]!.turns.map((span) => turns.get(span.turn_id)!);
    expect(mainTurns.map((t) => Array.from(t.completion_ids))).toEqual(replies.slice(0, mainTurns.length).map((r) => ("text" in r ? encoded(r.text) : r.token_ids)));
    expect(mainTurns).toHaveLength(replies.length);
    // The title call: a side thread, its own segment, the engine's plain reply token for token.
    const side = records.segments.filter((s) => s.thread !== "main");
    expect(side.length).toBeGreaterThanOrEqual(1);
    for (const s of side) {
      expect(records.side_thread_ids).toContain(s.thread_id);
      for (const span of s.turns) expect(Array.from(turns.get(span.turn_id)!.completion_ids)).toEqual(encoded(SIDE_REPLY));
    }
    expect(records.turns).toHaveLength(engine.callCount);
  }

  it(`scripted-gold (opencode ${OPENCODE_VERSION}): write creates the gold files, bash runs solve.sh, a plain answer ends it; reward 1`, async () => {
    const { outcome, report, engine, records } = await rollout("scripted-gold", "opencode-gold");
    expect(outcome).toMatchObject({ status: "ok", reward: 1, defenseFlags: [OPENCODE_GIT_FLAG] });
    const replies = goldScript(fix.task, entry.tools);
    expect(report).toMatchObject({ harness: "opencode", segments: 1 + records.side_thread_ids.length });
    expectTokenExact(records, engine, replies);
    // What ran: OpenCode sent the tool results back on the next calls.
    const prompt = (i: number) => qwen3().tokenizer.decode(Array.from(engine.prompts[i]!));
    const last = [...engine.prompts.keys()].map(prompt).filter((p) => p.includes("<tools>")).at(-1)!;
    expect(last.match(/<tool_response>/g)).toHaveLength(replies.length - 1);
    expect(records.counters.tool_calls).toBe(replies.length - 1);
  }, 480_000);

  it("answer-at-once: one plain answer, nothing changed; reward 0", async () => {
    const { outcome, engine, records } = await rollout("answer-at-once", "opencode-answer");
    expect(outcome).toMatchObject({ status: "ok", reward: 0, defenseFlags: [OPENCODE_GIT_FLAG] });
    expectTokenExact(records, engine, ANSWER_AT_ONCE);
    expect(records.counters.tool_calls).toBe(0);
  }, 480_000);
});
