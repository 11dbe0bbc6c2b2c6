/**
 * `lego rollout` (`pnpm rollout`): the rollout worker against a trainer's
 * data-plane receiver. Flags override the optional TOML `--config` file;
 * progress and events are JSON lines on stdout when it is not a terminal,
 * human lines on stderr when it is; the last stdout line is the summary.
 *
 * SIGTERM or SIGINT stops it cleanly: nothing new starts, the attempts in
 * flight end (this run's containers are removed, every STOP_SWEEP_MS until
 * the loop has returned, so one created as a sweep listed goes too), the
 * summary says `stopped`, and it exits 143; the run journal resumes the
 * unshipped groups on the next start. A second signal kills it at once.
 */
import type { Argv } from "yargs";
import type { LegoCommand } from "../lego-command.ts";
import { defaultTasksConfig, emptyAgent, harnessLauncher, openTaskSource, oracleAgent, type AgentLauncher } from "../tasks/index.ts";
import { PolicyEngineError } from "../harness/index.ts";
import { removeRunContainers, sandboxHost, withDockerEndpoint } from "../sandbox/index.ts";
import { Sender } from "../transport/index.ts";
import { WorkerConfigError, buildWorkerConfig, readWorkerConfigFile, type WorkerConfig } from "./config.ts";
import { RolloutEvents } from "./events.ts";
import { DEFAULT_CPU_OVERSUBSCRIPTION, DockerHosts, parseDockerHostSpec } from "./hosts.ts";
import { RunJournal, runFingerprint } from "./journal.ts";
import { mixedLauncher, parseHarnessMix, type HarnessShare } from "./harness-mix.ts";
import { RolloutRunner } from "./runner.ts";
import { ProgressView } from "./progress.ts";
import { SummaryCollector, formatSummary, jsonLines } from "./summary.ts";
import { runWorkerLoop } from "./worker.ts";
import { exitOnceClosed } from "./exit-once-closed.ts";

/** Between sweeps of this run's containers while a stopping worker waits for its attempts in flight. */
const STOP_SWEEP_MS = 2_000;
/** How long a stopping worker still waits for the trainer's acks of what it sent (they may be on the way). */
const STOP_DRAIN_MS = 5_000;
/** Exit status of a worker stopped by a signal before its run finished (128 + SIGTERM, as a shell reports it). */
export const STOPPED_EXIT_CODE = 143;
/**
 * How long a stopped worker's process may stay up after its summary is out. Everything it owns is closed by
 * then; a handle still open past this (a library's socket or timer) must not hold the exit until its
 * supervisor's SIGKILL, which reads as a crash (CI saw a fleet worker's clean stop end in SIGKILL).
 */
export const STOPPED_EXIT_GRACE_MS = 10_000;

async function singleLauncher(cfg: WorkerConfig, harness: string): Promise<AgentLauncher> {
  if (harness === "oracle") return oracleAgent;
  if (harness === "empty") return emptyAgent;
  return harnessLauncher({
    harness, engine: cfg.engine!, modelDir: cfg.modelDir,
    sampling: { temperature: cfg.temperature, maxTokensPerTurn: cfg.maxTokensPerTurn }, limits: { maxTurns: cfg.maxTurns }, engineWaitMs: cfg.engineWaitMs,
  });
}

/** One launcher per harness of `--harness` (a name, or a mix NAME=WEIGHT,…). */
async function launcherFor(cfg: WorkerConfig): Promise<AgentLauncher> {
  const shares = parseHarnessMix(cfg.harness);
  const entries: { share: HarnessShare; launcher: AgentLauncher }[] = [];
  try {
    for (const share of shares) entries.push({ share, launcher: await singleLauncher(cfg, share.name) });
  } catch (e) {
    await Promise.all(entries.map((x) => x.launcher.close?.()));
    throw e;
  }
  return shares.length === 1 ? entries[0]!.launcher : mixedLauncher(entries);
}

