/**
 * The worker loop: for each task a group of G rollouts (each attempt a fresh
 * agent launch and proxy session, so a retry never inherits a broken one),
 * the group shipped through the data plane once all G are final, each
 * rollout turned into a Trajectory by buildTrajectory at that moment (so its
 * `stale` flag is judged against the trainer's newest version as it ships).
 * A rollout that ends in env_error is retried up to `maxAttempts`; after that
 * the group ships without it and its `group_shipped` event says how many were
 * dropped. Everything a person or the monitor sees goes through RolloutEvents.
 *
 * Stopping (`opts.stop`, aborted on SIGTERM by the CLI): no group and no attempt
 * starts after the abort, a group whose rollouts were cut short does not ship
 * (its rollouts run again, under the same ids, when the run resumes from its
 * journal), and the loop returns once the attempts in flight have ended, with
 * `stopped` set. Ending those attempts fast is the caller's part (it removes
 * the run's containers, so their next Docker call fails).
 */
import type { RoutingShape, TokenCounts, Trajectory } from "../schema/index.ts";
import { ConcurrencyLimit, ensureBaseImage, ensureTaskImage, isSandboxEnvError, type EnvErrorKind, type RolloutOutcome, type TaskDefinition } from "../sandbox/index.ts";
import type { AgentLauncher, Task } from "../tasks/index.ts";
import type { RolloutEvents } from "./events.ts";
import type { DockerHosts } from "./hosts.ts";
import type { RunJournal } from "./journal.ts";
import type { RolloutRunner } from "./runner.ts";
import { overLengthReason, type LengthPolicy } from "./over-length.ts";
import { mayStartRollout, type StalenessBound } from "./staleness.ts";
import { buildTrajectory, errorText, type SessionRecords, type TrajectoryInput } from "./trajectory.ts";

/** The part of the data plane's Sender the worker uses (the real Sender in production and tests). */
export interface TrajectorySink {
  send(trajectories: readonly Trajectory[], routing: RoutingShape | null): Promise<unknown>;
  readonly policyVersion: { version: number } | null;
  waitForPolicyVersion(minVersion: number, timeoutMs?: number): Promise<{ version: number }>;
  /** The Sender's: resolves once the batches are acked and the trainer's step on them is done (Sender.waitUntilTrained). */
  waitUntilTrained?(batchIds: readonly string[], timeoutMs?: number): Promise<void>;
}

export interface WorkerLoopOptions {
  groupSize: number;
  /** Rollouts (launch + stages + finish) in flight at once. */
  concurrency: number;
  maxAttempts: number;
  /** Unique per worker run; prefixes group and trajectory ids so a restart never reuses one. */
  runId: string;
  routing: RoutingShape | null;
  staleness: StalenessBound;
  /**
   * Set: one group at a time, the next starting only after the trainer's step on the last one
   * (at most `waitMs` each), so no token is sampled by weights older than the trainer's.
   */
  onPolicy?: { waitMs: number };
  /** The version of the weights new rollouts sample with (from the engine); 0 when none is known. */
  samplingVersion?: () => number;
  log?: (line: string) => void;
  /** The trainer's maximum sequence and what happens to a longer trajectory (over-length.ts); absent = no bound. */
  lengthPolicy?: LengthPolicy;
  /** Wait before the 2nd attempt of an env_error rollout, doubled per further attempt (capped at 30 s). Default 1000. */
  retryBackoffMs?: number;
  /** Aborted: start nothing more, ship nothing more, return once the attempts in flight end (see the module doc). */
  stop?: AbortSignal;
}

export const DEFAULT_RETRY_BACKOFF_MS = 1000;
const MAX_BACKOFF_MS = 30_000;

export interface WorkerResult {
  groupsShipped: number;
  trajectoriesShipped: number;
  /** Rollouts that stayed env_error after every attempt (not shipped). */
  droppedEnvErrors: number;
  /** Groups a killed earlier process of this run had shipped (skipped on resume; journal.ts). */
  groupsShippedBefore: number;
  /** Present when the loop was stopped (`opts.stop`) before every group shipped; the run resumes from its journal. */
  stopped?: true;
}

/** Thrown where a rollout would start an attempt after the stop; it ends that rollout and its group unshipped. */
class WorkerStopped extends Error {
  constructor() {
    super("the worker is stopping");
  }
}

