import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { EXIT_NOT_BUILT } from "../lego-command.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const lego = (...args: string[]) => spawnSync(LEGO, args, { encoding: "utf8" });

describe("the lego CLI", () => {
  it("lists every component's subcommand in its help", () => {
    const result = lego("--help");
    expect(result.status).toBe(0);
    for (const command of ["rollout", "proxy", "sandbox", "transport", "monitor", "demo"]) {
      expect(result.stdout).toContain(`lego ${command}`);
    }
  });

  it("refuses a subcommand whose component is not built yet with exit code 2 and says so", () => {
    const result = lego("monitor", "--port", "8080");
    expect(result.status).toBe(EXIT_NOT_BUILT);
    expect(result.stdout).toBe("");
    expect(result.stderr).toContain("'lego monitor' is not available yet");
    expect(result.stderr).toContain("Nothing was run.");
  });

  it("reports a user error in one line without a stack trace, and the trace only with --verbose", { timeout: 60_000 }, () => {
    const missing = join(tmpdir(), `lego-missing-${process.pid}`);
    const plain = lego("sandbox", "check", missing);
    expect(plain.status).toBe(1);
    expect(plain.stdout).toBe("");
    expect(plain.stderr.trim().split("\n")).toEqual([
      `lego: task ${missing}: task.toml: missing — check the task folder's path and files (docs/tasks.md), or add --verbose for the stack trace`,
    ]);
    const verbose = lego("sandbox", "check", missing, "--verbose");
    expect(verbose.status).toBe(1);
    expect(verbose.stderr).toContain(`TaskFormatError: task ${missing}: task.toml: missing`);
    expect(verbose.stderr).toMatch(/\n\s+at .*task\.ts:\d+/);
  });

  it("refuses an unknown subcommand with a usage error", () => {
    const result = lego("trian");
    expect(result.status).toBe(1);
    expect(result.stderr).toContain("Unknown argument: trian");
  });

  it("demo --schema-only writes rollout batches that the Python side validates", { timeout: 60_000 }, () => {
    const work = mkdtempSync(join(tmpdir(), "lego-demo-"));
    try {
      const result = lego("demo", "--schema-only", "--work-dir", work);
      expect(result.status, result.stderr).toBe(0);
      expect(result.stdout).toContain("is not built yet");
      expect(result.stdout).toContain("demo-g0-r1 [reference] ok reward=0");
      expect(result.stdout).toContain("may train: yes");
      expect(readdirSync(join(work, "spool")).sort()).toEqual(["group-0.arrow", "group-1.arrow"]);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  // The whole loop (plain `lego demo`) is pinned by tests/test_the_loop_smoke.py and the demo's report test.
  it("demo --toy trains the tiny MoE policy with GSPO on Ray alone and reports each step", { timeout: 300_000 }, () => {
    const work = mkdtempSync(join(tmpdir(), "lego-demo-"));
    try {
      const result = lego("demo", "--toy", "--work-dir", work, "--steps", "2");
      expect(result.status, result.stderr).toBe(0);
      expect(result.stdout).toContain("without harness, proxy or sandbox");
      expect(result.stdout).toMatch(/step {3}2 {2}policy v2 {2}rollout\/trainer Pearson 0\.99\d+|step {3}2 {2}policy v2 {2}rollout\/trainer Pearson 1\.0+/);
      expect(result.stdout).toMatch(/mean reward: first fifth of the steps \d\.\d{3}, last fifth \d\.\d{3}/);
      expect(readdirSync(join(work, "checkpoints"))).toContain("step-00000002");
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });
});
