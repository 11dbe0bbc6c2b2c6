/**
 * Several Docker hosts, one lost mid-run: `lego rollout --docker-host` over the
 * shared daemon and a second dockerd this test owns (TestDockerDaemon: its own
 * socket, data root, containerd, no bridge). The second host gets the base
 * image copied from the first and builds its task images itself. After the
 * first group ships, the next attempt placed on the second host is the signal
 * to SIGKILL its dockerd; the worker must mark it lost, retry that rollout on
 * the first host and keep going. Once it has, the test restarts the daemon
 * (the worker's probe sees it back). Every one of the 5×2 rollouts is
 * accounted for exactly once (shipped with reward 1; 3 attempts suffice), and
 * no container of the worker is left on either daemon.
 *
 * Two slots per host (concurrency 4): while the main host is full, a freed slot
 * on the second one takes the next attempt, so the kill always finds one there.
 * The base image is copied to the second daemon before the run, so a first run
 * on a fresh data root is not minutes slower on that host than on the main one.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerClient } from "../sandbox/docker.ts";
import { copyImage, dockerEndpoint, ensureBaseImage, LABEL } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS } from "../sandbox/test-support.ts";
import type { JsonLineProcess } from "../transport/bench-peers.ts";
import { TestDockerDaemon } from "./test-daemon.ts";
import { receivedRows, startReceiver } from "./test-support.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const MAIN = "unix:///var/run/docker.sock";
const work = mkdtempSync(join(tmpdir(), "lego-rollout-docker-hosts-"));

describe("worker faults: second Docker host lost", () => {
  let receiver: JsonLineProcess;
  let address: string;
  const second = new TestDockerDaemon("hosts");
  let mainBridge: string;
  beforeAll(async () => {
    const base = await ensureBaseImage();
    const bridge = await dockerClient().getNetwork("bridge").inspect();
    mainBridge = (bridge.Options?.["com.docker.network.bridge.name"] as string | undefined) ?? "docker0";
    await second.start();
    const onSecond = await second.docker.getImage(base.tag).inspect().then(() => true, () => false);
    if (!onSecond) await copyImage(base.tag, dockerEndpoint(MAIN), dockerEndpoint(second.endpoint));
    ({ receiver, address } = await startReceiver(join(work, "rx")));
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    receiver?.stop();
    await second.stop();
    second.removeBridge();
    rmSync(work, { recursive: true, force: true });
  });

  it("spreads over both hosts, survives losing one, every rollout once, nothing left", { timeout: 900_000 }, async () => {
    // The kill comes at the first placement on the second host after a group shipped: with 5 groups, one CI
    // run placed every later rollout on the first host (the second's slots busy to the end), so nothing was lost.
    const GROUPS = 8;
    // Typed config file for what has no flag; --docker-host twice on the command line.
    const config = join(work, "worker.toml");
    writeFileSync(config, "lost_host_wait_ms = 120000\n");
    const proc = spawn(LEGO, [
      "rollout", "--config", config, "--tasks", `easy:seed=19,count=${GROUPS}`, "--harness", "oracle", "--group-size", "2", "--concurrency", "4",
      "--trainer", address, "--spool-dir", join(work, "tx"), "--producer-id", "hosts", "--max-attempts", "3",
      "--docker-host", `${MAIN}=2`, "--docker-host", `${second.endpoint}=2`,
    ], { stdio: ["ignore", "pipe", "inherit"] });
    const lines: Record<string, unknown>[] = [];
    let phase: "before" | "armed" | "killed" | "restarted" = "before";
    const transitions: Promise<void>[] = [];
    const placedOnSecond = new Set<string>();
    let killedUnder: string | undefined;
    createInterface({ input: proc.stdout! }).on("line", (l) => {
      if (!l.startsWith("{")) return;
      const e = JSON.parse(l) as Record<string, unknown>;
      lines.push(e);
      if (e.event === "rollout_placed" && e.host === second.endpoint) placedOnSecond.add(e.rolloutId as string);
      if (phase === "before" && e.event === "group_shipped") phase = "armed";
      else if (phase === "armed" && e.event === "rollout_placed" && e.host === second.endpoint) {
        phase = "killed";
        killedUnder = e.rolloutId as string;
        transitions.push(second.kill());
      } else if (phase === "killed" && e.event === "rollout_finished" && e.status === "ok" && lines.some((x) => x.event === "docker_host_lost")) {
        // It kept working on the first host; bring the second back for the probe to find.
        phase = "restarted";
        transitions.push(Promise.all(transitions).then(() => second.start()));
      }
    });
    const code = await Promise.race([
      new Promise<number | null>((r) => proc.once("exit", (c) => r(c))),
      new Promise<never>((_, j) => setTimeout(() => j(new Error("worker did not finish in 800 s")), 800_000)),
    ]);
    await Promise.all(transitions);
    expect(code).toBe(0);
    expect(phase, `the worker's events:\n${lines.map((l) => JSON.stringify(l)).join("\n")}`).toBe("restarted");
    // The second daemon runs on its own bridge: the main daemon's is still there.
    expect(existsSync(`/sys/class/net/${mainBridge}`)).toBe(true);

    // Both hosts took rollouts before the loss.
    const placed = lines.filter((e) => e.event === "rollout_placed");
    expect(new Set(placed.map((e) => e.host))).toEqual(new Set([MAIN, second.endpoint]));
    expect(placedOnSecond.size).toBeGreaterThanOrEqual(2);
    // The loss was seen, and the probe found the host again.
    expect(lines.filter((e) => e.event === "docker_host_lost").map((e) => e.host)).toEqual([second.endpoint]);
    expect(lines.filter((e) => e.event === "docker_host_back").map((e) => e.host)).toEqual([second.endpoint]);
    // The attempt under the kill ended env_error and its rollout was retried (on a host that answered).
    const killedTrajectory = killedUnder!.slice(0, killedUnder!.lastIndexOf("."));
    expect(lines.some((e) => e.event === "rollout_retried" && e.trajectoryId === killedTrajectory)).toBe(true);

    const finished = lines.filter((e) => e.event === "rollout_finished");
    expect(finished).toHaveLength(2 * GROUPS);
    expect(new Set(finished.map((f) => f.trajectoryId)).size).toBe(2 * GROUPS);
    expect(finished.every((f) => f.status === "ok" && f.reward === 1)).toBe(true);
    const summary = lines.at(-1)!;
    expect(summary).toMatchObject({ event: "summary", groupsShipped: GROUPS, trajectoriesShipped: 2 * GROUPS, droppedEnvErrors: 0, unsweptHosts: [] });

    const rows = receivedRows(join(work, "rx"));
    expect(rows).toHaveLength(2 * GROUPS);
    expect(new Set(rows.map((r) => r.trajectory_id)).size).toBe(2 * GROUPS);
    expect(new Set(rows.map((r) => r.group_id)).size).toBe(GROUPS);
    expect(rows.every((r) => r.status === "ok" && r.reward === 1)).toBe(true);

    // No container of the worker on either daemon (asked by its pid label).
    const onMain = await dockerClient().listContainers({ all: true, filters: { label: [LABEL.pid] } });
    expect(onMain.filter((c) => (c.Labels[LABEL.pid] ?? "").startsWith(`${proc.pid}:`)).map((c) => c.Id)).toEqual([]);
    expect(await second.containersOf(proc.pid!)).toEqual([]);
  });
});
