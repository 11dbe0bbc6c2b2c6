/**
 * What every harness test does: a rollout of a fixture task through the real
 * proxy with a scripted engine; the token-for-token check of the recorded
 * segments against the engine's replies; and the call-by-call check of the
 * tool calls the proxy recorded against those the harness's own record says
 * it executed.
 */
import { fileURLToPath } from "node:url";
import { expect } from "vitest";
import type { RolloutRunner, SessionRecords as RolloutSessionRecords } from "../rollout/index.ts";
import { ensureBaseImage, ensureTaskImage, loadTask, type TaskDefinition } from "../sandbox/index.ts";
import type { ScriptedEngine, ScriptedReply } from "../engine/index.ts";
import { checkSegment, qwen3 } from "../proxy/test-support.ts";
import type { SessionRecords } from "../proxy/index.ts";
import type { Task } from "../tasks/task.ts";
import { proxiedLauncher, proxyToolCalls, scriptedHarnessEngine, scriptedToolEngine, SIDE_REPLY, type Harness, type HarnessReport, type ToolNames } from "./index.ts";

/**
 * The harness tests' task: a gold patch (made by git) with every kind of
 * change scripted-gold says through an editor — two hunks in clamp.py, the
 * first not unique until widened, a new file, a removed file.
 */
export const EDIT_KINDS_TASK = fileURLToPath(new URL("./fixtures/tasks/edit-kinds", import.meta.url));

export async function editKindsFixture(): Promise<{ task: TaskDefinition; image: string }> {
  const base = await ensureBaseImage();
  const task = loadTask(EDIT_KINDS_TASK);
  return { task, image: (await ensureTaskImage(task, base.tag)).tag };
}

export interface HarnessRolloutResult {
  outcome: Awaited<ReturnType<RolloutRunner["run"]>>;
  report: HarnessReport;
  engine: ScriptedEngine;
  records: SessionRecords;
  /** The records as the rollout worker builds the Trajectory from them. */
  session: RolloutSessionRecords;
}

/** `opts.script`: replies to play instead of the named engine's (the name then only labels the rollout). */
export async function harnessRollout(
  runner: RolloutRunner, fix: { task: TaskDefinition; image: string }, entry: { harness: Harness; tools: ToolNames },
  engineName: string, rolloutId: string, opts: { maxTurns?: number; timeoutSec?: number; script?: ScriptedReply[] } = {},
): Promise<HarnessRolloutResult> {
  let engine: ScriptedEngine | undefined;
  let records: SessionRecords | undefined;
  const launcher = proxiedLauncher({
    harness: entry.harness,
    engineName,
    model: qwen3(),
    limits: { maxTurns: opts.maxTurns ?? 8, timeoutSec: opts.timeoutSec ?? 150 },
    engine: (model, def) => (engine = opts.script ? scriptedToolEngine(model, opts.script) : scriptedHarnessEngine(engineName, model, def, entry.tools)),
    onRecords: (_id, r) => (records = r),
  });
  const agent = await launcher.start({} as Task, fix.task, rolloutId);
  const outcome = await runner.run({ ...fix, rolloutId, agent: agent.program, proxySocket: agent.proxySocket, agentTimeoutSec: agent.agentTimeoutSec });
  const report = await agent.finish(outcome);
  return { outcome, report, engine: engine!, records: records!, session: agent.session!() };
}

/**
 * `mainSegments` main segments (one unless the harness rewrites its history)
 * whose turns' completions are, in order and id for id, the engine's replies
 * (past the script the engine answers "Done."), no policy token retokenised
 * anywhere, and every model call a recorded turn. Side threads: none, or (a
 * harness's title call) each its own segment holding the engine's side reply.
 */
export function expectTokenExact(
  records: SessionRecords, engine: ScriptedEngine, replies: ScriptedReply[], opts: { mainSegments?: number; sideThreads?: "none" | "title" } = {},
): void {
  const model = qwen3();
  const encoded = (r: ScriptedReply) => ("text" in r ? [...model.tokenizer.encode(r.text), model.codec.endOfTurnId] : r.token_ids);
  const turns = new Map(records.turns.map((t) => [t.turn_id, t]));
  const main = records.segments.filter((s) => s.thread === "main");
  expect(main).toHaveLength(opts.mainSegments ?? 1);
  for (const s of records.segments) expect(checkSegment(s, turns).retokenizedPolicyTokens).toBe(0);
  const mainTurns = main.flatMap((seg) => seg.turns.map((span) => turns.get(span.turn_id)!));
  expect(mainTurns.map((t) => Array.from(t.completion_ids))).toEqual(mainTurns.map((_, i) => encoded(replies[i] ?? { text: "Done." })));
  expect(records.turns).toHaveLength(engine.callCount);
  const side = records.segments.filter((s) => s.thread !== "main");
  if ((opts.sideThreads ?? "none") === "none") expect(records.side_thread_ids).toEqual([]);
  else expect(side.length).toBeGreaterThanOrEqual(1);
  for (const s of side) {
    expect(records.side_thread_ids).toContain(s.thread_id);
    for (const span of s.turns) expect(Array.from(turns.get(span.turn_id)!.completion_ids)).toEqual(encoded({ text: SIDE_REPLY }));
  }
}

/**
 * Call by call: the tool calls the proxy recorded on the main thread (parsed
 * from the engine's completion tokens), mapped to the harness's own record's
 * names and argument forms, equal the calls that record says it executed —
 * each of them successful — and the report agrees and read the record whole.
 */
export function expectToolCallsExecuted(records: SessionRecords, report: HarnessReport, harness: Harness): void {
  const made = proxyToolCalls(records, qwen3()).map((c) => harness.record.asExecuted?.(c) ?? c);
  expect(report.toolCalls.map(({ name, arguments: args }) => ({ name, arguments: args }))).toEqual(made);
  expect(report.toolCalls.filter((c) => c.ok === false)).toEqual([]);
  expect(report.toolCallMismatches).toEqual([]);
  expect(report.notes).toEqual([]);
}
