/**
 * Health checks: a task is fit for training only if, through the real
 * stages, its gold solution scores 1 and doing nothing scores 0. A task that
 * fails either is quarantined with the reason and never handed to training.
 * Results are kept by task hash (task.ts taskHash) in the cache's
 * health.json, so an unchanged task is checked once; an env_error decides
 * nothing and is not kept.
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import {
  ensureBaseImage,
  ensureTaskImage,
  isSandboxEnvError,
  taskImageTag,
  type RolloutOutcome,
  type TaskDefinition,
} from "../sandbox/index.ts";
import type { RolloutRunner } from "../rollout/index.ts";
import { emptyAgent, oracleAgent, type AgentLauncher } from "./agents.ts";
import { taskHash, type Task } from "./task.ts";

/** One rollout's outcome, as reports show it. */
export interface RolloutSummary {
  status: RolloutOutcome["status"];
  reward: number | null;
  flags: string[];
  ms: number;
  envError?: string;
  /** What the agent's launcher said about the rollout when it finished (a harness's HarnessReport); absent for the oracle and the empty agent. */
  agentReport?: Record<string, unknown>;
}

export interface HealthResult {
  task: string;
  hash: string;
  image: string;
  healthy: boolean;
  /** Why the task is quarantined (absent when healthy). */
  reason?: string;
  gold?: RolloutSummary;
  empty?: RolloutSummary;
  /** When the check ran (ISO time). */
  at: string;
  /** Came from health.json rather than a run now. */
  cached: boolean;
}

/** health.json: task hash → last definitive result. Whole-file replace, so a reader never sees half a file. */
export class HealthStore {
  constructor(readonly file: string) {}

  private read(): Record<string, Omit<HealthResult, "cached">> {
    try {
      return JSON.parse(readFileSync(this.file, "utf8")) as Record<string, Omit<HealthResult, "cached">>;
    } catch {
      return {}; // nothing checked yet on this machine
    }
  }

  get(hash: string): HealthResult | undefined {
    const r = this.read()[hash];
    return r && { ...r, cached: true };
  }

