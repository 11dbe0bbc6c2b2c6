/**
 * `pnpm bench:rollout`: rollouts per minute of the rollout worker with the
 * reference harness and a scripted engine (runWorkerLoop, the real Sender,
 * the real Python receiver) on easy tasks, at each concurrency level, beside
 * the bare sandbox cycle (setup → no-op agent → grading straight through
 * RolloutRunner, as bench:sandbox's concurrent cycle, same image, same
 * concurrency, same number of rollouts) measured in the same run. For the
 * worker it also says where the time goes (sandbox, harness, proxy, engine,
 * transport; bench-timing.ts). The task image is built before anything is timed.
 *   --levels L,L…     concurrency levels (default 8,16,32)
 *   --waves W         rollouts per level = W × level, rounded up to whole groups (default 1)
 *   --group-size G    rollouts per task (default 4)
 *   --engine E        scripted engine behind the proxy (default scripted-gold)
 * The last line is {"bench":"rollout","rollouts_per_min_c16":…,"vs_bare_cycle_c16":…, …per level}.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { BenchFlagError, benchFlags, positiveInt } from "../bench/index.ts";
import { HARNESS_TOOLS, proxiedLauncher, scriptedHarnessEngine } from "../harness/index.ts";
import { ConcurrencyLimit, ensureBaseImage, ensureTaskImage, reapDeadRuns } from "../sandbox/index.ts";
import { defaultTasksConfig, openTaskSource } from "../tasks/index.ts";
import { Sender } from "../transport/index.ts";
import { emptyTotals, TimedRunner, timedEngine, timedLauncher, timedSink, timeSplit, type TimeTotals } from "./bench-timing.ts";
import { RolloutEvents } from "./events.ts";
import { RolloutRunner } from "./runner.ts";
import { startReceiver } from "./test-support.ts";
import { runWorkerLoop } from "./worker.ts";

const flags = benchFlags({
  levels: { default: "8,16,32", describe: "concurrency levels" },
  waves: { default: "1", describe: "rollouts per level = waves × level, rounded up to whole groups" },
  "group-size": { default: "4", describe: "rollouts per task" },
  engine: { default: "scripted-gold", describe: "scripted engine behind the proxy" },
});
const levels = (flags.levels ?? "").split(",").map((l) => positiveInt("levels", l.trim()));
const waves = positiveInt("waves", flags.waves);
const g = positiveInt("group-size", flags["group-size"]);
const engineName = flags.engine!;
if (!["scripted-gold", "answer-at-once"].includes(engineName)) throw new BenchFlagError(`--engine must be scripted-gold or answer-at-once, got ${engineName}`);
const groupsAt = (c: number) => Math.ceil((waves * c) / g);
const log = (s: string) => process.stderr.write(`${s}\n`);
const work = mkdtempSync(join(tmpdir(), "lego-bench-rollout-"));
const round = (x: number, d = 2) => Number(x.toFixed(d));
const reference = HARNESS_TOOLS.reference!;

const { receiver, address } = await startReceiver(join(work, "rx"));
try {
  const base = await ensureBaseImage(undefined, log);
  const { tasks } = await openTaskSource(`easy:seed=31,count=${Math.max(...levels.map(groupsAt))}`, defaultTasksConfig());
  const defs = await Promise.all(tasks.map((t) => t.definition()));
  const images = await Promise.all(defs.map((d) => ensureTaskImage(d, base.tag, { log }).then((i) => i.tag)));
  const load0 = loadavg()[0]!;

  const bare = async (c: number, rollouts: number, tag: string) => {
    // The bare cycle, as bench:sandbox runs it: setup → no-op agent → grading, nothing around it.
    const runner = await RolloutRunner.create({ concurrency: c, maxAttempts: 1 });
    const limit = new ConcurrencyLimit(c);
    const t0 = performance.now();
    let ok = 0;
    let agentMs = 0;
    try {
      await Promise.all(Array.from({ length: rollouts }, (_, i) => limit.run(async () => {
        const k = Math.floor(i / g);
        const out = await runner.run({ task: defs[k]!, image: images[k]!, rolloutId: `bench-${tag}-${i}`, agent: { script: "true" } });
        if (out.status === "ok") ok += 1;
        agentMs += out.timingsMs.agent ?? 0;
      })));
    } finally {
      await runner.close();
    }
    return { s: (performance.now() - t0) / 1000, ok, agentStageS: agentMs / rollouts / 1000 };
  };

  const worker = async (c: number, tag: string) => {
    const totals: TimeTotals = emptyTotals();
    const launcher = timedLauncher(proxiedLauncher({
      harness: reference.harness, engineName,
      engine: (model, def) => timedEngine(scriptedHarnessEngine(engineName, model, def, reference.tools), totals),
      onRequestEnd: (_, e) => {
        totals.proxyRequestMs += e.duration_ms;
        totals.proxyRequests += 1;
      },
    }), totals);
    await reapDeadRuns();
    const runner = new TimedRunner(totals, { ...launcher.runner, concurrency: c, maxAttempts: 1 });
    const sender = new Sender({ address, spoolDir: join(work, `tx-${tag}`), producerId: `bench-${tag}` });
    const events = new RolloutEvents();
    let ok = 0, solved = 0, finished = 0;
    events.subscribe((e) => {
      if (e.kind !== "rollout_finished") return;
      finished += 1;
      if (e.status === "ok") ok += 1;
      if (e.reward === 1) solved += 1;
    });
    const t0 = performance.now();
    let result;
    try {
      result = await runWorkerLoop(tasks.slice(0, groupsAt(c)), { runner, launcher, sink: timedSink(sender, totals), events }, {
        groupSize: g, concurrency: c, maxAttempts: 1, runId: `bench-${tag}`, routing: null, staleness: { maxStaleness: null }, log,
      });
      const t1 = performance.now();
      await sender.drain(120_000);
      totals.transportMs += performance.now() - t1;
    } finally {
      await runner.close();
      await sender.close();
    }
    const s = (performance.now() - t0) / 1000;
    return { s, ok, solved, finished, shipped: result.trajectoriesShipped, accepted: sender.stats().accepted, totals };
  };

  // One untimed rollout of each, so first-use costs (pristine workspace cache, module loading) are not in a level.
  await bare(1, 1, "warmup");
  const perLevel: Record<string, unknown>[] = [];
  // The target's figures first (c16 when it is a level), then every level's.
  const out: Record<string, unknown> = { bench: "rollout", rollouts_per_min_c16: null, vs_bare_cycle_c16: null };
  for (const c of levels) {
    const rollouts = groupsAt(c) * g;
    const b = await bare(c, rollouts, `bare-c${c}`);
    const w = await worker(c, `c${c}`);
    const rpm = (rollouts / w.s) * 60;
    const bareRpm = (rollouts / b.s) * 60;
    const split = timeSplit(w.totals);
    const row = {
      concurrency: c, rollouts, rollouts_per_min: round(rpm, 1), bare_cycle_per_min: round(bareRpm, 1), vs_bare_cycle: round(rpm / bareRpm),
      worker_s: round(w.s, 1), bare_s: round(b.s, 1), worker_ok: w.ok, worker_solved: w.solved, shipped: w.shipped, accepted_batches: w.accepted, bare_ok: b.ok,
      s_per_rollout: split, bare_agent_stage_s: round(b.agentStageS, 3), proxy_requests: w.totals.proxyRequests, engine_calls: w.totals.engineCalls,
      load: round(loadavg()[0]!),
    };
    log(JSON.stringify(row));
    perLevel.push(row);
    out[`rollouts_per_min_c${c}`] = row.rollouts_per_min;
    out[`bare_cycle_per_min_c${c}`] = row.bare_cycle_per_min;
    out[`vs_bare_cycle_c${c}`] = row.vs_bare_cycle;
  }
  out.harness = "reference";
  out.engine = engineName;
  out.group_size = g;
  out.waves = waves;
  out.levels = perLevel;
  out.load = `${load0.toFixed(2)}–${loadavg()[0]!.toFixed(2)}`;
  console.log(JSON.stringify(out));
} finally {
  receiver.stop();
  rmSync(work, { recursive: true, force: true });
}
