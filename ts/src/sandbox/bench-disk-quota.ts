/**
 * Disk-quota benchmark (not a test): `pnpm bench:disk-quota [--n 30]`.
 * What the per-container quota (disk-quota.ts: a loop-mounted ext4 under the
 * writable layer) adds to a container start: start → first exec of a cached
 * task image, with the default 1 GiB quota taken from the pool of prepared
 * filesystems (quota-pool.ts, refilled before each start, outside the clock),
 * with the quota made in place (pool off), and without (diskBytes 0),
 * interleaved so all see the same machine state. Two containers start per
 * rollout (agent, grading). `--n` (default 30) sets the triples.
 * The last line is one JSON object.
 */
import { benchFlags, positiveInt } from "../bench/index.ts";
import { Sandbox } from "./container.ts";
import { configureSandboxHost, sandboxHost } from "./host-settings.ts";
import { drainQuotaPools, warmQuotaPool } from "./quota-pool.ts";
import { containersOfRun } from "./reaper.ts";
import { currentRun } from "./run-identity.ts";
import { fixtureImage } from "./test-support.ts";
import { DEFAULT_LIMITS } from "./types.ts";

const N = positiveInt("n", benchFlags({ n: { default: "30", describe: "pairs" } }).n);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}
const r1 = (x: number) => Math.round(x * 10) / 10;

async function startToExec(image: string, diskBytes: number, i: number): Promise<number> {
  const t = performance.now();
  const sb = await Sandbox.start({ image, rolloutId: `bench-quota-${i}`, stage: "agent", limits: { ...DEFAULT_LIMITS, diskBytes } });
  await sb.exec(["true"]);
  const ms = performance.now() - t;
  await sb.remove();
  return ms;
}

async function main(): Promise<void> {
  const { image } = await fixtureImage("fix-add");
  const pooled: number[] = [];
  const quota: number[] = [];
  const none: number[] = [];
  const poolSize = sandboxHost().quotaPoolSize;
  for (let i = 0; i < N; i++) {
    await warmQuotaPool(DEFAULT_LIMITS.diskBytes);
    pooled.push(await startToExec(image.tag, DEFAULT_LIMITS.diskBytes, i));
    await warmQuotaPool(DEFAULT_LIMITS.diskBytes);
    configureSandboxHost({ quotaPoolSize: 0 });
    quota.push(await startToExec(image.tag, DEFAULT_LIMITS.diskBytes, i));
    configureSandboxHost({ quotaPoolSize: poolSize });
    none.push(await startToExec(image.tag, 0, i));
  }
  await drainQuotaPools();
  const leaked = (await containersOfRun(currentRun().runId)).length;
  console.log(JSON.stringify({
    bench: "disk_quota", n: N,
    pooled_p50_ms: r1(pct(pooled, 50)), pooled_p99_ms: r1(pct(pooled, 99)),
    quota_p50_ms: r1(pct(quota, 50)), quota_p99_ms: r1(pct(quota, 99)),
    no_quota_p50_ms: r1(pct(none, 50)), no_quota_p99_ms: r1(pct(none, 99)),
    added_p50_ms: r1(pct(pooled, 50) - pct(none, 50)), in_place_added_p50_ms: r1(pct(quota, 50) - pct(none, 50)), leaked,
  }));
}

await main();