/** `p`, or nothing once `stop` aborts (then a later rejection of `p` is ignored: nobody waits on it). */
function untilStopped(p: Promise<void>, stop: AbortSignal | undefined): Promise<void> {
  if (!stop) return p;
  p.catch(() => undefined);
  if (stop.aborted) return Promise.resolve();
  let onAbort!: () => void;
  const aborted = new Promise<void>((resolve) => { onAbort = resolve; stop.addEventListener("abort", onAbort, { once: true }); });
  return Promise.race([p, aborted]).finally(() => stop.removeEventListener("abort", onAbort));
}

const NO_SESSION: SessionRecords = { segments: [], toolCalls: 0, toolCallParseFailures: 0, rereadsAfterEdit: 0, rolledBackTurns: 0 };

/** A rollout's final attempt, all buildTrajectory needs but what the worker knows at ship time. */
type FinishedRollout = Omit<TrajectoryInput, "ship">;
const safe = (s: string) => s.replace(/[^A-Za-z0-9_.-]+/g, "_");

export async function runWorkerLoop(
  tasks: readonly Task[],
  deps: { runner: RolloutRunner; launcher: AgentLauncher; sink: TrajectorySink; events: RolloutEvents; hosts?: DockerHosts; journal?: RunJournal },
  opts: WorkerLoopOptions,
): Promise<WorkerResult> {
  const { runner, launcher, sink, events } = deps;
  if (opts.onPolicy && !sink.waitUntilTrained) throw new Error("on-policy rollouts need a sink that knows when the trainer's step is done (the data plane's Sender)");
  const log = opts.log ?? (() => {});
  const backoffMs = opts.retryBackoffMs ?? DEFAULT_RETRY_BACKOFF_MS;
  const limit = new ConcurrencyLimit(opts.concurrency);
  const result: WorkerResult = { groupsShipped: 0, trajectoriesShipped: 0, droppedEnvErrors: 0, groupsShippedBefore: 0 };
  const stopping = () => opts.stop?.aborted === true;
  // With several Docker hosts each host gets its images on first use (hosts.ts); else the process's daemon, now.
  const base = deps.hosts ? null : await ensureBaseImage(undefined, log);
  const images = new Map<string, Promise<string>>();
  const imageOf = (def: TaskDefinition) => {
    const key = `${def.environment.image ?? def.name}\0${def.environment.dir}`;
    if (!images.has(key)) {
      // A failed build is not remembered: the daemon may have been away for a moment, and the retry must try again.
      const p = ensureTaskImage(def, base!.tag, { log }).then((i) => i.tag);
      p.catch(() => {
        if (images.get(key) === p) images.delete(key);
      });
      images.set(key, p);
    }
    return images.get(key)!;
  };

  const rollout = async (launcher: AgentLauncher, task: Task, def: TaskDefinition, groupId: string, trajectoryId: string): Promise<FinishedRollout> => {
    let finished: FinishedRollout | undefined;
    for (let attempt = 1; attempt <= opts.maxAttempts; attempt++) {
      // Back off before a retry (outside the rollout slots): an env_error from a daemon or engine that is
      // away for a moment would otherwise burn every attempt within milliseconds.
      if (stopping()) throw new WorkerStopped();
      if (attempt > 1) await pause(Math.min(backoffMs * 2 ** (attempt - 2), MAX_BACKOFF_MS), opts.stop);
      if (stopping()) throw new WorkerStopped();
      events.emit({ kind: "rollout_started", groupId, trajectoryId, taskId: task.id, attempt });
      const t0 = performance.now();
      // Checked again once a slot is free: an attempt queued for one must not create containers after the stop.
      const result = await limit.run(() => (stopping() ? Promise.reject(new WorkerStopped()) : attemptOnce(launcher, task, def, `${trajectoryId}.${attempt}`)));
      const outcome: RolloutOutcome = { ...result.outcome, attempts: attempt };
      finished = {
        identity: { trajectoryId, groupId, taskId: task.id, harness: launcher.name },
        session: result.session,
        outcome,
        wallTimeS: (performance.now() - t0) / 1000,
        routing: opts.routing,
      };
      if (outcome.status !== "env_error") break;
      // A stop ends attempts env_error (their containers are removed): not a retry, the rollout just ends.
      if (attempt < opts.maxAttempts && !stopping()) events.emit({ kind: "rollout_retried", groupId, trajectoryId, envError: outcome.envError!.kind, error: errorText(outcome)!, attempt });
    }
    const { outcome, wallTimeS } = finished!;
    events.emit({
      kind: "rollout_finished", groupId, trajectoryId, taskId: task.id, harness: launcher.name, status: outcome.status,
      // As on the record: an env_error says nothing about the policy.
      reward: outcome.status === "env_error" ? null : outcome.reward, wallTimeS, envError: errorText(outcome),
      defenseFlags: [...new Set(outcome.defenseFlags)].sort(), stageMs: outcome.timingsMs,
    });
    return finished!;
  };

  type Attempt = { outcome: RolloutOutcome; session: SessionRecords };
  const attemptOnce = (launcher: AgentLauncher, task: Task, def: TaskDefinition, rolloutId: string): Promise<Attempt> => {
    const hosts = deps.hosts;
    if (!hosts) return attemptOn(launcher, task, def, rolloutId, () => imageOf(def));
    // Placed on the host with the most free slots; an env_error there makes it ping that host, so a
    // lost host takes no new attempts and this rollout's retry lands on another.
    return hosts.place(rolloutId, async (host) => {
      const r = await attemptOn(launcher, task, def, rolloutId, () => hosts.taskImage(host, def));
      if (r.outcome.status === "env_error") await hosts.suspect(host);
      return r;
    }).catch((e: unknown) => {
      if (!isSandboxEnvError(e)) throw e;
      return { outcome: envErrorOutcome(e.kind, e.message), session: NO_SESSION };
    });
  };

  const attemptOn = async (launcher: AgentLauncher, task: Task, def: TaskDefinition, rolloutId: string, imageFor: () => Promise<string>): Promise<Attempt> => {
    let image: string;
    try {
      image = await imageFor();
    } catch (e) {
      // An unbuildable or quarantined image is the environment's failure; the group accounts for it.
      if (!isSandboxEnvError(e)) throw e;
      // Its own kind: an unreachable daemon is daemon_unreachable, not a broken Dockerfile.
      return { outcome: envErrorOutcome(e.kind, e.message), session: NO_SESSION };
    }
    if (stopping()) throw new WorkerStopped(); // an image build may have outlasted the stop
    const agent = await launcher.start(task, def, rolloutId);
    let outcome: RolloutOutcome | undefined;
    try {
      outcome = await runner.run({
        task: def, image, rolloutId, agent: agent.program, proxySocket: agent.proxySocket, engineFault: agent.engineFault,
        ...(agent.agentTimeoutSec !== undefined ? { agentTimeoutSec: agent.agentTimeoutSec } : {}),
      });
      return { outcome, session: agent.session?.() ?? NO_SESSION };
    } finally {
      if (outcome) await agent.finish?.(outcome);
      else await agent.abandon?.().catch(() => undefined); // the run's own error is the one to report
    }
  };

  const group = async (task: Task, index: number): Promise<void> => {
    // Resuming a killed run: what it shipped is in the spool or at the trainer already.
    if (deps.journal?.isShipped(index)) {
      // Still drawn from a mixed launcher, so the groups that do run get the harness the killed process would have given them.
      launcher.forGroup?.(`${opts.runId}-g${index}-${safe(task.id)}`);
      result.groupsShippedBefore += 1;
      return;
    }
    if (stopping()) return;
    await waitUntilFresh(sink, events, opts);
    if (stopping()) return;
    const groupId = `${opts.runId}-g${index}-${safe(task.id)}`;
    const def = await task.definition();
    // One harness per group (a mixed run assigns it here), so a group's rewards compare like with like.
    const harness = launcher.forGroup?.(groupId) ?? launcher;
    // Settled, not Promise.all: on a stop every rollout of the group must have ended before the loop returns.
    const settled = await Promise.allSettled(Array.from({ length: opts.groupSize }, (_, i) => rollout(harness, task, def, groupId, `${groupId}.r${i}`)));
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected" && !(s.reason instanceof WorkerStopped));
    if (failed) throw failed.reason;
    // Cut short by the stop (or finished just as it came): not shipped, so it runs whole when the run resumes.
    if (stopping()) return;
    const all = settled.map((s) => (s as PromiseFulfilledResult<FinishedRollout>).value);
    const graded = all.filter((r) => r.outcome.status !== "env_error");
    const dropped = all.length - graded.length;
    let records: Trajectory[] = [];
    let shipped: unknown;
    const send = async () => {
      // Built as the group's turn to ship comes (shipping is serialized), so `stale` is judged
      // against the newest version the trainer had announced when the batch went out.
      const ship = { staleness: opts.staleness, trainerVersion: sink.policyVersion?.version ?? null, length: opts.lengthPolicy ?? null };
      records = graded.map((r) => buildTrajectory({ ...r, ship }));
      for (const t of records) {
        if (t.over_length) events.emit({ kind: "over_length", groupId, trajectoryId: t.trajectory_id, ...t.over_length, reason: overLengthReason(t.over_length) });
        if (t.stale) events.emit({ kind: "over_staleness_bound", groupId, trajectoryId: t.trajectory_id, oldestVersion: t.min_policy_version!, trainerVersion: t.trainer_version_at_ship!, maxStaleness: opts.staleness.maxStaleness! });
      }
      if (records.length) shipped = await sink.send(records, opts.routing);
    };
    // Every graded rollout ships as one record (an over-length drop as one without segments).
    await (deps.journal ? deps.journal.ship(index, groupId, graded.length, send) : send());
    result.groupsShipped += records.length ? 1 : 0;
    result.trajectoriesShipped += records.length;
    result.droppedEnvErrors += dropped;
    events.emit({
      kind: "group_shipped", groupId, taskId: task.id, trajectories: records.length, droppedEnvErrors: dropped,
      // Over-length drops ship as records without segments (counted here, and by their events in the summary).
      droppedOverLength: records.filter((t) => t.over_length?.action === "dropped").length,
      ...shippedTotals(records),
    });
    if (opts.onPolicy && Array.isArray(shipped) && shipped.length && index < tasks.length - 1 && !stopping()) {
      // The next group samples only after the trainer's step on this one has published its weights
      // (after the last group there is none to wait for; the final drain waits for its ack). A stop
      // ends the wait: a trainer stopping at its last step never announces another version.
      await untilStopped(sink.waitUntilTrained!((shipped as { batch_id: string }[]).map((h) => h.batch_id), opts.onPolicy.waitMs), opts.stop);
    }
  };

  // Groups start only as slots free up (one more than the rollout slots need, so the next group
  // fills the tail of the last), so the staleness check runs when a group really starts and a
  // large task source is not expanded all at once.
  const groups = new ConcurrencyLimit(opts.onPolicy ? 1 : Math.ceil(opts.concurrency / opts.groupSize) + 1);
  await Promise.all(tasks.map((t, i) => groups.run(() => group(t, i))));
  if (stopping() && result.groupsShipped + result.groupsShippedBefore < tasks.length) result.stopped = true;
  return result;
}

