import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { Sandbox } from "./container.ts";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImages, leftoverContainers, openFixtureRollouts, type FixtureTask } from "./test-support.ts";
import type { TaskDefinition } from "./task.ts";


// Image builds (first run on a machine only) get their own long hook timeout.
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("setup → agent → grading", () => {
  let runner: RolloutRunner;
  let fixAdd: FixtureTask;
  let greet: FixtureTask;
  let slugify: FixtureTask;

  beforeAll(async () => {
    ({ runner, fixAdd, greet, slugify } = await openFixtureRollouts());
  });
  afterAll(async () => {
    await runner.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  const solve = (t: TaskDefinition) => readFileSync(t.solveScript!, "utf8");

  it("scores the gold solution 1 with no defense flags", async () => {
    const o = await runner.run({ ...fixAdd, agent: { script: solve(fixAdd.task) }, rolloutId: "gold" });
    expect(o).toMatchObject({ status: "ok", reward: 1, defenseFlags: [], attempts: 1 });
    expect(o.log).toContain("5 passed");
    expect(Object.keys(o.timingsMs).sort()).toEqual(["agent", "grading", "setup"]);
  });

  it("scores the empty patch 0", async () => {
    const o = await runner.run({ ...fixAdd, agent: { script: "true" }, rolloutId: "empty" });
    expect(o).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
    expect(o.log).toContain("failed");
  });

  it("grades a Dockerfile-built task the same way", async () => {
    const gold = await runner.run({ ...greet, agent: { script: solve(greet.task) }, rolloutId: "greet-gold" });
    const empty = await runner.run({ ...greet, agent: { script: "true" }, rolloutId: "greet-empty" });
    expect([gold.reward, empty.reward]).toEqual([1, 0]);
  });

  it("the image keeps the base's ancestry and nothing beyond; the agent sees one commit; grading the ancestry", async () => {
    // fix-add's setup committed twice, then the fix on branch `fix` with tag `v1-fixed`.
    const probe = await Sandbox.start({ image: fixAdd.image, rolloutId: "history-probe", stage: "grading" });
    const image = await probe.sh("git log --all --format=%s; git tag; git cat-file --batch-all-objects --batch | grep -ac 'a + b'");
    await probe.remove();
    expect(image.stdout).toBe("calc: tests\ncalc: initial version\n0\n");
    const o = await runner.run({
      ...fixAdd,
      rolloutId: "history",
      agent: {
        // The agent's view is asserted inside the agent stage: it exits non-zero if it sees more.
        script: [
          "set -e",
          'test "$(git rev-list --all --count)" = 1',
          'test -z "$(git tag)"',
          'test "$(git branch --format=%\\(refname:short\\))" = main',
          "test ! -e .git/packed-refs",
          "test ! -e .git/ORIG_HEAD",
          "sed -i 's/return a - b/return a + b/' calc.py",
        ].join("\n"),
      },
    });
    // The hidden test_grading_sees_the_base_history_and_nothing_beyond checks grading's view.
    expect(o).toMatchObject({ status: "ok", reward: 1 });
    expect(o.log).toContain("5 passed");
  });

  it("the git shim flags history probes by the subcommand, not by the values of global -c options", async () => {
    // Claude Code hardens every git call with `-c core.alternateRefsCommand=… for-each-ref …`.
    const hardened = `git -c 'core.alternateRefsCommand=f() { git --git-dir="$1" for-each-ref; }; f' -c gc.auto=0 --no-optional-locks`;
    const plain = await runner.run({ ...fixAdd, rolloutId: "shim-plain", agent: { script: `${hardened} log --oneline -n 5 && ${hardened} status --short` } });
    expect(plain).toMatchObject({ status: "ok", defenseFlags: [] });
    const probe = await runner.run({ ...fixAdd, rolloutId: "shim-probe", agent: { script: `${hardened} -C /workspace reflog` } });
    expect(probe).toMatchObject({ status: "ok", defenseFlags: ["git_history_probe"] });
  });

  it("without needs_git_history the image holds one commit of the base tree", async () => {
    const probe = await Sandbox.start({ image: slugify.image, rolloutId: "history-probe", stage: "grading" });
    const r = await probe.sh("git log --all --format=%s; git status --porcelain; git cat-file --batch-all-objects --batch | grep -ac 're.sub'");
    await probe.remove();
    expect(r.stdout).toBe("task base\n0\n");
  });

  it("an agent that exits non-zero is agent_error with reward 0, not env_error", async () => {
    const o = await runner.run({ ...fixAdd, agent: { script: "exit 3" }, rolloutId: "crash" });
    expect(o).toMatchObject({ status: "agent_error", reward: 0 });
  });

  it("an agent past its time limit is timeout, flagged", async () => {
    const o = await runner.run({ ...fixAdd, agent: { script: "sleep 30" }, rolloutId: "slow", agentTimeoutSec: 1 });
    expect(o).toMatchObject({ status: "timeout", reward: 0, defenseFlags: ["timeout"] });
  });

  it("a process that escapes the timeout's process group and holds the output open still ends as timeout, not env_error", async () => {
    const o = await runner.run({ ...fixAdd, agent: { script: "setsid sleep 100 & sleep 100" }, rolloutId: "setsid", agentTimeoutSec: 1 });
    expect(o).toMatchObject({ status: "timeout", reward: 0, defenseFlags: ["timeout"] });
  });
});
