/**
 * DockerHosts against the real shared daemon (reached under two endpoint names,
 * so placement can be observed without a second daemon) and a socket nobody
 * serves: placement by free slots, a dead endpoint starting lost and probed,
 * none answering a clear error, and the config's docker_hosts field.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { dockerClient } from "../sandbox/docker.ts";
import { RolloutEvents, buildWorkerConfig, readWorkerConfigFile } from "./index.ts";
import { DockerHosts, parseDockerHostSpec } from "./hosts.ts";

const dir = mkdtempSync(join(tmpdir(), "lego-rollout-hosts-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const A = "unix:///var/run/docker.sock";
const B = "/var/run/docker.sock";
const NOBODY = `unix://${join(dir, "nobody.sock")}`;

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
    const hosts = await DockerHosts.open([{ endpoint: A, slots: 1 }, { endpoint: B, slots: 3 }], { defaultSlots: 4 });
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
    const hosts = await DockerHosts.open([{ endpoint: NOBODY, slots: 4 }, { endpoint: A, slots: 1 }], { defaultSlots: 1, events, probeMs: 50 });
    expect(seen).toEqual([NOBODY]);
    const placed = await Promise.all([0, 1, 2].map((i) => hosts.place(`x${i}`, async (h) => h.endpoint.name)));
    expect(placed).toEqual([A, A, A]);
    expect((await hosts.close()).unswept).toEqual([]); // nothing was placed there
    await expect(DockerHosts.open([{ endpoint: NOBODY, slots: 1 }], { defaultSlots: 1 })).rejects.toThrow(/no Docker host answers: unix:\/\/.*nobody.sock/);
  });
});