  put(results: HealthResult[]): void {
    if (!results.length) return;
    const all = this.read();
    for (const { cached: _cached, ...r } of results) all[r.hash] = r;
    mkdirSync(dirname(this.file), { recursive: true });
    const tmp = `${this.file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(all, null, 1));
    renameSync(tmp, this.file);
  }
}

/** `ms` is the rollout's own stage time (setup + agent + grading), not time spent queued behind other rollouts. */
export function summarize(o: RolloutOutcome): RolloutSummary {
  const ms = Object.values(o.timingsMs).reduce((a, b) => a + (b ?? 0), 0);
  return {
    status: o.status,
    reward: o.reward,
    flags: o.defenseFlags,
    ms: Math.round(ms),
    ...(o.envError ? { envError: `${o.envError.kind}: ${o.envError.message}` } : {}),
  };
}

/** One rollout of `task` with `launcher`'s agent, through the runner's stages. */
export async function runRollout(runner: RolloutRunner, launcher: AgentLauncher, task: Task, def: TaskDefinition, image: string, rolloutId: string): Promise<RolloutSummary> {
  const agent = await launcher.start(task, def, rolloutId);
  let outcome: RolloutOutcome | undefined;
  let agentReport: Record<string, unknown> | void = undefined;
  try {
    outcome = await runner.run({
      task: def,
      image,
      rolloutId,
      agent: agent.program,
      proxySocket: agent.proxySocket,
      engineFault: agent.engineFault,
      ...(agent.agentTimeoutSec !== undefined ? { agentTimeoutSec: agent.agentTimeoutSec } : {}),
    });
  } finally {
    if (outcome) agentReport = await agent.finish?.(outcome);
    else await agent.abandon?.().catch(() => undefined); // the run's own error is the one to report
  }
  return { ...summarize(outcome), ...(agentReport ? { agentReport } : {}) };
}

const describe = (s: RolloutSummary) => (s.status === "env_error" ? `env_error (${s.envError})` : `${s.status}, reward ${s.reward}`);

export interface HealthCheckOptions {
  /** Check again even when health.json has a result for the task's hash. */
  force?: boolean;
  /** Progress lines (stderr in the CLI). */
  log?: (line: string) => void;
  /** Called with each result as it is decided. */
  onResult?: (r: HealthResult) => void;
}

/** The images of `defs`, built once each (tasks sharing an environment share one). */
async function imagesFor(defs: TaskDefinition[], baseTag: string, log: (l: string) => void): Promise<Map<TaskDefinition, { tag?: string; error?: string }>> {
  const byTag = new Map<string, Promise<{ tag?: string; error?: string }>>();
  const out = new Map<TaskDefinition, { tag?: string; error?: string }>();
  for (const def of defs) {
    const tag = taskImageTag(def, baseTag);
    if (!byTag.has(tag)) {
      // Sequential builds: on 2 cores concurrent image builds only slow each other down.
      const prev = [...byTag.values()].at(-1) ?? Promise.resolve({});
      byTag.set(tag, prev.then(async () => {
        try {
          const img = await ensureTaskImage(def, baseTag, { allowQuarantined: true, log });
          if (!img.cached) log(`built ${img.tag} in ${Math.round(img.buildMs)} ms`);
          return { tag: img.tag };
        } catch (e) {
          if (!isSandboxEnvError(e)) throw e;
          return { error: e.message };
        }
      }));
    }
    out.set(def, await byTag.get(tag)!);
  }
  return out;
}

/**
 * Checks every task (gold must score 1, empty 0), `runner.config.concurrency`
 * rollouts at a time, and keeps each definitive result in `store`.
 */
export async function checkHealth(tasks: Task[], runner: RolloutRunner, store: HealthStore, opts: HealthCheckOptions = {}): Promise<HealthResult[]> {
  const log = opts.log ?? (() => {});
  const base = await ensureBaseImage(undefined, log);
  const defs = await Promise.all(tasks.map((t) => t.definition()));
  const images = await imagesFor(defs, base.tag, log);
  const results = await Promise.all(
    tasks.map(async (task, i): Promise<HealthResult> => {
      const def = defs[i]!;
      const hash = taskHash(def, base.tag);
      const at = new Date().toISOString();
      const img = images.get(def)!;
      const done = (r: HealthResult, keep: boolean) => {
        if (keep) store.put([r]);
        opts.onResult?.(r);
        return r;
      };
      if (!opts.force) {
        const hit = store.get(hash);
        if (hit) return done(hit, false);
      }
      if (!img.tag) return done({ task: task.id, hash, image: "", healthy: false, reason: `image build failed: ${img.error}`, at, cached: false }, false);
      if (!def.solveScript) return done({ task: task.id, hash, image: img.tag, healthy: false, reason: "no solution/solve.sh to check against", at, cached: false }, true);
      const rid = `health-${hash.slice(0, 10)}`;
      const [gold, empty] = await Promise.all([
        runRollout(runner, oracleAgent, task, def, img.tag, `${rid}-gold`),
        runRollout(runner, emptyAgent, task, def, img.tag, `${rid}-empty`),
      ]);
      const problems: string[] = [];
      if (gold.status !== "ok" || gold.reward !== 1) problems.push(`gold solution must score 1, got ${describe(gold)}`);
      if (empty.status !== "ok" || empty.reward !== 0) problems.push(`empty patch must score 0, got ${describe(empty)}`);
      const envError = gold.status === "env_error" || empty.status === "env_error";
      const r: HealthResult = {
        task: task.id,
        hash,
        image: img.tag,
        healthy: problems.length === 0,
        ...(problems.length ? { reason: problems.join("; ") } : {}),
        gold,
        empty,
        at,
        cached: false,
      };
      log(`${task.id}: ${r.healthy ? "healthy" : `quarantined: ${r.reason}`}`);
      return done(r, !envError);
    }),
  );
  return results;
}

/** The tasks training may use: those whose last health check passed (unchecked and quarantined ones are left out). */
export async function healthyOnly(tasks: Task[], store: HealthStore): Promise<{ healthy: Task[]; quarantined: HealthResult[]; unchecked: Task[] }> {
  const base = await ensureBaseImage();
  const healthy: Task[] = [];
  const quarantined: HealthResult[] = [];
  const unchecked: Task[] = [];
  for (const t of tasks) {
    const r = store.get(taskHash(await t.definition(), base.tag));
    if (!r) unchecked.push(t);
    else if (r.healthy) healthy.push(t);
    else quarantined.push(r);
  }
  return { healthy, quarantined, unchecked };
}
