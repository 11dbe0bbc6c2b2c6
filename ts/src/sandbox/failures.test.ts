import { afterAll, beforeAll, describe, expect, it } from "vitest";
import Docker from "dockerode";
import { readFileSync } from "node:fs";
import type { AgentSandbox } from "./agent-sandbox.ts";
import type { Sandbox } from "./container.ts";
import { SandboxEnvError, daemonError } from "./errors.ts";
import { RolloutRunner, type RolloutRunnerConfig } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImage, fixtureImages, leftoverContainers } from "./test-support.ts";
import type { TaskDefinition } from "./task.ts";

/** A runner whose first `failures` agent containers fail the way `fail` says. */
class FaultyRunner extends RolloutRunner {
  calls = 0;
  constructor(
    config: Partial<RolloutRunnerConfig>,
    private readonly failures: number,
    private readonly fail: (box: AgentSandbox) => Promise<AgentSandbox>,
    private readonly breakGrading?: (sb: Sandbox) => Promise<void>,
  ) {
    super(config);
  }
  override async agent(image: string, rolloutId: string): Promise<AgentSandbox> {
    const box = await super.agent(image, rolloutId);
    return this.calls++ < this.failures ? this.fail(box) : box;
  }
  override async grading(image: string, rolloutId: string): Promise<Sandbox> {
    const sb = await super.grading(image, rolloutId);
    await this.breakGrading?.(sb);
    return sb;
  }
}


// Image builds (first run on a machine only) get their own long hook timeout.
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("failure typing: env_error vs agent outcomes", () => {
  let fixAdd: { task: TaskDefinition; image: string };
  let gold: string;
  const runners: RolloutRunner[] = [];

  beforeAll(async () => {
    const a = await fixtureImage("fix-add");
    fixAdd = { task: a.task, image: a.image.tag };
    gold = readFileSync(a.task.solveScript!, "utf8");
  });
  afterAll(async () => {
    await Promise.all(runners.map((r) => r.close()));
    expect(await leftoverContainers()).toEqual([]);
  });

  const daemonFault = async (box: AgentSandbox): Promise<AgentSandbox> => {
    await box.remove();
    throw new SandboxEnvError("daemon_error", "injected: daemon refused the create", { container: box.sandbox.id });
  };

  it("retries an env_error and reports the attempt that succeeded", async () => {
    const r = new FaultyRunner({ maxAttempts: 3 }, 1, daemonFault);
    runners.push(r);
    const o = await r.run({ ...fixAdd, agent: { script: gold }, rolloutId: "retry" });
    expect(o).toMatchObject({ status: "ok", reward: 1, attempts: 2 });
  });

  it("gives up after maxAttempts with env_error and a null reward (never a training zero)", async () => {
    const r = new FaultyRunner({ maxAttempts: 2 }, 5, daemonFault);
    runners.push(r);
    const o = await r.run({ ...fixAdd, agent: { script: gold }, rolloutId: "exhaust" });
    expect(o).toMatchObject({ status: "env_error", reward: null, attempts: 2, envError: { kind: "daemon_error" } });
  });

  it("a container that dies under the rollout is container_died", async () => {
    const r = new FaultyRunner({ maxAttempts: 1 }, 1, async (box) => {
      await box.sandbox.stop(0);
      return box;
    });
    runners.push(r);
    const o = await r.run({ ...fixAdd, agent: { script: gold }, rolloutId: "died" });
    expect(o).toMatchObject({ status: "env_error", reward: null, envError: { kind: "container_died" } });
  });

  it("a grader that cannot produce a verdict is grader_crashed", async () => {
    // Without python3 the trusted runner cannot start; the agent did nothing wrong.
    const r = new FaultyRunner({ maxAttempts: 1 }, 0, async (b) => b, async (sb) => {
      await sb.exec(["rm", "-f", "/usr/bin/python3"], { user: "0:0" });
    });
    runners.push(r);
    const o = await r.run({ ...fixAdd, agent: { script: gold }, rolloutId: "grader" });
    expect(o).toMatchObject({ status: "env_error", reward: null, envError: { kind: "grader_crashed" } });
  });

  it("an unreachable Docker daemon is daemon_unreachable, with what to check", async () => {
    const err = await new Docker({ socketPath: "/nonexistent/docker.sock" }).ping().catch((e: unknown) => daemonError(e, "ping"));
    expect(err).toBeInstanceOf(SandboxEnvError);
    expect((err as SandboxEnvError).kind).toBe("daemon_unreachable");
    expect((err as SandboxEnvError).hint).toContain("docker.sock");
  });

  it("an inference engine that failed during the agent stage is engine_unreachable, and the retry runs", async () => {
    const r = await RolloutRunner.create({ maxAttempts: 2 });
    runners.push(r);
    const faults = ["proxy: engine 127.0.0.1:1 refused the connection"];
    const o = await r.run({ ...fixAdd, agent: { script: gold }, rolloutId: "engine", engineFault: () => faults.shift() });
    expect(o).toMatchObject({ status: "ok", reward: 1, attempts: 2 });
    const once = await RolloutRunner.create({ maxAttempts: 1 });
    runners.push(once);
    const lone = await once.run({ ...fixAdd, agent: { script: gold }, rolloutId: "engine-down", engineFault: () => "proxy: engine down" });
    expect(lone).toMatchObject({ status: "env_error", reward: null, envError: { kind: "engine_unreachable" } });
  });
});