/** Runs the worker with a built config; returns the summary (also printed). */
export async function runRollout(
  cfg: WorkerConfig, io: { tty: boolean; out: (s: string) => void; err: (s: string) => void; progress?: NodeJS.WritableStream }, env: { sshAgent?: string } = {},
  stop?: AbortSignal,
) {
  const { tasks: all } = await openTaskSource(cfg.tasks, defaultTasksConfig());
  const tasks = cfg.limit ? all.slice(0, cfg.limit) : all;
  // The run's identity and what it shipped survive a kill (journal.ts): a restart resumes the same run.
  const journal = RunJournal.open(cfg.spoolDir, runFingerprint({ producerId: cfg.producerId, harness: cfg.harness, groupSize: cfg.groupSize, taskIds: tasks.map((t) => t.id) }), cfg.producerId);
  if (journal.resumed) io.err(`resuming run ${journal.runId}: ${journal.shippedBefore} of ${tasks.length} groups shipped before\n`);
  const launcher = await launcherFor(cfg);
  // Without the engine's version the bound cannot be checked; refusing beats pausing forever or ignoring it.
  if (cfg.maxStaleness !== null && !launcher.samplingVersion) {
    await launcher.close?.();
    throw new WorkerConfigError(`--max-staleness needs the sampling policy version, and harness ${cfg.harness} reports none (no engine)`);
  }
  const events = new RolloutEvents();
  const collector = new SummaryCollector(events);
  // A terminal gets progress bars (and the log above them); anything else one JSON line per event.
  const progress = io.tty && io.progress ? new ProgressView(events, { groups: tasks.length, rollouts: tasks.length * cfg.groupSize }, io.progress) : null;
  const err = progress ? (s: string) => progress.log(s) : io.err;
  if (!io.tty) jsonLines(events, io.out);
  else if (!progress) events.subscribe((e) => e.kind === "group_shipped" && io.err(`group ${e.groupId}: ${e.trajectories} shipped, ${e.droppedEnvErrors} dropped\n`));
  const runId = journal.runId;
  const sender = new Sender({
    address: cfg.trainer, spoolDir: cfg.spoolDir, producerId: cfg.producerId,
    onEvent: (e) => e.type === "spooled" && journal.onSpooled(e.batch_id),
  });
  const runnerCfg = { ...launcher.runner, concurrency: cfg.concurrency, warmPoolSize: cfg.warmPool, maxAttempts: 1 };
  // Several hosts: each is reaped when opened (the process's own daemon may not be one of them).
  const hosts = cfg.dockerHosts.length
    ? await DockerHosts.open(cfg.dockerHosts.map(parseDockerHostSpec), {
      // A host without =SLOTS: as many as its CPUs (oversubscribed) and memory fit this run's sandboxes, at most --concurrency.
      capacity: { cpuOversubscription: cfg.cpuOversubscription, cap: cfg.concurrency, ...(runnerCfg.limits ? { limits: runnerCfg.limits } : {}) },
      events, log: (l) => err(`${l}\n`), sshAgent: env.sshAgent,
    })
    : undefined;
  const runner = hosts ? new RolloutRunner(runnerCfg) : await RolloutRunner.create(runnerCfg);
  // A stop ends the attempts in flight by removing this run's containers on every host that answers.
  const sweepRun = () => Promise.all((hosts ? hosts.hosts.filter((h) => h.up).map((h) => h.endpoint) : [null]).map((ep) =>
    (ep ? withDockerEndpoint(ep, () => removeRunContainers()) : removeRunContainers()).catch((e: unknown) => err(`stop: sweeping containers failed: ${(e as Error).message}\n`))));
  let sweeps: NodeJS.Timeout | undefined;
  const onStop = () => {
    err("stopping: ending the rollouts in flight; the unshipped groups run when this run resumes\n");
    void sweepRun();
    sweeps = setInterval(() => void sweepRun(), STOP_SWEEP_MS);
  };
  if (stop?.aborted) onStop();
  else stop?.addEventListener("abort", onStop, { once: true });
  let result;
  let unsweptHosts: string[] = [];
  try {
    result = await runWorkerLoop(tasks, { runner, launcher, sink: sender, events, journal, ...(hosts ? { hosts } : {}) }, {
      groupSize: cfg.groupSize, concurrency: cfg.concurrency, maxAttempts: cfg.maxAttempts, runId, routing: launcher.routing ?? null,
      staleness: { maxStaleness: cfg.maxStaleness }, onPolicy: cfg.onPolicy ? { waitMs: cfg.drainTimeoutMs } : undefined, lengthPolicy: { maxSequenceTokens: cfg.maxSequenceTokens, overLength: cfg.overLength }, samplingVersion: launcher.samplingVersion?.bind(launcher), log: (l) => err(`${l}\n`),
      ...(stop ? { stop } : {}),
    });
    if (!stop?.aborted) {
      await sender.drain(cfg.drainTimeoutMs);
      journal.finish();
    } else if (!result.stopped) {
      // Every group shipped before the stop: the run is done once the trainer has them, which a stopping
      // trainer may never confirm; then the journal stays open and a restart only resends the spool.
      if (await sender.drain(STOP_DRAIN_MS).then(() => true, () => false)) journal.finish();
      else result.stopped = true;
    }
  } finally {
    clearInterval(sweeps);
    stop?.removeEventListener("abort", onStop);
    progress?.stop();
    await runner.close();
    if (hosts) unsweptHosts = (await hosts.close(cfg.lostHostWaitMs)).unswept;
    await launcher.close?.();
    await sender.close();
  }
  // The run's settings ride along, so a summary says how it was produced.
  const summary = {
    ...collector.summary(), runId, sender: sender.stats(), listenerErrors: events.listenerErrors.length, config: cfg,
    resumed: journal.resumed, ...(hosts ? { unsweptHosts, dockerHosts: hosts.capacities() } : {}), stopped: result.stopped === true,
  };
  if (io.tty) io.err(`${formatSummary(summary)}\n`);
  io.out(`${JSON.stringify({ event: "summary", ...summary, result })}\n`);
  return summary;
}

