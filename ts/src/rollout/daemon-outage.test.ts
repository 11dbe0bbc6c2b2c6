/**
 * Docker daemon unavailable for a while, without touching the shared daemon:
 * `lego rollout` talks to Docker through a Unix-socket relay this test owns
 * (DOCKER_HOST, dockerode's own setting, for the child process only). After
 * the first group ships the relay stops listening, so every new daemon call
 * fails to connect (daemon_unreachable) while calls already under way
 * finish; after the worker has retried on it, the relay listens again.
 * Every rollout ends accounted exactly once: shipped with its real reward, or
 * dropped as a daemon env_error; never shipped with reward 0; the worker's
 * containers are all gone once it exits.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { containersOfProcess, ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS } from "../sandbox/test-support.ts";
import type { JsonLineProcess } from "../transport/bench-peers.ts";
import { receivedRows, startReceiver } from "./test-support.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const DAEMON = "/var/run/docker.sock";
const work = mkdtempSync(join(tmpdir(), "lego-rollout-daemon-outage-"));

/** A relay socket in front of the real daemon; `down()` stops accepting (new connects get ENOENT), `up()` accepts again. */
class DaemonRelay {
  private server: Server | null = null;
  private readonly open = new Set<Socket>();
  constructor(readonly path: string) {}
  up(): Promise<void> {
    // Half-open both ways: docker exec/attach close their stdin half and still read the output.
    const server = createServer({ allowHalfOpen: true }, (client) => {
      const daemon = createConnection({ path: DAEMON, allowHalfOpen: true });
      this.open.add(client);
      client.once("close", () => this.open.delete(client));
      client.pipe(daemon).pipe(client);
      client.on("error", () => daemon.destroy());
      daemon.on("error", () => client.destroy());
    });
    this.server = server;
    return new Promise((r) => server.listen(this.path, () => r()));
  }
  /** Stops listening (the socket file goes); connections already open carry on. */
  down(): Promise<void> {
    const s = this.server;
    this.server = null;
    return new Promise((r) => (s ? s.close(() => r()) : r()));
  }
  async dispose(): Promise<void> {
    await this.down();
    for (const c of this.open) c.destroy();
  }
}

describe("worker faults: Docker daemon unavailable", () => {
  let receiver: JsonLineProcess;
  let address: string;
  const relay = new DaemonRelay(join(work, "docker.sock"));
  beforeAll(async () => {
    await ensureBaseImage();
    ({ receiver, address } = await startReceiver(join(work, "rx")));
    await relay.up();
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    receiver?.stop();
    await relay.dispose();
    rmSync(work, { recursive: true, force: true });
  });

  it("turns daemon loss into retried env_errors, never reward 0, and recovers", { timeout: 600_000 }, async () => {
    const proc = spawn(LEGO, [
      "rollout", "--tasks", "easy:seed=17,count=4", "--harness", "oracle", "--group-size", "2", "--concurrency", "2", "--trainer", address,
      "--spool-dir", join(work, "tx"), "--producer-id", "daemon-outage", "--max-attempts", "3",
    ], { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, DOCKER_HOST: `unix://${relay.path}` } });
    const lines: Record<string, unknown>[] = [];
    let phase: "before" | "down" | "after" = "before";
    let outageFailures = 0;
    const transitions: Promise<void>[] = [];
    createInterface({ input: proc.stdout! }).on("line", (l) => {
      if (!l.startsWith("{")) return;
      const e = JSON.parse(l) as Record<string, unknown>;
      lines.push(e);
      if (phase === "before" && e.event === "group_shipped") {
        phase = "down";
        transitions.push(relay.down());
      } else if (phase === "down" && e.event === "rollout_retried" && String(e.envError).startsWith("daemon_")) {
        outageFailures += 1;
        if (outageFailures === 2) {
          phase = "after";
          transitions.push(Promise.all(transitions).then(() => relay.up()));
        }
      }
    });
    const code = await Promise.race([
      new Promise<number | null>((r) => proc.once("exit", (c) => r(c))),
      new Promise<never>((_, j) => setTimeout(() => j(new Error("worker did not finish in 500 s")), 500_000)),
    ]);
    await Promise.all(transitions);
    expect(code).toBe(0);
    expect(phase).toBe("after");
    const retried = lines.filter((e) => e.event === "rollout_retried");
    expect(retried.filter((e) => String(e.envError).startsWith("daemon_")).length).toBeGreaterThanOrEqual(2);
    const finished = lines.filter((e) => e.event === "rollout_finished");
    expect(finished).toHaveLength(8); // each of the 4×2 rollouts ends exactly once
    for (const f of finished) {
      if (f.status === "ok") expect(f.reward).toBe(1);
      else expect(f).toMatchObject({ status: "env_error", reward: null });
    }
    const summary = lines.at(-1)!;
    expect(summary.event).toBe("summary");
    const shipped = finished.filter((f) => f.status === "ok").length;
    expect(summary).toMatchObject({ groupsShipped: 4, trajectoriesShipped: shipped, droppedEnvErrors: 8 - shipped });

    const rows = receivedRows(join(work, "rx"));
    expect(rows).toHaveLength(shipped);
    expect(new Set(rows.map((r) => r.trajectory_id)).size).toBe(shipped);
    expect(rows.every((r) => r.status === "ok" && r.reward === 1)).toBe(true); // never a reward 0 from a dead daemon

    // Nothing the worker created survives it (asked of the real daemon, by the worker's pid label).
    expect(await containersOfProcess(proc.pid!)).toEqual([]);
  });
});
