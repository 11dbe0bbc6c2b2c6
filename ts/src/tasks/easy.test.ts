/** The easy family: deterministic variants, one image for all, graded by named tests in the real sandbox; health checks. */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { baseImageTag, ensureBaseImage, taskImageTag } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import { EASY_NAMES, easyFamily } from "./easy.ts";
import { checkHealth, healthyOnly, HealthStore, runRollout } from "./health.ts";
import { openTaskSource } from "./sources.ts";
import { easySuite } from "./suites.ts";
import { formatSweBenchJsonl } from "./swebench.ts";
import type { Task } from "./task.ts";

const work = mkdtempSync(join(tmpdir(), "lego-easy-"));
const cfg = { cacheDir: join(work, "cache"), sdistDir: join(work, "sdists"), repoRoots: [] };

describe("the easy family", () => {
  it("is the same, byte for byte, for the same seed, and different for another", () => {
    const records = (seed: number) => {
      const f = easyFamily({ seed, count: 50 });
      return formatSweBenchJsonl(f.records(f.commits.map((_, i) => `commit-${i}`)));
    };
    expect(records(7)).toBe(records(7));
    expect(records(8)).not.toBe(records(7));
  });

  it("names functions and modules with plain identifiers, never a Python keyword, builtin or standard-library module", () => {
    const reserved = new Set(execFileSync("python3", ["-c", "import keyword, builtins, sys; print(' '.join(keyword.kwlist + dir(builtins) + sorted(sys.stdlib_module_names)))"], { encoding: "utf8" }).trim().split(" "));
    for (const n of [...EASY_NAMES.functions, ...EASY_NAMES.modules, ...EASY_NAMES.helpers]) {
      expect(n).toMatch(/^[a-z_]+$/);
      expect(reserved.has(n), n).toBe(false);
    }
  });

  it("has one short instruction per variant naming the file, the call and the value, one file to fix, and held-out names no training task uses", async () => {
    const set = await openTaskSource("easy:seed=1,count=400", cfg);
    expect(set.tasks).toHaveLength(400);
    const fn = (t: Task) => /`(\w+)\(/.exec(t.record!.problem_statement)![1];
    for (const t of set.tasks) {
      const text = t.record!.problem_statement;
      expect(text.split("\n")).toHaveLength(2); // one line
      expect(text).toMatch(/`\w+\.py`/);
      expect(text).toMatch(/`\w+\([\d, ]+\)`/);
      expect(text).toMatch(/(return|give) `[\w-]+`/);
      expect(t.record!.patch.match(/^diff --git /gm)).toHaveLength(1);
      expect(t.failToPass).toHaveLength(1);
    }
    // Several phrasings, of different lengths: with one, a tiny model learned the reply's first token from
    // the prompt's length (easy.ts, PHRASINGS).
    const shapes = new Set(set.tasks.map((t) => t.record!.problem_statement.replace(/`[^`]*`/g, "`…`")));
    expect(shapes.size).toBe(6);
    expect(new Set([...shapes].map((x) => x.length)).size).toBeGreaterThanOrEqual(5);
    const train = new Set(set.tasks.filter((t) => t.split === "train").map(fn));
    const test = set.tasks.filter((t) => t.split === "test").map(fn);
    expect(test.length).toBeGreaterThan(40);
    expect(test.filter((n) => train.has(n))).toEqual([]);
    expect(new Set(set.tasks.map((t) => t.record!.lego!.template))).toEqual(new Set(["comparison", "constant", "missing_return", "operator"]));
  });

  it("takes split=train or split=test to keep one side of the split, from the same generated repository", async () => {
    const all = await openTaskSource("easy:seed=1,count=60", cfg);
    const train = await openTaskSource("easy:seed=1,count=60,split=train", cfg);
    const test = await openTaskSource("easy:seed=1,count=60,split=test", cfg);
    expect(train.tasks.map((t) => t.id)).toEqual(all.tasks.filter((t) => t.split === "train").map((t) => t.id));
    expect(test.tasks.map((t) => t.id)).toEqual(all.tasks.filter((t) => t.split === "test").map((t) => t.id));
    expect(train.tasks.length + test.tasks.length).toBe(60);
    expect(test.tasks.length).toBeGreaterThan(0);
    await expect(openTaskSource("easy:seed=1,count=60,split=dev", cfg)).rejects.toThrow(/split.*expected train or test, got 'dev'/);
  });

  it("needs one task image for all its variants", async () => {
    const set = await openTaskSource("easy:seed=1,count=400", cfg);
    const tags = new Set(await Promise.all(set.tasks.map(async (t) => taskImageTag(await t.definition(), baseImageTag()))));
    expect(tags.size).toBe(1);
  });
});