export const rolloutCommand: LegoCommand = {
  command: "rollout",
  describe: "run groups of rollouts through the sandbox and ship them to a trainer over the data plane",
  builder: (y: Argv) =>
    y
      .option("config", { type: "string", describe: "TOML file with the same fields (snake_case); flags override it" })
      .option("tasks", { type: "string", describe: "task source (directory, .jsonl, task list, suite name)" })
      .option("harness", { type: "string", describe: "oracle, empty, a registered harness adapter, or a mix NAME=WEIGHT,… (weights add up to 1; one harness per group)" })
      .option("engine", { type: "string", describe: "engine behind the harness's proxy session: scripted-gold, scripted-edit, answer-at-once, or a real engine's tcp://HOST:PORT or unix:///PATH (python -m lego_rl.engine)" })
      .option("model-dir", { type: "string", describe: "with an engine address: the model directory the engine serves (tokenizer, chat template)" })
      .option("temperature", { type: "number", describe: "with an engine address: sampling temperature of every turn (default 1)" })
      .option("max-tokens-per-turn", { type: "number", describe: "with an engine address: completion tokens per turn at most (default 2048)" })
      .option("engine-wait-ms", { type: "number", describe: "with an engine address: how long a turn waits for an engine that is away before the rollout ends env_error (default 60000)" })
      .option("max-turns", { type: "number", describe: "the harness's model calls per rollout at most (default 30)" })
      .option("group-size", { type: "number", describe: "rollouts per task (default 4)" })
      .option("concurrency", { type: "number", describe: "rollouts in flight (default 4)" })
      .option("trainer", { type: "string", describe: "the trainer's receiver, tcp://HOST:PORT" })
      .option("max-staleness", { type: "number", describe: "pause new groups while the trainer is more than K versions ahead" })
      .option("on-policy", { type: "boolean", describe: "one group at a time, each after the trainer's step on the last one is done and published (every token sampled by the weights it trains)" })
      .option("max-attempts", { type: "number", describe: "attempts per rollout while env_error (default 3)" })
      .option("warm-pool", { type: "number", describe: "warm containers per image and stage (default 0)" })
      .option("spool-dir", { type: "string", describe: "the sender's durable spool" })
      .option("producer-id", { type: "string", describe: "this worker's stable name" })
      .option("limit", { type: "number", describe: "only the first N tasks" })
      .option("max-sequence-tokens", { type: "number", describe: "the trainer's maximum sequence (tokens per segment); longer trajectories meet --over-length" })
      .option("over-length", { type: "string", describe: "drop (default; logged with the reason) or truncate (segments and their loss mask cut to the bound)" })
      .option("docker-host", { type: "string", array: true, describe: "a Docker endpoint to spread sandboxes over (unix:///PATH, tcp://HOST:PORT, ssh://USER@HOST, optionally =SLOTS, else from its CPUs and memory); repeatable" })
      .option("cpu-oversubscription", { type: "number", describe: `a --docker-host without =SLOTS runs up to its CPUs × this sandboxes of one CPU (default ${DEFAULT_CPU_OVERSUBSCRIPTION})` }),
  handler: async (a) => {
    // The first SIGTERM/SIGINT stops cleanly (the module doc); once handled, a second one gets the default: exit now.
    const stop = new AbortController();
    const onSignal = () => {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
      stop.abort();
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
    try {
      const summary = await runRollout(configFrom(a), {
        tty: process.stdout.isTTY === true, out: (s) => process.stdout.write(s), err: (s) => process.stderr.write(s),
        ...(process.stderr.isTTY ? { progress: process.stderr } : {}),
      }, { sshAgent: sandboxHost().sshAgent ?? undefined }, stop.signal);
      if (summary.stopped) process.exitCode = STOPPED_EXIT_CODE;
      if (stop.signal.aborted) exitOnceClosed(STOPPED_EXIT_GRACE_MS);
    } catch (e) {
      // A bad flag or config file is the operator's to fix: say which, without a stack trace.
      if (!(e instanceof WorkerConfigError || e instanceof PolicyEngineError)) throw e;
      process.stderr.write(`lego rollout: ${e.message}\n`);
      process.exitCode = 1;
    } finally {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
    }
  },
};

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- yargs arguments, typed field by field below
function configFrom(a: Record<string, any>): WorkerConfig {
  const file = a.config ? readWorkerConfigFile(a.config as string) : {};
  return buildWorkerConfig(file, {
    tasks: a.tasks, harness: a.harness, engine: a.engine, modelDir: a["model-dir"], temperature: a.temperature, maxTokensPerTurn: a["max-tokens-per-turn"], engineWaitMs: a["engine-wait-ms"], maxTurns: a["max-turns"], groupSize: a["group-size"], concurrency: a.concurrency, trainer: a.trainer,
    maxStaleness: a["max-staleness"], onPolicy: a["on-policy"], maxAttempts: a["max-attempts"], warmPool: a["warm-pool"], spoolDir: a["spool-dir"], producerId: a["producer-id"], limit: a.limit, dockerHosts: a["docker-host"], cpuOversubscription: a["cpu-oversubscription"],
    maxSequenceTokens: a["max-sequence-tokens"], overLength: a["over-length"],
  } as Partial<WorkerConfig>);
}
