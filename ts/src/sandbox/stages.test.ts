import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { Sandbox } from "./container.ts";
import { RolloutRunner } from "./rollout-runner.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImages, leftoverContainers, openFixtureRollouts, type FixtureTask } from "./test-support.ts";
import type { TaskDefinition } from "./task.ts";


// Image builds (first run on a machine only) get their own long hook timeout.
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("setup → agent → grading", () => {
  let runner: RolloutRunner;
  let fixAdd: FixtureTask;
  let greet: FixtureTask;

  beforeAll(async () => {
    ({ runner, fixAdd, greet } = await openFixtureRollouts());
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

  it("shows the agent a single-commit repository; grading gets the original history back", async () => {
    // The fix's commit exists in the image (branch `fix`, tag `v1-fixed`, packed by gc).
    const probe = await Sandbox.start({ image: fixAdd.image, rolloutId: "history-probe", stage: "grading" });
    const fixSha = (await probe.sh("git rev-parse v1-fixed")).stdout.trim();
    await probe.remove();
    expect(fixSha).toMatch(/^[0-9a-f]{40}$/);
    const o = await runner.run({
      ...fixAdd,
      rolloutId: "history",
      agent: {
        // The agent's view is asserted inside the agent stage: it exits non-zero if it sees more.
        script: [
          "set -e",
          'test "$(git rev-list --count HEAD)" = 1',
          'test -z "$(git tag)"',
          'test "$(git branch --format=%\\(refname:short\\))" = main',
          "test ! -e .git/packed-refs",
          "test ! -e .git/ORIG_HEAD",
          `! git cat-file -e ${fixSha} 2>/dev/null`, // the object itself is gone, not just unreferenced
          "sed -i 's/return a - b/return a + b/' calc.py",
        ].join("\n"),
      },
    });
    // The hidden test_grading_sees_the_original_history needs the 2-commit history back.
    expect(o).toMatchObject({ status: "ok", reward: 1 });
    expect(o.log).toContain("5 passed");
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
