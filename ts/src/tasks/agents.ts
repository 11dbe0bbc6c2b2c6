/**
 * The seam between `lego eval` and whatever acts in a rollout's agent stage.
 * An AgentLauncher turns a task into an agent program for one rollout (and
 * whatever it needs around it: a proxy session, an engine); the oracle and
 * the empty agent need nothing. Harness adapters (ts/src/harness/) register a
 * factory here under their name, so `--harness H --engine E` finds them.
 */
import type { RolloutRunnerConfig, SessionRecords } from "../rollout/index.ts";
import { oracleProgram, type AgentProgram, type RolloutOutcome, type TaskDefinition } from "../sandbox/index.ts";
import { TaskSourceError } from "./errors.ts";
import type { Task } from "./task.ts";
import type { RoutingShape } from "../schema/index.ts";

/** What one rollout's agent stage runs, and how to tear it down. */
export interface AgentRollout {
  program: AgentProgram;
  /** The proxy session's Unix socket, when the agent talks to a model. */
  proxySocket?: string;
  /** The proxy session's report of an inference-engine failure (see RolloutRequest.engineFault). */
  engineFault?: () => string | undefined;
  /** Overrides the task's [agent] timeout_sec (a harness's own wall-clock limit). */
  agentTimeoutSec?: number;
  /** What the proxy session recorded (segments, counters), read once the rollout ended; absent = no model calls (oracle, empty). */
  session?: () => SessionRecords;
  /** Called once the rollout ended: close the session, return what the harness reported (turns, tool calls). */
  finish?: (outcome: RolloutOutcome) => Promise<Record<string, unknown> | void>;
  /** Called instead of `finish` when the run threw before an outcome: frees what `start` took (the proxy session's server). */
  abandon?: () => Promise<void>;
}

export interface AgentLauncher {
  /** Shown in reports: `oracle`, `empty`, `reference/scripted-gold`. */
  readonly name: string;
  /** What the rollout runner needs for this agent, e.g. the harness runtimes to mount; `lego eval` merges it into its runner. */
  readonly runner?: Partial<RolloutRunnerConfig>;
  start(task: Task, def: TaskDefinition, rolloutId: string): Promise<AgentRollout>;
  /** The policy version the launcher's engine samples new rollouts with; the rollout worker's staleness bound needs it. */
  samplingVersion?(): number;
  /** The routing shape of the segments its engine records (MoE); null or absent when they carry none. */
  readonly routing?: RoutingShape | null;
  /** A launcher over several harnesses (`--harness a=0.5,b=0.5`): the one that runs every rollout of this group. */
  forGroup?(groupId: string): AgentLauncher;
  close?(): Promise<void>;
}

export interface HarnessOptions {
  harness: string;
  /** A scripted engine's name, or a real engine's address (tcp://HOST:PORT, ipc://PATH, unix:///PATH). */
  engine: string;
  /** With an engine address: the model directory the engine serves (the proxy's tokenizer and chat template). */
  modelDir?: string | null;
  /** With an engine address: how every turn samples (harness/policy-engine.ts). */
  sampling?: { temperature: number; maxTokensPerTurn: number };
  /** The harness's own limits (model calls, agent-stage wall clock). */
  limits?: { maxTurns?: number; timeoutSec?: number };
  /** With an engine address: how long a turn (and the first connection) waits for an engine that is away. */
  engineWaitMs?: number;
}

export type HarnessFactory = (opts: HarnessOptions) => Promise<AgentLauncher>;

const harnesses = new Map<string, HarnessFactory>();

/** Called by a harness adapter module to make `lego eval --harness NAME` find it. */
export function registerHarness(name: string, factory: HarnessFactory): void {
  harnesses.set(name, factory);
}

export function registeredHarnesses(): string[] {
  return [...harnesses.keys()].sort();
}

export async function harnessLauncher(opts: HarnessOptions): Promise<AgentLauncher> {
  const factory = harnesses.get(opts.harness);
  if (!factory) {
    const known = registeredHarnesses();
    throw new TaskSourceError("--harness", opts.harness, `no harness adapter registered under this name (${known.length ? `known: ${known.join(", ")}` : "none are registered yet"}); --oracle and --empty need none`);
  }
  return factory(opts);
}

/** Applies the gold solution (Harbor's oracle: solution/ at /solution, `bash /solution/solve.sh`). */
export const oracleAgent: AgentLauncher = {
  name: "oracle",
  async start(task, def) {
    const program = oracleProgram(def);
    if (!program) throw new TaskSourceError(task.source, task.id, "has no solution/solve.sh: the oracle has nothing to apply");
    return { program };
  },
};

/** Does nothing: every healthy task must score 0. */
export const emptyAgent: AgentLauncher = {
  name: "empty",
  async start() {
    return { program: { script: "true" } };
  },
};
