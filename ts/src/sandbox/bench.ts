/**
 * Sandbox benchmark (not a test): `pnpm bench:sandbox [--n 30] [--concurrent 32]`:
 * --n pairs per start figure, --concurrent rollouts at once, --quota-pool prepared quota filesystems kept
 * ready (0: each start makes its own in place, as before the pool).
 * Measures, on the machine it runs on:
 *   - start→first exec output of a cached image (create + start + `echo ok`), p50/p99, against
 *     `docker run --rm --network none` with the same limits, and the same pair counting removal;
 *     beside them, ours with the command through `docker exec` instead of execd;
 *   - time to a ready sandbox from a warm pool, and one no-op rollout end to
 *     end with fresh containers vs warm pools;
 *   - 32 rollouts at once through setup → agent (no-op) → grading;
 *   - task image build time, uncached vs cached.
 * The last line is one JSON object for CI.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { benchFlags, positiveInt } from "../bench/index.ts";
import { ensureBaseImage } from "./base-image.ts";
import { Sandbox } from "./container.ts";
import { dockerClient } from "./docker.ts";
import { configureSandboxHost, sandboxHost } from "./host-settings.ts";
import { drainQuotaPools, warmQuotaPool } from "./quota-pool.ts";
import { containersOfRun } from "./reaper.ts";
import { RolloutRunner } from "../rollout/index.ts";
import { currentRun } from "./run-identity.ts";
import { AGENT_UID, DEFAULT_LIMITS } from "./types.ts";
import { loadTask } from "./task.ts";
import { ensureTaskImage } from "./task-image.ts";
import { fixtureImage } from "./test-support.ts";
import { WarmPool } from "./warm-pool.ts";

const flags = benchFlags({
  n: { default: "30", describe: "pairs per start figure" },
  concurrent: { default: "32", describe: "rollouts at once" },
  "quota-pool": { default: String(sandboxHost().quotaPoolSize), describe: "prepared quota filesystems kept ready; 0 makes each in place" },
});
const N = positiveInt("n", flags.n);
const CONCURRENT = positiveInt("concurrent", flags.concurrent);
const QUOTA_POOL = flags["quota-pool"] === "0" ? 0 : positiveInt("quota-pool", flags["quota-pool"]);
configureSandboxHost({ quotaPoolSize: QUOTA_POOL });

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}
const r1 = (x: number) => Math.round(x * 10) / 10;
const log = (o: Record<string, unknown>) => console.log(JSON.stringify(o));

/** `docker run` flags matching what Sandbox.start asks of the daemon for an agent-stage task container. */
function baselineArgs(tag: string): string[] {
  const l = DEFAULT_LIMITS;
  return [
    "run", "--rm", "--network", "none", "--init",
    "--memory", String(l.memoryBytes), "--memory-swap", String(l.memoryBytes),
    "--pids-limit", String(l.pids), "--cpus", String(l.cpus),
    "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
    "--tmpfs", `/tmp:rw,nosuid,nodev,size=${l.tmpBytes},mode=1777`, "--shm-size", String(l.shmBytes),
    "--user", `${AGENT_UID}:${AGENT_UID}`,
    tag, "echo", "ok",
  ];
}

