/** `lego eval`: pass@k, the mixed-task filter, the results table and report, and the CLI over a real sandbox. */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import { emptyAgent, oracleAgent, type AgentLauncher } from "./agents.ts";
import { evaluate, formatTable, passAtK } from "./eval.ts";
import { openTaskSource } from "./sources.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const work = mkdtempSync(join(tmpdir(), "lego-eval-"));
const cache = join(work, "cache");
const lego = (...args: string[]) => spawnSync(LEGO, [...args, "--cache-dir", cache], { encoding: "utf8", timeout: 600_000 });

describe("pass@k", () => {
  it("is the unbiased estimator 1 - C(n-c, k) / C(n, k)", () => {
    expect(passAtK(5, 0, 1)).toBe(0);
    expect(passAtK(5, 5, 3)).toBe(1);
    expect(passAtK(4, 1, 1)).toBeCloseTo(0.25, 12);
    expect(passAtK(4, 1, 2)).toBeCloseTo(1 - 3 / 6, 12); // C(3,2)/C(4,2)
    expect(passAtK(10, 3, 5)).toBeCloseTo(1 - 21 / 252, 12); // C(7,5)/C(10,5)
  });
});

describe("lego eval", () => {
  let runner: RolloutRunner;
  beforeAll(async () => {
    await ensureBaseImage();
    runner = await RolloutRunner.create({ concurrency: 2, maxAttempts: 1 });
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
    rmSync(work, { recursive: true, force: true });
  });

  it("keeps the tasks a policy solves sometimes but not always", async () => {
    const tasks = (await openTaskSource("easy:seed=4,count=2", { cacheDir: cache, sdistDir: "", repoRoots: [] })).tasks;
    // A policy that solves the first task on its first sample only, and the second never.
    let calls = 0;
    const flaky: AgentLauncher = {
      name: "flaky",
      start: (task, def, id) => (task.id === tasks[0]!.id && id.endsWith("-1") ? oracleAgent : emptyAgent).start(task, def, id).finally(() => void calls++),
    };
    const report = await evaluate(tasks, "easy:seed=4,count=2", runner, flaky, { k: 2 });
    expect(calls).toBe(4);
    expect(report.scores.map((s) => [s.task, s.n, s.c, s.pass1, s.passK])).toEqual([
      [tasks[0]!.id, 2, 1, 0.5, 1],
      [tasks[1]!.id, 2, 0, 0, 0],
    ]);
    expect(report.mixed).toEqual([tasks[0]!.id]);
    expect([report.pass1, report.passK]).toEqual([0.25, 0.5]);
    const table = formatTable(report).split("\n");
    expect(table[0]).toMatch(/^task +sample +status +reward +flags +time_s$/);
    expect(table).toHaveLength(6);
    expect(table[5]).toMatch(/^2 tasks × k=2 with flaky: pass@1 0\.250, pass@2 0\.500; ok 4; 1 mixed; /);
  }, 300_000);

  it("--oracle scores every task 1, --empty 0, and both exit 0; --keep-mixed writes a task list the CLI reads back", () => {
    const list = join(work, "mixed.json");
    const oracle = lego("eval", "--tasks", "easy:seed=5,count=2", "--oracle", "--k", "2", "--keep-mixed", list);
    expect(oracle.status, oracle.stderr).toBe(0);
    const lines = oracle.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^task +sample +status +reward +flags +time_s$/);
    expect(lines.slice(1, 5).every((l) => / ok +1 +- /.test(l))).toBe(true);
    const report = JSON.parse(lines.at(-1)!);
    expect([report.agent, report.k, report.tasks, report.pass1, report.passK, report.statuses]).toEqual(["oracle", 2, 2, 1, 1, { ok: 4 }]);
    expect(JSON.parse(readFileSync(list, "utf8"))).toEqual({ source: "easy:seed=5,count=2", tasks: [] });
    const readBack = lego("tasks", "list", list);
    expect([readBack.status, readBack.stdout]).toEqual([0, ""]); // the oracle is never mixed: an empty selection
    const zero = lego("eval", "--tasks", "easy:seed=5,count=2", "--empty");
    expect(zero.status, zero.stderr).toBe(0);
    expect(JSON.parse(zero.stdout.trim().split("\n").at(-1)!).pass1).toBe(0);
  }, 600_000);

  it("refuses to run without saying which agent, and names the missing harness adapter", () => {
    expect(lego("eval", "--tasks", "easy").stderr).toContain("choose one of --oracle, --empty or --harness H --engine E");
    const r = lego("eval", "--tasks", "easy:count=1", "--harness", "nosuch", "--engine", "scripted");
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain("--harness: nosuch: no harness adapter registered under this name");
  });
});

describe("lego tasks", () => {
  it("lists, shows and exports a source, and lists the export as the same tasks", () => {
    const listed = lego("tasks", "list", "easy:seed=6,count=3");
    expect(listed.status, listed.stderr).toBe(0);
    const ids = listed.stdout.trim().split("\n").map((l) => JSON.parse(l).id);
    expect(ids).toHaveLength(3);
    const shown = JSON.parse(lego("tasks", "show", "easy:seed=6,count=3", ids[1]).stdout);
    expect(shown.instruction).toMatch(/`\w+\.py`/);
    expect(shown.overlay).toHaveLength(2);
    const out = join(work, "exported");
    expect(lego("tasks", "export", "easy:seed=6,count=3", "--format", "swebench", "--out", out).status).toBe(0);
    expect(lego("tasks", "list", out).stdout).toBe(listed.stdout);
    expect(lego("tasks", "list", join(out, "tasks.jsonl"), "--split", "train").stdout.trim().split("\n").length).toBeLessThanOrEqual(3);
  }, 120_000);
});
