import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import yargs from "yargs";
import { baseImageTag, ensureBaseImage } from "./base-image.ts";
import { checkTask } from "./check.ts";
import { sandboxCommand } from "./cli.ts";
import { Sandbox } from "./container.ts";
import { collectImages } from "./image-gc.ts";
import { configureSandboxHost, type SandboxHostSettings } from "./host-settings.ts";
import { quarantined } from "./image-state.ts";
import { RolloutRunner } from "../rollout/index.ts";
import { loadTask } from "./task.ts";
import { ensureTaskImage } from "./task-image.ts";
import { FIXTURES, IMAGE_BUILD_TIMEOUT_MS, fixtureImages, leftoverContainers } from "./test-support.ts";


// Image builds (first run on a machine only) get their own long hook timeout.
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("image health check, quarantine and GC", () => {
  let runner: RolloutRunner;
  let scratch: string;
  let savedHost: SandboxHostSettings;

  beforeAll(async () => {
    scratch = mkdtempSync(join(tmpdir(), "lego-check-"));
    // Quarantine records of this file stay in its own state folder.
    savedHost = configureSandboxHost({ stateDir: join(scratch, "state") });
    runner = await RolloutRunner.create({ concurrency: 2, maxAttempts: 1 });
  });
  afterAll(async () => {
    await runner.close();
    configureSandboxHost(savedHost);
    rmSync(scratch, { recursive: true, force: true });
    expect(await leftoverContainers()).toEqual([]);
  });

  it("passes a healthy task: gold scores 1, empty scores 0", async () => {
    const r = await checkTask(`${FIXTURES}fix-add`, runner);
    expect(r).toMatchObject({ healthy: true, gold: { status: "ok", reward: 1 }, empty: { status: "ok", reward: 0 } });
  });

  it("quarantines a task whose gold solution does not solve it, and rollouts then refuse the image", async () => {
    const dir = join(scratch, "broken-gold");
    cpSync(`${FIXTURES}fix-add`, dir, { recursive: true });
    writeFileSync(join(dir, "task.toml"), readFileSync(join(dir, "task.toml"), "utf8").replace('name = "fix-add"', 'name = "broken-gold"'));
    writeFileSync(join(dir, "solution/solve.sh"), "#!/bin/bash\ntrue\n");
    const r = await checkTask(dir, runner);
    expect(r.healthy).toBe(false);
    expect(r.reason).toBe("gold solution must score 1, got ok, reward 0");
    expect(quarantined(r.image)?.reason).toBe(r.reason);
    await expect(ensureTaskImage(loadTask(dir))).rejects.toMatchObject({ kind: "image_build_failed" });
  });

  /** Runs `lego sandbox ARGS…` in-process and returns the JSON lines it printed. */
  async function lego(...args: string[]): Promise<Array<Record<string, unknown>>> {
    const lines: string[] = [];
    const spy = vi.spyOn(process.stdout, "write").mockImplementation((c: string | Uint8Array) => {
      lines.push(String(c));
      return true;
    });
    try {
      await yargs(["sandbox", ...args]).command(sandboxCommand).strict().parseAsync();
    } finally {
      spy.mockRestore();
    }
    return lines.join("").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
  }

  it("`lego sandbox check` prints one JSON line per task and exits 0 when all are healthy", async () => {
    expect(await lego("check", `${FIXTURES}greet`)).toMatchObject([
      { event: "check", task: "greet", healthy: true, gold: { reward: 1 }, empty: { reward: 0 } },
    ]);
    expect(process.exitCode ?? 0).toBe(0);
  });

  it("`lego sandbox build-base`, `build`, `reap` and `gc` report as JSON", async () => {
    expect(await lego("build-base")).toMatchObject([{ event: "base", tag: baseImageTag(), cached: true }]);
    expect(await lego("build", `${FIXTURES}fix-add`)).toMatchObject([{ event: "task-image", task: "fix-add", cached: true }]);
    // Leftovers of an earlier killed run may exist; this run's own containers are alive and kept.
    expect(await lego("reap")).toMatchObject([{ event: "reap", removed: expect.any(Number), kept: expect.any(Number) }]);
    expect(await lego("gc", "--max-age-hours", "100000", "--keep", "100000")).toMatchObject([{ event: "gc", removed: [] }]);
  });

  it("collects task images unused past the age limit, but not one a container still uses", async () => {
    const base = await ensureBaseImage();
    const mk = (n: string) => {
      const dir = join(scratch, n);
      cpSync(`${FIXTURES}greet`, dir, { recursive: true });
      writeFileSync(join(dir, "task.toml"), `[metadata]\nname = "gc-probe-${n}"\n`);
      writeFileSync(join(dir, "environment/Dockerfile"), `FROM lego-rl/base\nRUN echo ${n}-${process.pid} > /probe\n`);
      return ensureTaskImage(loadTask(dir), base.tag);
    };
    const [old, busy] = await Promise.all([mk("old"), mk("busy")]);
    const holder = await Sandbox.start({ image: busy.tag, rolloutId: "gc", stage: "grading" });
    try {
      const report = await collectImages({ maxAgeMs: 0, keep: 0, now: Date.now() + 1000, match: /^lego-rl\/task-gc-probe-/ });
      expect(report.removed).toEqual([old.tag]);
      expect(report.inUse).toEqual([busy.tag]);
    } finally {
      await holder.remove();
    }
    expect((await collectImages({ maxAgeMs: 0, keep: 0, now: Date.now() + 1000, match: /^lego-rl\/task-gc-probe-/ })).removed).toEqual([busy.tag]);
  });
});
