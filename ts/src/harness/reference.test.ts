/**
 * The reference harness, for real: the agent in a real sandbox, through the
 * real proxy, driven by scripted engines. Gold scores 1, an answer at once 0,
 * the segments hold exactly the engine's tokens, and the tool results the
 * proxy saw come from the tools the engine called.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImage, fixtureImages, leftoverContainers } from "../sandbox/test-support.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import type { ScriptedEngine, ScriptedReply } from "../engine/index.ts";
import { checkSegment, qwen3 } from "../proxy/test-support.ts";
import type { SessionRecords } from "../proxy/index.ts";
import type { Task } from "../tasks/task.ts";
import { HARNESS_TOOLS, goldScript, proxiedLauncher, referenceHarness, scriptedHarnessEngine, ANSWER_AT_ONCE } from "./index.ts";

beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("reference harness in a real sandbox through the real proxy", () => {
  let fix: { task: TaskDefinition; image: string };
  let runner: RolloutRunner;
  beforeAll(async () => {
    const f = await fixtureImage("fix-add");
    fix = { task: f.task, image: f.image.tag };
    runner = await RolloutRunner.create({ maxAttempts: 1 });
  });
  afterAll(async () => {
    await runner.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  async function rollout(engineName: string, rolloutId: string) {
    let engine: ScriptedEngine | undefined;
    let records: SessionRecords | undefined;
    const launcher = proxiedLauncher({
      harness: referenceHarness,
      engineName,
      model: qwen3(),
      limits: { maxTurns: 8, timeoutSec: 120 },
      engine: (model, def) => (engine = scriptedHarnessEngine(engineName, model, def, HARNESS_TOOLS.reference!.tools)),
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
    expect(records.segments).toHaveLength(1);
    expect(checkSegment(records.segments[0]!, turns).retokenizedPolicyTokens).toBe(0);
    // Each completion is the engine's reply, token for token (text + end of turn).
    expect(records.turns.map((t) => Array.from(t.completion_ids))).toEqual(
      replies.slice(0, records.turns.length).map((r) => ("text" in r ? [...model.tokenizer.encode(r.text), model.codec.endOfTurnId] : r.token_ids)));
    expect(records.turns).toHaveLength(engine.callCount);
    expect(records.side_thread_ids).toEqual([]);
  }

  it("scripted-gold: writes the gold script with write_file, runs it with bash, submits; reward 1", async () => {
    const { outcome, report, engine, records } = await rollout("scripted-gold", "ref-gold");
    expect(outcome).toMatchObject({ status: "ok", reward: 1, defenseFlags: [] });
    expect(report).toMatchObject({ harness: "reference", turns: 3 });
    expectTokenExact(records, engine, goldScript(fix.task, HARNESS_TOOLS.reference!.tools));
    // What ran: the tool results the agent sent back on the next calls.
    const prompt = (i: number) => qwen3().tokenizer.decode(Array.from(engine.prompts[i]!));
    expect(prompt(1)).toMatch(/wrote \d+ characters to \/tmp\/lego-gold\/solve\.sh/);
    expect(prompt(2)).toContain("exit code 0");
  }, 180_000);

  it("answer-at-once: one plain answer, nothing changed; reward 0", async () => {
    const { outcome, report, engine, records } = await rollout("answer-at-once", "ref-answer");
    expect(outcome).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    expect(report).toMatchObject({ turns: 1 });
    expectTokenExact(records, engine, ANSWER_AT_ONCE);
  }, 180_000);
});
