/**
 * Sandbox benchmark (not a test): `cd ts && pnpm exec tsx src/sandbox/bench.ts`.
 * Measures, on the machine it runs on:
 *   - start→first exec of a cached image (create + start + `true`), p50/p99,
 *     against plain `docker run --rm IMAGE true` on the same image;
 *   - time to a ready sandbox from a warm pool, and one no-op rollout end to
 *     end with fresh containers vs warm pools;
 *   - 32 rollouts at once through setup → agent (no-op) → grading;
 *   - task image build time, uncached vs cached.
 * The last line is one JSON object for CI.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { ensureBaseImage } from "./base-image.ts";
import { Sandbox } from "./container.ts";
import { dockerClient } from "./docker.ts";
import { containersOfRun } from "./reaper.ts";
import { RolloutRunner } from "../rollout/index.ts";
import { currentRun } from "./run-identity.ts";
import { loadTask } from "./task.ts";
import { ensureTaskImage } from "./task-image.ts";
import { fixtureImage } from "./test-support.ts";
import { WarmPool } from "./warm-pool.ts";

const run = promisify(execFile);
const N = Number(process.env.BENCH_N ?? 30);
const CONCURRENT = Number(process.env.BENCH_CONCURRENT ?? 32);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}
const r1 = (x: number) => Math.round(x * 10) / 10;
const log = (o: Record<string, unknown>) => console.log(JSON.stringify(o));

async function main(): Promise<void> {
  const base = await ensureBaseImage();
  const { task, image } = await fixtureImage("fix-add");

  // 1. start → first exec vs docker run, interleaved so both see the same machine state.
  const ours: number[] = [];
  const plain: number[] = [];
  for (let i = 0; i < N; i++) {
    let t = performance.now();
    const sb = await Sandbox.start({ image: image.tag, rolloutId: `bench-${i}`, stage: "agent" });
    await sb.exec(["true"]);
    ours.push(performance.now() - t);
    await sb.remove();
    t = performance.now();
    await run("docker", ["run", "--rm", image.tag, "true"]);
    plain.push(performance.now() - t);
  }
  const startP50 = pct(ours, 50);
  const dockerP50 = pct(plain, 50);
  log({ metric: "start_to_first_exec", p50_ms: r1(startP50), p99_ms: r1(pct(ours, 99)), docker_run_p50_ms: r1(dockerP50), docker_run_p99_ms: r1(pct(plain, 99)), n: N });

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

  const leaked = (await containersOfRun(currentRun().runId)).length;
  console.log(
    JSON.stringify({
      bench: "sandbox",
      start_p50_ms: r1(startP50),
      start_p99_ms: r1(pct(ours, 99)),
      docker_run_p50_ms: r1(dockerP50),
      vs_docker_run: Math.round((startP50 / dockerP50) * 100) / 100,
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