/** Runs the docker CLI; `first` resolves at its first stdout byte, `done` when it exits (after --rm). */
function dockerRunFirstOutput(args: string[]): { first: Promise<number>; done: Promise<number> } {
  const child = spawn("docker", args, { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const first = new Promise<number>((resolve, reject) => {
    child.stdout.once("data", () => resolve(performance.now()));
    child.once("exit", () => reject(new Error(`docker run printed nothing: ${stderr}`)));
  });
  const done = new Promise<number>((resolve, reject) => {
    child.once("exit", (code) => (code === 0 ? resolve(performance.now()) : reject(new Error(`docker run exited ${code}: ${stderr}`))));
  });
  return { first, done };
}

async function main(): Promise<void> {
  const base = await ensureBaseImage();
  const { task, image } = await fixtureImage("fix-add");

  // 1. start → first exec output vs `docker run --rm --network none` with the same limits, alternated so both
  //    see the same machine state. Pair A stops both clocks at the first output; pair B also counts removal
  //    (ours: Sandbox.remove, which also tears down the per-container disk quota; the baseline: `--rm`
  //    finishing, which pays no quota because plain docker has none). The quota pool (quota-pool.ts) is
  //    refilled before each pair, outside both clocks, so its background mke2fs overlaps neither side.
  //    A third series, alternated with both, runs our command through `docker exec` instead of the
  //    container's command server (execd): what execd changes, measured on the same machine state.
  const ours: number[] = [];
  const oursRemoved: number[] = [];
  const viaDockerExec: number[] = [];
  const plain: number[] = [];
  const plainRemoved: number[] = [];
  const startExecRemove = async (rolloutId: string): Promise<{ first: number; removed: number }> => {
    await warmQuotaPool(DEFAULT_LIMITS.diskBytes);
    const t = performance.now();
    let firstOutput: number | undefined;
    const sb = await Sandbox.start({ image: image.tag, rolloutId, stage: "agent" });
    const out = await sb.exec(["echo", "ok"], { onStdout: () => (firstOutput ??= performance.now()) });
    if (firstOutput === undefined) throw new Error("the sandbox's exec printed nothing");
    if (!out.stdout.includes("ok")) throw new Error(`sandbox exec printed ${JSON.stringify(out.stdout)}`);
    await sb.remove();
    return { first: firstOutput - t, removed: performance.now() - t };
  };
  for (let i = 0; i < N; i++) {
    const served = await startExecRemove(`bench-${i}`);
    ours.push(served.first);
    oursRemoved.push(served.removed);
    const before = configureSandboxHost({ execServer: false });
    try {
      viaDockerExec.push((await startExecRemove(`bench-docker-exec-${i}`)).first);
    } finally {
      configureSandboxHost(before);
    }
    await warmQuotaPool(DEFAULT_LIMITS.diskBytes);
    const t = performance.now();
    const { first, done } = dockerRunFirstOutput(baselineArgs(image.tag));
    plain.push((await first) - t);
    plainRemoved.push((await done) - t);
  }
  const startP50 = pct(ours, 50);
  const dockerP50 = pct(plain, 50);
  const removedP50 = pct(oursRemoved, 50);
  const dockerRemovedP50 = pct(plainRemoved, 50);
  log({ metric: "start_to_first_exec", p50_ms: r1(startP50), p99_ms: r1(pct(ours, 99)), via_docker_exec_p50_ms: r1(pct(viaDockerExec, 50)), docker_run_p50_ms: r1(dockerP50), docker_run_p99_ms: r1(pct(plain, 99)), n: N });
  log({ metric: "start_exec_remove", p50_ms: r1(removedP50), p99_ms: r1(pct(oursRemoved, 99)), docker_run_rm_p50_ms: r1(dockerRemovedP50), docker_run_rm_p99_ms: r1(pct(plainRemoved, 99)), n: N });

  // 2. warm pool: acquisition latency with the pool full (steady state: rollouts outlast a start).
  const pool = new WarmPool(() => Sandbox.start({ image: image.tag, rolloutId: "pool", stage: "agent" }), (s) => s.remove(), { size: 2, fillConcurrency: 1 }).start();
  const ready: number[] = [];
  const taken: Sandbox[] = [];
  for (let i = 0; i < Math.min(N, 20); i++) {
    await pool.whenFull();
    const t = performance.now();
    const sb = await pool.acquire();
    ready.push(performance.now() - t);
    taken.push(sb);
  }
  await Promise.all([...taken.map((s) => s.remove()), pool.close()]);
  log({ metric: "pool_ready", p50_ms: r1(pct(ready, 50)), p99_ms: r1(pct(ready, 99)), n: ready.length });

  // 2b. one rollout at a time, fresh containers vs warm pools (agent + grading containers ready).
  const seq = async (warmPoolSize: number): Promise<number[]> => {
    const r = await RolloutRunner.create({ concurrency: 1, maxAttempts: 1, warmPoolSize });
    await r.warm(image.tag);
    const ms: number[] = [];
    for (let i = 0; i < 8; i++) {
      const t0 = performance.now();
      const o = await r.run({ task, image: image.tag, rolloutId: `bench-seq-${warmPoolSize}-${i}`, agent: { script: "true" } });
      if (o.status !== "ok") throw new Error(`sequential rollout failed: ${o.status} ${o.envError?.message ?? ""}`);
      ms.push(performance.now() - t0);
      await r.warm(image.tag); // steady state: the pools refill between rollouts
    }
    await r.close();
    return ms;
  };
  const coldSeq = await seq(0);
  const warmSeq = await seq(1);
  log({ metric: "rollout_one_at_a_time", fresh_p50_ms: r1(pct(coldSeq, 50)), warm_pool_p50_ms: r1(pct(warmSeq, 50)), n: coldSeq.length });

  // 3. 32 rollouts at once through all three stages (no-op agent: reward 0, status ok).
  const runner = await RolloutRunner.create({ concurrency: CONCURRENT, maxAttempts: 1 });
  let t = performance.now();
  const outcomes = await Promise.all(
    Array.from({ length: CONCURRENT }, (_, i) => runner.run({ task, image: image.tag, rolloutId: `bench-cycle-${i}`, agent: { script: "true" } })),
  );
  const cycleMs = performance.now() - t;
  await runner.close();
  const okCount = outcomes.filter((o) => o.status === "ok").length;
  const stageP50 = (s: "setup" | "agent" | "grading") => r1(pct(outcomes.map((o) => o.timingsMs[s] ?? 0), 50));
  log({ metric: "concurrent_cycle", ok: okCount, of: CONCURRENT, wall_ms: Math.round(cycleMs), setup_p50_ms: stageP50("setup"), agent_p50_ms: stageP50("agent"), grading_p50_ms: stageP50("grading"),
    env_errors: outcomes.flatMap((o) => (o.envError ? [o.envError.message.slice(0, 300)] : [])) });

  // 4. image build: a task image nobody has built (unique content) vs the same again.
  const dir = mkdtempSync(join(tmpdir(), "lego-bench-task-"));
  mkdirSync(join(dir, "environment"));
  mkdirSync(join(dir, "tests"));
  writeFileSync(join(dir, "instruction.md"), "bench\n");
  writeFileSync(join(dir, "task.toml"), '[metadata]\nname = "bench-build"\n');
  writeFileSync(join(dir, "tests/test.sh"), "exit 0\n");
  writeFileSync(join(dir, "environment/Dockerfile"), `FROM lego-rl/base\nRUN echo ${Date.now()}-${process.pid} > /bench\n`);
  const benchTask = loadTask(dir);
  const cold = await ensureTaskImage(benchTask, base.tag);
  const warm = await ensureTaskImage(benchTask, base.tag);
  const baseCached = await ensureBaseImage();
  await dockerClient().getImage(cold.tag).remove();
  rmSync(dir, { recursive: true, force: true });
  log({ metric: "image_build", task_uncached_ms: Math.round(cold.buildMs), task_cached_ms: r1(warm.buildMs), base_cached_ms: r1(baseCached.ms) });

  await drainQuotaPools();
  const leaked = (await containersOfRun(currentRun().runId)).length;
  console.log(
    JSON.stringify({
      bench: "sandbox",
      start_p50_ms: r1(startP50),
      start_p99_ms: r1(pct(ours, 99)),
      docker_run_p50_ms: r1(dockerP50),
      vs_docker_run: Math.round((startP50 / dockerP50) * 100) / 100,
      start_via_docker_exec_p50_ms: r1(pct(viaDockerExec, 50)),
      start_remove_p50_ms: r1(removedP50),
      docker_run_rm_p50_ms: r1(dockerRemovedP50),
      vs_docker_run_with_removal: Math.round((removedP50 / dockerRemovedP50) * 100) / 100,
      quota_pool: QUOTA_POOL,
      ours: "create + disk quota + attach + start, then `echo ok` as the agent through the container's command server (execd)",
      baseline: "docker run --rm --network none, same memory/pids/cpus/cap-drop/no-new-privileges/tmpfs/shm/init, --user agent; no disk quota",
      pool_ready_p50_ms: r1(pct(ready, 50)),
      rollout_p50_ms: r1(pct(coldSeq, 50)),
      rollout_warm_p50_ms: r1(pct(warmSeq, 50)),
      concurrent_ok: okCount,
      concurrent_total: CONCURRENT,
      concurrent_wall_ms: Math.round(cycleMs),
      image_build_uncached_ms: Math.round(cold.buildMs),
      image_build_cached_ms: r1(warm.buildMs),
      leaked,
    }),
  );
}

await main();
