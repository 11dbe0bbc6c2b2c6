/**
 * DockerHosts against the real shared daemon (reached under two endpoint names,
 * so placement can be observed without a second daemon) and a socket nobody
 * serves: placement by free slots, a dead endpoint starting lost and probed,
 * none answering a clear error, and the config's docker_hosts field. Slots of a
 * host without `=SLOTS`: the rule (`hostSlots`), and the real daemon's `docker
 * info` giving them, in DockerHosts and in `lego rollout`'s own output.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, describe, expect, it } from "vitest";
import { dockerClient } from "../sandbox/docker.ts";
import { DEFAULT_LIMITS } from "../sandbox/index.ts";
import { DEFAULT_CPU_OVERSUBSCRIPTION, DockerHosts, RolloutEvents, buildWorkerConfig, hostSlots, parseDockerHostSpec, readWorkerConfigFile, type RolloutEvent } from "./index.ts";
import { startReceiver } from "./test-support.ts";

const dir = mkdtempSync(join(tmpdir(), "lego-rollout-hosts-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const A = "unix:///var/run/docker.sock";
const B = "/var/run/docker.sock";
const NOBODY = `unix://${join(dir, "nobody.sock")}`;
const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const GIB = 2 ** 30;
const ONE_CPU = { ...DEFAULT_LIMITS, cpus: 1, memoryBytes: GIB / 2 };
/** The capacity options of a run at concurrency `cap` with the default limits. */
const capacity = (cap: number, cpuOversubscription = DEFAULT_CPU_OVERSUBSCRIPTION) => ({ cpuOversubscription, cap });
/** What the real daemon says about its machine, and the slots the rule gives it. */
async function daemonSlots(cpuOversubscription: number, cap: number): Promise<{ cpus: number; memoryBytes: number; slots: number }> {
  const info = (await dockerClient().info()) as { NCPU: number; MemTotal: number };
  const slots = Math.min(cap, Math.floor((info.NCPU * cpuOversubscription) / DEFAULT_LIMITS.cpus), Math.floor(info.MemTotal / DEFAULT_LIMITS.memoryBytes));
  return { cpus: info.NCPU, memoryBytes: info.MemTotal, slots };
}

