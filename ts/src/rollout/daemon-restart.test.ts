/**
 * The Docker daemon itself restarts under a worker run. `lego rollout
 * --docker-host` names only a dockerd this test owns (TestDockerDaemon
 * "restart": its own socket, data root, containerd and bridge), so the
 * shared main daemon, which other test files use at the same time, is never
 * touched. 4 groups of 2, the oracle agent, concurrency 2. The base image is
 * copied to the daemon before the run (it has no other host to copy from).
 *
 * After the first group ships, the next attempt placed is the signal to stop
 * dockerd cleanly (SIGTERM: it stops its containers and exits) and start it
 * again. Once the worker has finished a rollout on the restarted daemon, the
 * next placement is the signal to SIGKILL dockerd and its containerd (a crash:
 * the containers' shims live on) and start it again. Both times the attempts
 * running under the restart end env_error and are retried once the daemon
 * answers; every one of the 8 rollouts is shipped once with reward 1; and no
 * container is left on the daemon, though removals failed while it was away.
 *
 * Five attempts: a dockerd stopping cleanly still answers pings for about a
 * second after its shutdown is "complete", failing container starts
 * (daemon_error), so an attempt retried into that window fails again before
 * the process exits; with the doubling back-off (1, 2, 4, 8 s) five attempts
 * outlast that window and the crash restart together.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { copyImage, dockerEndpoint, ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS } from "../sandbox/test-support.ts";
import type { JsonLineProcess } from "../json-line-process.ts";
import { TestDockerDaemon } from "./test-daemon.ts";
import { receivedRows, startReceiver } from "./test-support.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const work = mkdtempSync(join(tmpdir(), "lego-rollout-daemon-restart-"));
type Line = Record<string, unknown>;

describe("worker faults: the Docker daemon restarts", () => {
  let receiver: JsonLineProcess;
  let address: string;
  // Its own bridge subnet: docker-hosts.test.ts's daemon ("hosts") may run at the same time.
  const daemon = new TestDockerDaemon("restart", "169.254.214.1/24");
  beforeAll(async () => {
    const base = await ensureBaseImage();
    await daemon.start();
    const there = await daemon.docker.getImage(base.tag).inspect().then(() => true, () => false);
    if (!there) await copyImage(base.tag, dockerEndpoint("unix:///var/run/docker.sock"), dockerEndpoint(daemon.endpoint));
    ({ receiver, address } = await startReceiver(join(work, "rx")));
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    receiver?.stop();
    await daemon.stop();
    daemon.removeBridge();
    rmSync(work, { recursive: true, force: true });
  });

  it("retries the attempts under a clean restart and a crash restart, ships every rollout once, leaves nothing", { timeout: 600_000 }, async () => {
    const proc = spawn(LEGO, [
      "rollout", "--tasks", "easy:seed=29,count=4", "--harness", "oracle", "--group-size", "2", "--concurrency", "2",
      "--trainer", address, "--spool-dir", join(work, "tx"), "--producer-id", "daemon-restart", "--max-attempts", "5",
      "--docker-host", daemon.endpoint,
    ], { stdio: ["ignore", "pipe", "pipe"] });
    // Kept for the failure message: a worker that ends with an exception says why only on stderr.
    let stderr = "";
    proc.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-8000)));
    const lines: Line[] = [];
    let phase: "before" | "armed" | "stopped" | "rearmed" | "killed" = "before";
    let restartedOnce = false;
    const under: { stopped?: string; killed?: string } = {};
    const transitions: Promise<void>[] = [];
    createInterface({ input: proc.stdout! }).on("line", (l) => {
      if (!l.startsWith("{")) return;
      const e = JSON.parse(l) as Line;
      lines.push(e);
      if (phase === "before" && e.event === "group_shipped") phase = "armed";
      else if (phase === "armed" && e.event === "rollout_placed") {
        phase = "stopped";
        under.stopped = e.rolloutId as string;
        transitions.push(daemon.stop().then(() => daemon.start()).then(() => void (restartedOnce = true)));
      } else if (phase === "stopped" && restartedOnce && e.event === "rollout_finished" && e.status === "ok") phase = "rearmed";
      else if (phase === "rearmed" && e.event === "rollout_placed") {
        phase = "killed";
        under.killed = e.rolloutId as string;
        transitions.push(daemon.kill().then(() => daemon.start()));
      }
    });
    const code = await Promise.race([
      new Promise<number | null>((r) => proc.once("exit", (c) => r(c))),
      new Promise<never>((_, j) => setTimeout(() => j(new Error("worker did not finish in 500 s")), 500_000)),
    ]);
    await Promise.all(transitions);
    const log = `the worker's events:\n${lines.map((x) => JSON.stringify(x)).join("\n")}\nits stderr (tail):\n${stderr}`;
    expect(code, log).toBe(0);
    expect(phase, log).toBe("killed");

    // The attempt placed at each restart ended env_error and its rollout was retried.
    for (const attemptId of [under.stopped!, under.killed!]) {
      const dot = attemptId.lastIndexOf(".");
      const retried = lines.find((e) => e.event === "rollout_retried" && e.trajectoryId === attemptId.slice(0, dot) && e.attempt === Number(attemptId.slice(dot + 1)));
      expect(retried, `${attemptId} was not retried; ${log}`).toBeDefined();
    }

    const finished = lines.filter((e) => e.event === "rollout_finished");
    expect(finished).toHaveLength(8);
    expect(new Set(finished.map((f) => f.trajectoryId)).size).toBe(8);
    expect(finished.every((f) => f.status === "ok" && f.reward === 1), log).toBe(true);
    expect(lines.at(-1)).toMatchObject({ event: "summary", groupsShipped: 4, trajectoriesShipped: 8, droppedEnvErrors: 0, unsweptHosts: [] });

    const rows = receivedRows(join(work, "rx"));
    expect(rows.map((r) => r.trajectory_id).sort()).toEqual(finished.map((f) => f.trajectoryId).sort());
    expect(new Set(rows.map((r) => r.group_id)).size).toBe(4);
    expect(rows.every((r) => r.status === "ok" && r.reward === 1)).toBe(true);

    // The daemon ran nothing but this worker: nothing at all may be left on it.
    expect(await daemon.docker.listContainers({ all: true })).toEqual([]);
  });
});
