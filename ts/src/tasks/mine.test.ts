/**
 * The builtin suite's miner on a real project (inflection's pinned sdist,
 * fetched by set-up), in real Docker: generation is deterministic, and a
 * mined task goes end to end through setup → agent → grading on its named tests.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { ensureBaseImage, ensureTaskImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import { defaultTasksConfig } from "./config.ts";
import { GitRepo } from "./git.ts";
import { mineBuiltin } from "./mine.ts";
import { openTaskSource } from "./sources.ts";
import type { Task } from "./task.ts";

const work = mkdtempSync(join(tmpdir(), "lego-mine-"));
// The sdists come from set-up's cache (scripts/tasks/fetch-sdists); everything generated stays in `work`.
const cfg = { ...defaultTasksConfig(), cacheDir: join(work, "cache") };
const opts = { seed: 11, projects: ["inflection"], maxTasks: 2, maxCandidates: 5 };

describe("mining the builtin suite", () => {
  let runner: RolloutRunner;
  let task: Task;
  beforeAll(async () => {
    await ensureBaseImage();
    runner = await RolloutRunner.create({ concurrency: 2, maxAttempts: 1 });
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
    rmSync(work, { recursive: true, force: true });
  });

  it("gives the same tasks, byte for byte, from the same seed", async () => {
    const [a] = await mineBuiltin(cfg, join(work, "a"), opts);
    await mineBuiltin(cfg, join(work, "b"), opts);
    expect(a!.kept).toBeGreaterThanOrEqual(1);
    expect(readFileSync(join(work, "b/tasks.jsonl"))).toEqual(readFileSync(join(work, "a/tasks.jsonl")));
    const tasks = (await openTaskSource(join(work, "a"), cfg)).tasks;
    expect(tasks).toHaveLength(a!.kept);
    for (const t of tasks) {
      expect(t.split).toBe("train");
      expect(t.failToPass.length).toBeGreaterThanOrEqual(1);
      expect(t.passToPass.length).toBeGreaterThanOrEqual(1);
      // A bug report from the failing behaviour: the failing test is named, the changed code never is.
      const r = t.record!;
      expect(r.problem_statement).toContain(r.FAIL_TO_PASS[0]!);
      for (const line of r.patch.split("\n").filter((l) => /^[-+](?![-+])/.test(l) && l.trim().length > 8)) {
        expect(r.problem_statement).not.toContain(line.slice(1).trim());
      }
    }
    task = tasks[0]!;
  }, 900_000);

  it("grades a mined task on its named tests: an agent writing the fix scores 1, doing nothing 0", async () => {
    const r = task.record!;
    const def = await task.definition();
    const image = (await ensureTaskImage(def, (await ensureBaseImage()).tag)).tag;
    const path = (r.lego!.mutation as { path: string }).path;
    // The agent's edit: the file as it was before the bug (what the project shipped).
    const fixed = GitRepo.at(task.repo!.path).files(r.environment_setup_commit, [path]).get(path)!.content.toString("base64");
    const agent = { script: `cat ${path} >/dev/null\necho ${fixed} | base64 -d > ${path}\n` };
    const [solved, empty] = await Promise.all([
      runner.run({ task: def, image, rolloutId: "mined-fix", agent }),
      runner.run({ task: def, image, rolloutId: "mined-empty", agent: { script: "true" } }),
    ]);
    expect([solved.status, solved.reward, solved.defenseFlags]).toEqual(["ok", 1, []]);
    const named = r.FAIL_TO_PASS.length + r.PASS_TO_PASS.length;
    expect(solved.log).toContain(`${named} passed`);
    expect([empty.status, empty.reward]).toEqual(["ok", 0]);
    expect(empty.log).toContain(`FAILED ${r.FAIL_TO_PASS[0]}`);
    expect(empty.log).toContain(`${r.FAIL_TO_PASS.length} failed, ${r.PASS_TO_PASS.length} passed`);
  }, 300_000);
});
