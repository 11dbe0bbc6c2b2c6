import { RolloutRunner } from "../sandbox/index.ts";
import { checkHealth, HealthStore, openTaskSource } from "./index.ts";
const cfg = { cacheDir: "/tmp/i22/cache", sdistDir: "/tmp/i22-sdists", repoRoots: [] };
const t0 = performance.now();
const set = await openTaskSource("easy:count=8", cfg);
console.log("opened", set.tasks.length, performance.now() - t0);
const runner = await RolloutRunner.create({ concurrency: 2, maxAttempts: 1 });
try {
  const res = await checkHealth(set.tasks, runner, new HealthStore("/tmp/i22/cache/health.json"), { log: (l) => console.error(l) });
  for (const r of res) console.log(JSON.stringify({ task: r.task, healthy: r.healthy, reason: r.reason, gold: r.gold?.ms, empty: r.empty?.ms }));
} finally { await runner.close(); }
console.log("total ms", performance.now() - t0);
