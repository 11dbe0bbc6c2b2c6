/**
 * `pnpm bench:rollout`: rollouts per minute of the rollout worker (`lego
 * rollout --harness oracle`, in process: runRollout, what the CLI calls) on
 * easy tasks into the real Python receiver, beside the bare sandbox cycle
 * (setup → oracle agent → grading straight through RolloutRunner, same
 * tasks, same concurrency) measured in the same run; the difference per
 * rollout is the worker's own overhead (trajectory building, groups,
 * spooling, sending, acks). Task images are built before either is timed.
 *   --n N            easy tasks (default 4)
 *   --group-size G   rollouts per task (default 2)
 *   --concurrency C  rollouts in flight (default 4)
 *   --rounds R       bare, worker, bare, worker… (default 2), after one untimed warm-up rollout
 * The last line is {"bench":"rollout","rollouts_per_min":…,"bare_rollouts_per_min":…,"overhead_s_per_rollout":…}.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { benchFlags, positiveInt } from "../bench/index.ts";
import { ConcurrencyLimit, ensureBaseImage, ensureTaskImage, oracleProgram } from "../sandbox/index.ts";
import { defaultTasksConfig, openTaskSource } from "../tasks/index.ts";
import { runRollout } from "./cli.ts";
import { buildWorkerConfig } from "./config.ts";
import { RolloutRunner } from "./runner.ts";
import { startReceiver } from "./test-support.ts";

const flags = benchFlags({
  n: { default: "4", describe: "easy tasks" },
  "group-size": { default: "2", describe: "rollouts per task" },
  concurrency: { default: "4", describe: "rollouts in flight" },
  rounds: { default: "2", describe: "alternating bare/worker rounds (the host's load drifts; alternating spreads it over both)" },
});
const rounds = positiveInt("rounds", flags.rounds);
const n = positiveInt("n", flags.n);
const g = positiveInt("group-size", flags["group-size"]);
const c = positiveInt("concurrency", flags.concurrency);
const source = `easy:seed=31,count=${n}`;
const work = mkdtempSync(join(tmpdir(), "lego-bench-rollout-"));
const log = (s: string) => process.stderr.write(`${s}\n`);
const rollouts = n * g;

const { receiver, address } = await startReceiver(join(work, "rx"));
try {
  const base = await ensureBaseImage(undefined, log);
  const tasks = (await openTaskSource(source, defaultTasksConfig())).tasks;
  const defs = await Promise.all(tasks.map((t) => t.definition()));
  const images = await Promise.all(defs.map((d) => ensureTaskImage(d, base.tag, { log }).then((i) => i.tag)));
  const load0 = loadavg()[0]!;

  const bare = async (tag: string, only?: number): Promise<{ s: number; ok: number }> => {
    // The same rollouts straight through the runner: the bare sandbox cycle.
    const runner = await RolloutRunner.create({ concurrency: c, maxAttempts: 1 });
    const limit = new ConcurrencyLimit(c);
    const t0 = performance.now();
    let ok = 0;
    try {
      const jobs = defs.flatMap((def, i) => Array.from({ length: g }, (_, r) => ({ def, image: images[i]!, id: `bench-${tag}-${i}-${r}` })));
      await Promise.all(jobs.slice(0, only ?? jobs.length).map((j) => limit.run(async () => {
        const out = await runner.run({ task: j.def, image: j.image, rolloutId: j.id, agent: oracleProgram(j.def)! });
        if (out.status === "ok" && out.reward === 1) ok += 1;
      })));
    } finally {
      await runner.close();
    }
    return { s: (performance.now() - t0) / 1000, ok };
  };
  const worker = async (r: number) => {
    // The worker: groups, trajectories, spool, sender, receiver acks (drained before it returns).
    const cfg = buildWorkerConfig({}, {
      tasks: source, harness: "oracle", groupSize: g, concurrency: c, trainer: address, spoolDir: join(work, `tx${r}`), producerId: `bench${r}`,
    });
    const t1 = performance.now();
    const summary = await runRollout(cfg, { tty: false, out: () => {}, err: () => {} });
    return { s: (performance.now() - t1) / 1000, ok: summary.statuses.ok ?? 0, accepted: summary.sender.accepted };
  };
  await bare("warmup", 1);
  let bareS = 0, workerS = 0, bareOk = 0, workerOk = 0, accepted = 0;
  for (let r = 0; r < rounds; r++) {
    const b = await bare(`r${r}`);
    const w = await worker(r);
    bareS += b.s;
    bareOk += b.ok;
    workerS += w.s;
    workerOk += w.ok;
    accepted += w.accepted;
    log(`round ${r}: worker ${w.s.toFixed(1)} s, bare ${b.s.toFixed(1)} s`);
  }
  const round = (x: number, d = 2) => Number(x.toFixed(d));
  const result = {
    bench: "rollout",
    rollouts_per_min: round((rounds * rollouts / workerS) * 60, 1),
    bare_rollouts_per_min: round((rounds * rollouts / bareS) * 60, 1),
    vs_bare: round(bareS / workerS),
    overhead_s_per_rollout: round((workerS - bareS) / (rounds * rollouts)),
    rollouts: rounds * rollouts, rounds, concurrency: c, group_size: g,
    worker_ok: workerOk, bare_ok: bareOk,
    accepted_batches: accepted,
    load: `${load0.toFixed(2)}–${loadavg()[0]!.toFixed(2)}`,
  };
  log(`worker ${workerS.toFixed(1)} s, bare ${bareS.toFixed(1)} s for ${rounds} × ${rollouts} rollouts at concurrency ${c}`);
  console.log(JSON.stringify(result));
} finally {
  receiver.stop();
  rmSync(work, { recursive: true, force: true });
}
