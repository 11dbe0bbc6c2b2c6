/**
 * The staleness bound against a trainer that moves during the run: the real
 * reference harness in real sandboxes, through the proxy, against a scripted
 * engine whose every turn is stamped with the weights it "serves", shipping
 * through the real Sender to the real Python receiver, which keeps publishing
 * new policy versions (every 150 ms from the first rollout on, far faster
 * than a rollout finishes) over the announcement channel the Sender listens to.
 *
 * The engine loads the trainer's newest weights only while the worker is
 * paused (as a weight sync that lags the trainer), and the trainer stops
 * advancing at the first pause, so the run holds rollouts sampled far behind
 * (stale) and ones sampled after the resume (fresh). Asserted: the worker
 * paused new groups while more than --max-staleness behind and resumed; every
 * rollout reached the receiver once; no trajectory arrived over the bound
 * without `stale` on the record itself, each record's `stale` is exactly its
 * versions against the bound, and the trainer's own rule leaves out exactly
 * the stale ones.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { EngineClient } from "../engine/index.ts";
import { HARNESS_TOOLS, proxiedLauncher, scriptedHarnessEngine } from "../harness/index.ts";
import type { JsonLineProcess } from "../json-line-process.ts";
import { ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import { defaultTasksConfig, openTaskSource } from "../tasks/index.ts";
import { Sender } from "../transport/index.ts";
import { RolloutEvents, RolloutRunner, SummaryCollector, runWorkerLoop, type RolloutEvent } from "./index.ts";
import { startAdvancingTrainer } from "./test-support.ts";

const work = mkdtempSync(join(tmpdir(), "lego-rollout-stale-"));
const BOUND = 1;
const GROUPS = 4;
const G = 2;

/** The engine's turns carry the version of the weights it serves when the turn starts. */
function servingVersion(inner: EngineClient, version: () => number): EngineClient {
  return {
    name: inner.name,
    contextWindow: () => inner.contextWindow?.() ?? Promise.resolve(null),
    close: () => inner.close(),
    async *generate(req, signal) {
      const v = version();
      for await (const chunk of inner.generate(req, signal)) yield { ...chunk, policy_version: v };
    },
  };
}

describe("staleness bound against a trainer that advances during the run", () => {
  let trainer: JsonLineProcess;
  let address: string;
  beforeAll(async () => {
    await ensureBaseImage();
    ({ trainer, address } = await startAdvancingTrainer(join(work, "rx"), BOUND, 150));
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    trainer?.stop();
    expect(await leftoverContainers()).toEqual([]);
    rmSync(work, { recursive: true, force: true });
  });

  it("pauses new groups while over --max-staleness, resumes once the weights catch up, and flags every trajectory over the bound on its record", { timeout: 300_000 }, async () => {
    const tasks = (await openTaskSource(`easy:seed=7,count=${GROUPS}`, defaultTasksConfig())).tasks;
    const sender = new Sender({ address, spoolDir: join(work, "tx"), producerId: "stale" });
    const { harness, tools } = HARNESS_TOOLS.reference!;
    let serving = 0;
    let paused = 0;
    // While the worker is paused the engine loads the newest weights the trainer announced.
    const samplingVersion = () => (paused > 0 ? (serving = sender.policyVersion?.version ?? serving) : serving);
    const launcher = proxiedLauncher({
      harness, engineName: "scripted-gold", limits: { maxTurns: 8, timeoutSec: 120 },
      engine: (model, def) => servingVersion(scriptedHarnessEngine("scripted-gold", model, def, tools), () => serving),
    });
    const runner = new RolloutRunner({ ...launcher.runner, concurrency: 2, maxAttempts: 1 });
    const events = new RolloutEvents();
    const seen: RolloutEvent[] = [];
    events.subscribe((e) => {
      seen.push(e);
      if (e.kind === "rollout_started" && seen.filter((x) => x.kind === "rollout_started").length === 1) trainer.proc.kill("SIGUSR1");
      if (e.kind === "paused_for_staleness") {
        paused += 1;
        trainer.proc.kill("SIGUSR2");
      }
      if (e.kind === "resumed") paused -= 1;
    });
    const summary = new SummaryCollector(events);
    try {
      expect((await sender.waitForPolicyVersion(0, 30_000)).version).toBe(0);
      await runWorkerLoop(tasks, { runner, launcher, sink: sender, events }, {
        groupSize: G, concurrency: 2, maxAttempts: 1, runId: "stale", routing: null, staleness: { maxStaleness: BOUND }, samplingVersion,
      });
      await sender.drain(60_000);
    } finally {
      await runner.close();
      await sender.close();
    }

    const pauses = seen.flatMap((e) => (e.kind === "paused_for_staleness" ? [e] : []));
    const resumes = seen.flatMap((e) => (e.kind === "resumed" ? [e] : []));
    expect(pauses.length).toBeGreaterThanOrEqual(1);
    expect(resumes).toHaveLength(pauses.length);
    for (const p of pauses) expect(p.trainerVersion - p.policyVersion).toBeGreaterThan(BOUND);
    for (const r of resumes) expect(r.trainerVersion - r.policyVersion).toBeLessThanOrEqual(BOUND);
    expect(seen.findIndex((e) => e.kind === "resumed")).toBeGreaterThan(seen.findIndex((e) => e.kind === "paused_for_staleness"));

    const arrived = () => trainer.events.filter((e) => e.type === "arrived");
    await trainer.waitFor(() => arrived().length >= GROUPS * G, 30_000);
    const arrivals = arrived();
    expect(new Set(arrivals.map((a) => a.trajectory_id)).size).toBe(GROUPS * G);
    const published = trainer.events.filter((e) => e.type === "published").map((e) => e.version as number);
    for (const a of arrivals) {
      expect(a).toMatchObject({ status: "ok", reward: 1 });
      const oldest = a.min_policy_version as number;
      const atShip = a.trainer_version_at_ship as number;
      // Judged against a version the trainer really announced, no newer than it was at arrival.
      expect(published).toContain(atShip);
      expect(atShip).toBeLessThanOrEqual(a.trainer_version as number);
      expect(a.stale).toBe(atShip - oldest > BOUND);
      // No trajectory arrives over the bound unflagged; the trainer leaves out exactly the flagged ones.
      if ((a.trainer_version as number) - oldest > BOUND) expect(a.stale).toBe(true);
      expect(a.excluded).toBe(a.stale ? "stale_at_ship" : null);
    }
    expect(arrivals.some((a) => a.stale) && arrivals.some((a) => !a.stale)).toBe(true);
    expect(summary.summary()).toMatchObject({ pausedForStaleness: pauses.length, overStalenessBound: arrivals.filter((a) => a.stale).length, trajectoriesShipped: GROUPS * G });
  });
});
