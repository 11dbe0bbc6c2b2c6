/**
 * What every harness test does (claude-code.test.ts is the model): a rollout
 * of one fixture task through the real proxy with a scripted engine, and the
 * token-for-token check of the recorded segments against the engine's replies.
 */
import { expect } from "vitest";
import type { RolloutRunner } from "../rollout/index.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import type { ScriptedEngine, ScriptedReply } from "../engine/index.ts";
import { checkSegment, qwen3 } from "../proxy/test-support.ts";
import type { SessionRecords } from "../proxy/index.ts";
import type { Task } from "../tasks/task.ts";
import { proxiedLauncher, scriptedHarnessEngine, type Harness, type ToolNames } from "./index.ts";

export interface HarnessRollout {
  outcome: Awaited<ReturnType<RolloutRunner["run"]>>;
  report: unknown;
  engine: ScriptedEngine;
  records: SessionRecords;
}

export async function harnessRollout(
  runner: RolloutRunner, fix: { task: TaskDefinition; image: string }, entry: { harness: Harness; tools: ToolNames },
  engineName: string, rolloutId: string, maxTurns = 8,
): Promise<HarnessRollout> {
  let engine: ScriptedEngine | undefined;
  let records: SessionRecords | undefined;
  const launcher = proxiedLauncher({
    harness: entry.harness,
    engineName,
    model: qwen3(),
    limits: { maxTurns, timeoutSec: 150 },
    engine: (model, def) => (engine = scriptedHarnessEngine(engineName, model, def, entry.tools)),
    onRecords: (_id, r) => (records = r),
  });
  const agent = await launcher.start({} as Task, fix.task, rolloutId);
  const outcome = await runner.run({ ...fix, rolloutId, agent: agent.program, proxySocket: agent.proxySocket, agentTimeoutSec: agent.agentTimeoutSec });
  const report = await agent.finish!(outcome);
  return { outcome, report, engine: engine!, records: records! };
}

/**
 * `mainSegments` main segments (one unless the harness rewrites its history)
 * whose turns' completions are, in order and id for id, the engine's replies
 * (past the script the engine answers "Done."), no policy token retokenised
 * anywhere, every model call a recorded turn, and no side thread: a hidden
 * call in a new version shows up here.
 */
export function expectTokenExact(records: SessionRecords, engine: ScriptedEngine, replies: ScriptedReply[], mainSegments = 1): void {
  const model = qwen3();
  const turns = new Map(records.turns.map((t) => [t.turn_id, t]));
  const main = records.segments.filter((s) => s.thread === "main");
  expect(main).toHaveLength(mainSegments);
  for (const s of records.segments) expect(checkSegment(s, turns).retokenizedPolicyTokens).toBe(0);
  const mainTurns = main.flatMap((seg) => seg.turns.map((span) => turns.get(span.turn_id)!));
  const expected = mainTurns.map((_, i) => replies[i] ?? { text: "Done." });
  expect(mainTurns.map((t) => Array.from(t.completion_ids))).toEqual(
    expected.map((r) => ("text" in r ? [...model.tokenizer.encode(r.text), model.codec.endOfTurnId] : r.token_ids)));
  expect(records.turns).toHaveLength(engine.callCount);
  expect(records.side_thread_ids).toEqual([]);
}