describe("easy tasks in the real sandbox", () => {
  let runner: RolloutRunner;
  let tasks: Task[];
  const store = new HealthStore(join(work, "health.json"));
  beforeAll(async () => {
    await ensureBaseImage();
    runner = await RolloutRunner.create({ concurrency: 2, maxAttempts: 1 });
    // Variants are made round-robin over the templates: four tasks, one of each.
    tasks = (await openTaskSource("easy:seed=2,count=4", cfg)).tasks;
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
    rmSync(work, { recursive: true, force: true });
  });

  it("are healthy: the gold patch scores 1 and no change scores 0, for every template", async () => {
    const results = await checkHealth(tasks, runner, store);
    expect(results.map((r) => [r.task, r.healthy, r.gold?.reward, r.empty?.reward, r.cached])).toEqual(tasks.map((t) => [t.id, true, 1, 0, false]));
    // Checked once: the same tasks again come from health.json.
    expect((await checkHealth(tasks, runner, store)).every((r) => r.cached && r.healthy)).toBe(true);
    expect((await healthyOnly(tasks, store)).healthy.map((t) => t.id)).toEqual(tasks.map((t) => t.id));
  }, 300_000);

  it("are solved by an episode that reads the file and writes the fix (no tests opened)", async () => {
    const t = tasks.find((x) => x.record!.lego!.template === "operator")!;
    const def = await t.definition();
    const path = /`(\w+\.py)`/.exec(t.record!.problem_statement)![1]!;
    const fixed = t.record!.patch.split("\n").filter((l) => /^[ +](?![+])/.test(l)).map((l) => l.slice(1)).join("\n");
    const script = `cat ${path} >/dev/null\ncat > ${path} <<'EOF'\n${fixed.trimEnd()}\nEOF\n`;
    const launcher = { name: "scripted", start: async () => ({ program: { script } }) };
    const image = taskImageTag(def, (await ensureBaseImage()).tag);
    const r = await runRollout(runner, launcher, t, def, image, "easy-scripted");
    expect([r.status, r.reward, r.flags]).toEqual(["ok", 1, []]);
  }, 120_000);

  it("quarantine a task whose gold patch does not fix it, with the reason, and keep it out of training", async () => {
    // Another variant's patch: it fixes a file this variant does not have, so gold cannot score 1.
    const broken = { ...tasks[0]!.record!, instance_id: "easy-broken", patch: tasks[1]!.record!.patch };
    const file = join(work, "broken.jsonl");
    writeFileSync(file, formatSweBenchJsonl([broken]));
    const set = await openTaskSource(file, { ...cfg, repoRoots: [join(dirname(await easySuite(cfg, { seed: "2", count: "4" })), "repos")] });
    const [r] = await checkHealth(set.tasks, runner, store);
    expect(r!.healthy).toBe(false);
    expect(r!.reason).toMatch(/^gold solution must score 1, got (ok, reward 0|agent_error, reward 0)$/);
    const split = await healthyOnly([...tasks, ...set.tasks], store);
    expect(split.healthy.map((t) => t.id)).toEqual(tasks.map((t) => t.id));
    expect(split.quarantined.map((q) => q.task)).toEqual(["easy-broken"]);
  }, 120_000);
});