describe("docker hosts", () => {
  it("parses ENDPOINT and ENDPOINT=SLOTS; the config takes docker_hosts from file and flags, rejecting bad endpoints", () => {
    expect(parseDockerHostSpec("tcp://10.0.0.2:2375=8")).toEqual({ endpoint: "tcp://10.0.0.2:2375", slots: 8 });
    expect(parseDockerHostSpec("ssh://lego@gpu-3")).toEqual({ endpoint: "ssh://lego@gpu-3", slots: null });
    expect(() => parseDockerHostSpec("unix:///x.sock=0")).toThrow(/slots must be ≥ 1/);
    const base = { tasks: "easy", harness: "oracle", trainer: "tcp://127.0.0.1:1" };
    const f = join(dir, "h.toml");
    writeFileSync(f, `docker_hosts = ["${A}", "ssh://lego@gpu-3=4"]\nlost_host_wait_ms = 5000\n`);
    expect(buildWorkerConfig(readWorkerConfigFile(f), base)).toMatchObject({ dockerHosts: [A, "ssh://lego@gpu-3=4"], lostHostWaitMs: 5000 });
    expect(buildWorkerConfig(readWorkerConfigFile(f), { ...base, dockerHosts: ["tcp://h:2375"] }).dockerHosts).toEqual(["tcp://h:2375"]);
    expect(buildWorkerConfig({}, base).dockerHosts).toEqual([]);
    writeFileSync(f, 'docker_hosts = "unix:///x"\n');
    expect(() => readWorkerConfigFile(f)).toThrow(/docker_hosts must be a list of strings/);
    expect(() => buildWorkerConfig({}, { ...base, dockerHosts: ["http://h:2375"] })).toThrow(/--docker-host: .*unsupported scheme http:/);
    expect(() => buildWorkerConfig({}, { ...base, dockerHosts: ["tcp://h"] })).toThrow(/tcp:\/\/ needs HOST:PORT/);
    expect(() => buildWorkerConfig({}, { ...base, dockerHosts: [A, A] })).toThrow(/given twice/);
  });

  it("places each attempt on the host with the most free slots, in that host's scope", { timeout: 60_000 }, async () => {
    const hosts = await DockerHosts.open([{ endpoint: A, slots: 1 }, { endpoint: B, slots: 3 }], { capacity: capacity(4) });
    const order: string[] = [];
    const releases: (() => void)[] = [];
    const held = Array.from({ length: 5 }, (_, i) => hosts.place(`r${i}`, async (h) => {
      order.push(h.endpoint.name);
      // The sandbox's client in here is this host's.
      expect(dockerClient()).toBe(h.endpoint.docker);
      await new Promise<void>((r) => releases.push(r));
    }));
    // Four fit (3 + 1); the fifth waits for a slot.
    await expect.poll(() => order.length, { timeout: 5_000 }).toBe(4);
    expect(order[0]).toBe(B); // 3 free beats 1 free
    expect(order.filter((n) => n === B)).toHaveLength(3);
    expect(order.filter((n) => n === A)).toHaveLength(1);
    releases.shift()!(); // the first, a B attempt, ends: B has the only free slot
    await expect.poll(() => order.length, { timeout: 5_000 }).toBe(5);
    expect(order[4]).toBe(B);
    for (const r of releases.splice(0)) r();
    await Promise.all(held);
    expect(hosts.hosts.every((h) => h.inFlight === 0)).toBe(true);
    expect((await hosts.close()).unswept).toEqual([]);
  });

  it("starts a dead endpoint lost (probed, no attempts placed there); none answering is a clear error", { timeout: 60_000 }, async () => {
    const events = new RolloutEvents();
    const seen: string[] = [];
    events.subscribe((e) => e.kind === "docker_host_lost" && seen.push(e.host));
    const hosts = await DockerHosts.open([{ endpoint: NOBODY, slots: 4 }, { endpoint: A, slots: 1 }], { capacity: capacity(1), events, probeMs: 50 });
    expect(seen).toEqual([NOBODY]);
    const placed = await Promise.all([0, 1, 2].map((i) => hosts.place(`x${i}`, async (h) => h.endpoint.name)));
    expect(placed).toEqual([A, A, A]);
    expect((await hosts.close()).unswept).toEqual([]); // nothing was placed there
    await expect(DockerHosts.open([{ endpoint: NOBODY, slots: 1 }], { capacity: capacity(1) })).rejects.toThrow(/no Docker host answers: unix:\/\/.*nobody.sock/);
  });

  it("gives a host without =SLOTS min(cap, CPUs × oversubscription / sandbox CPUs, memory / sandbox memory)", () => {
    const rule = { limits: ONE_CPU, cpuOversubscription: 4, cap: 64 };
    // CPU binds: 8 CPUs × 4 = 32 sandboxes of one CPU; 64 GiB fits 128 of 0.5 GiB.
    expect(hostSlots("h", { cpus: 8, memoryBytes: 64 * GIB }, rule)).toEqual({
      host: "h", slots: 32, source: "daemon", cpus: 8, memoryBytes: 64 * GIB, cpuSlots: 32, memorySlots: 128, cap: 64,
    });
    // Memory binds (never oversubscribed): 6 GiB fits 12 of 0.5 GiB.
    expect(hostSlots("h", { cpus: 8, memoryBytes: 6 * GIB }, rule).slots).toBe(12);
    // The worker's concurrency binds: more slots could never fill.
    expect(hostSlots("h", { cpus: 64, memoryBytes: 512 * GIB }, rule).slots).toBe(64);
    // Half-CPU sandboxes fit twice as many; a factor of 1 is no oversubscription; 2.5 × 3 = 7.5 rounds down.
    expect(hostSlots("h", { cpus: 2, memoryBytes: 64 * GIB }, { ...rule, limits: { ...ONE_CPU, cpus: 0.5 } }).slots).toBe(16);
    expect(hostSlots("h", { cpus: 2, memoryBytes: 64 * GIB }, { ...rule, cpuOversubscription: 1 }).slots).toBe(2);
    expect(hostSlots("h", { cpus: 3, memoryBytes: 64 * GIB }, { ...rule, cpuOversubscription: 2.5 }).slots).toBe(7);
    // Not even one sandbox fits: the operator's to fix, said with the numbers.
    expect(() => hostSlots("tcp://small:2375", { cpus: 1, memoryBytes: GIB / 4 }, rule)).toThrow(
      "docker host tcp://small:2375: 1 CPU(s) × 4 and 0.25 GiB of memory do not fit one sandbox (1 CPU, 0.50 GiB): give it =SLOTS or lower the limits");
    expect(() => hostSlots("h", { cpus: 1, memoryBytes: 8 * GIB }, { ...rule, limits: { ...ONE_CPU, cpus: 2 }, cpuOversubscription: 1 })).toThrow(/do not fit one sandbox/);
  });

  it("reads a host's slots from the real daemon's docker info; =SLOTS stays configured; placement prefers the most free", { timeout: 60_000 }, async () => {
    const events = new RolloutEvents();
    const seen: RolloutEvent[] = [];
    events.subscribe((e) => e.kind === "docker_host_capacity" && seen.push(e));
    const expected = await daemonSlots(1.5, 64);
    const hosts = await DockerHosts.open([{ endpoint: A, slots: null }, { endpoint: B, slots: 1 }], { capacity: capacity(64, 1.5), events });
    const fromDaemon = { host: A, slots: expected.slots, source: "daemon", cpus: expected.cpus, memoryBytes: expected.memoryBytes, cap: 64 };
    expect(seen).toEqual([
      expect.objectContaining({ kind: "docker_host_capacity", host: B, slots: 1, source: "configured" }),
      expect.objectContaining({ kind: "docker_host_capacity", ...fromDaemon }),
    ]);
    expect(hosts.capacities()).toEqual([expect.objectContaining(fromDaemon), { host: B, slots: 1, source: "configured" }]);
    expect(hosts.hosts.map((h) => h.slots)).toEqual([expected.slots, 1]);
    // The capped case: at concurrency 1 the daemon's host gets 1 slot, whatever its machine.
    const capped = await DockerHosts.open([{ endpoint: A, slots: null }], { capacity: capacity(1) });
    expect(capped.hosts[0]!.slots).toBe(1);
    if (expected.slots > 1) expect(await hosts.place("r0", async (h) => h.endpoint.name)).toBe(A);
    expect((await hosts.close()).unswept).toEqual([]);
    expect((await capped.close()).unswept).toEqual([]);
  });

  it("lego rollout with a --docker-host without =SLOTS says the slots its daemon gave, in its events and summary", { timeout: 300_000 }, async () => {
    const { receiver, address } = await startReceiver(join(dir, "rx"));
    try {
      const expected = await daemonSlots(1.5, 64);
      const proc = spawn(LEGO, [
        "rollout", "--tasks", "easy:seed=31,count=1", "--harness", "oracle", "--group-size", "2", "--concurrency", "64",
        "--trainer", address, "--spool-dir", join(dir, "tx"), "--producer-id", "capacity", "--docker-host", A, "--cpu-oversubscription", "1.5",
      ], { stdio: ["ignore", "pipe", "inherit"] });
      const lines: Record<string, unknown>[] = [];
      createInterface({ input: proc.stdout! }).on("line", (l) => l.startsWith("{") && lines.push(JSON.parse(l) as Record<string, unknown>));
      const code = await Promise.race([
        new Promise<number | null>((r) => proc.once("exit", (c) => r(c))),
        new Promise<never>((_, j) => setTimeout(() => j(new Error("worker did not finish in 240 s")), 240_000)),
      ]);
      expect(code).toBe(0);
      const fromDaemon = { host: A, slots: expected.slots, source: "daemon", cpus: expected.cpus, memoryBytes: expected.memoryBytes, cap: 64 };
      expect(lines.filter((e) => e.event === "docker_host_capacity")).toEqual([expect.objectContaining({ event: "docker_host_capacity", ...fromDaemon })]);
      expect(lines.filter((e) => e.event === "rollout_placed").map((e) => e.host)).toEqual([A, A]);
      const summary = lines.at(-1)!;
      expect(summary).toMatchObject({ event: "summary", groupsShipped: 1, unsweptHosts: [], dockerHosts: [fromDaemon] });
      expect(summary.config).toMatchObject({ cpuOversubscription: 1.5, dockerHosts: [A] });
    } finally {
      receiver.stop();
    }
  });
});
