/** `lego check --config`: the shipped Qwen3-30B-A3B-shaped job files pass on a machine without a GPU; a broken one fails naming the fix. */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const REPO = resolve(import.meta.dirname, "../../..");
const LEGO = join(REPO, "ts/bin/lego");
const JOB = "examples/qwen3-30b-a3b/train-job.toml";
const lego = (...args: string[]) => spawnSync(LEGO, ["check", "--min-free-gib", "0.1", ...args], { cwd: REPO, encoding: "utf8", timeout: 240_000 });

describe("lego check --config", () => {
  it("passes the shipped Qwen3-30B-A3B-shaped jobs, stating the memory per GPU", { timeout: 300_000 }, () => {
    for (const job of [JOB, "examples/qwen3-30b-a3b/train-job-sglang.toml"]) {
      const r = lego("--config", job);
      expect(r.status, r.stdout + r.stderr).toBe(0);
      for (const name of ["job", "model", "expert parallel", "devices", "placement", "memory", "engines"]) expect(r.stdout).toMatch(new RegExp(`^ok {3}${name}: `, "m"));
      expect(r.stdout).toMatch(/ok {3}memory: 30\.53B parameters .* within 90% of 1 x (80|141) GiB/);
    }
  });

  it("fails a job whose experts do not split over its ranks, naming the divisors", { timeout: 300_000 }, () => {
    const dir = mkdtempSync(join(tmpdir(), "job-check-"));
    try {
      const broken = join(dir, "job.toml");
      writeFileSync(broken, readFileSync(join(REPO, JOB), "utf8").replace(/^trainer_ranks = 16.*$/m, "trainer_ranks = 12"));
      const r = lego("--config", broken);
      expect(r.status).toBe(1);
      expect(r.stdout).toContain("FAIL expert parallel: 128 experts do not split evenly over cluster.trainer_ranks = 12");
      expect(r.stdout).toContain("fix: set cluster.trainer_ranks to a divisor of 128: 1, 2, 4, 8, 16, 32, 64, 128");
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });

  it("fails a file that is not there as a job failure, not a crash", { timeout: 300_000 }, () => {
    const r = lego("--config", "examples/no-such-job.toml");
    expect(r.status).toBe(1);
    expect(r.stdout).toContain("FAIL job: examples/no-such-job.toml: no such config file");
  });
});