/** Waits `ms`, or less when `stop` is aborted meanwhile (a stop must not wait out a 30 s back-off). */
function pause(ms: number, stop: AbortSignal | undefined): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      stop?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    stop?.addEventListener("abort", done, { once: true });
  });
}

/** Holds a new group back while the trainer is more than the bound ahead of the sampling weights. */
async function waitUntilFresh(sink: TrajectorySink, events: RolloutEvents, opts: WorkerLoopOptions): Promise<void> {
  const sampling = opts.samplingVersion?.() ?? 0;
  const trainer = sink.policyVersion?.version ?? null;
  if (mayStartRollout(opts.staleness, sampling, trainer)) return;
  events.emit({ kind: "paused_for_staleness", policyVersion: sampling, trainerVersion: trainer!, maxStaleness: opts.staleness.maxStaleness! });
  for (;;) {
    if (opts.stop?.aborted) return; // the group checks the stop next and does not start
    const now = opts.samplingVersion?.() ?? 0;
    const latest = sink.policyVersion?.version ?? null;
    if (mayStartRollout(opts.staleness, now, latest)) {
      events.emit({ kind: "resumed", policyVersion: now, trainerVersion: latest ?? 0 });
      return;
    }
    // The sampling side moves with the engine's weight loads, which the sender does not see; poll it.
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** What the summary adds up from a group's records: tokens, tool calls and parse failures, stale ones, policy versions. */
function shippedTotals(records: readonly Trajectory[]): { tokens: TokenCounts; toolCalls: number; toolCallParseFailures: number; stale: number; policyVersions: { min: number; max: number } | null } {
  const tokens = { prompt: 0, completion: 0, trainable: 0 };
  let toolCalls = 0;
  let toolCallParseFailures = 0;
  let low = Infinity;
  let high = -Infinity;
  for (const t of records) {
    for (const k of ["prompt", "completion", "trainable"] as const) tokens[k] += t.tokens?.[k] ?? 0;
    toolCalls += t.metrics.tool_calls;
    toolCallParseFailures += t.tool_call_parse_failures ?? 0;
    low = Math.min(low, t.min_policy_version ?? Infinity);
    high = Math.max(high, t.max_policy_version ?? -Infinity);
  }
  const policyVersions = low <= high ? { min: low, max: high } : null;
  return { tokens, toolCalls, toolCallParseFailures, stale: records.filter((t) => t.stale).length, policyVersions };
}

function envErrorOutcome(kind: EnvErrorKind, message: string): RolloutOutcome {
  return { status: "env_error", reward: null, defenseFlags: [], envError: { kind, message }, attempts: 1, timingsMs: {}, log: "" };
}
