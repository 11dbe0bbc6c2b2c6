import { beforeAll, describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { ensureBaseImage } from "./base-image.ts";
import { ConcurrencyLimit } from "./concurrency.ts";
import { Sandbox } from "./container.ts";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImage, fixtureImages, leftoverContainers } from "./test-support.ts";
import { WarmPool } from "./warm-pool.ts";


// Image builds (first run on a machine only) get their own long hook timeout.
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("warm pool", () => {
  it("hands out a pre-started sandbox at once and refills behind it", async () => {
    const { tag } = await ensureBaseImage();
    const started: Sandbox[] = [];
    const pool = new WarmPool(
      async () => {
        const s = await Sandbox.start({ image: tag, rolloutId: "pool", stage: "grading" });
        started.push(s);
        return s;
      },
      (s) => s.remove(),
      { size: 2, fillConcurrency: 1 },
    ).start();
    await pool.whenFull();
    const startedBefore = started.map((s) => s.id);
    expect(startedBefore).toHaveLength(2);
    const sb = await pool.acquire();
    // "At once": the sandbox handed out is one started before the call, not one started for it
    // (a behaviour, not a timing, so a loaded CI machine cannot flake it).
    expect(startedBefore).toContain(sb.id);
    expect((await sb.sh("echo ready")).stdout).toBe("ready\n");
    await pool.whenFull();
    expect(pool.readyCount).toBe(2);
    expect(started).toHaveLength(3); // refilled behind it
    await sb.remove();
    await pool.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  it("runs rollouts from warm agent and grading containers", async () => {
    const { task, image } = await fixtureImage("fix-add");
    const runner = await RolloutRunner.create({ warmPoolSize: 1, maxAttempts: 1 });
    await runner.warm(image.tag);
    const gold = await runner.run({ task, image: image.tag, agent: { script: readFileSync(task.solveScript!, "utf8") }, rolloutId: "warm-gold" });
    const empty = await runner.run({ task, image: image.tag, agent: { script: "true" }, rolloutId: "warm-empty" });
    expect([gold.reward, empty.reward]).toEqual([1, 0]);
    await runner.close();
    expect(await leftoverContainers()).toEqual([]);
  });
});

describe("concurrency limit", () => {
  it("never runs more than its limit at once", async () => {
    const limit = new ConcurrencyLimit(2);
    let peak = 0;
    const gates: Array<() => void> = [];
    const tasks = Array.from({ length: 5 }, () =>
      limit.run(async () => {
        peak = Math.max(peak, limit.inFlight);
        await new Promise<void>((r) => gates.push(r));
      }),
    );
    // Release one at a time as each task arrives at its gate.
    for (let released = 0; released < 5; released++) {
      while (gates.length === 0) await Promise.resolve();
      gates.shift()!();
      await new Promise((r) => setImmediate(r));
    }
    await Promise.all(tasks);
    expect(peak).toBe(2);
  });
});
