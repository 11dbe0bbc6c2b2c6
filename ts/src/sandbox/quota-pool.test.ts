import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { closeSync, existsSync, openSync, readFileSync, readSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { ensureBaseImage } from "./base-image.ts";
import { containerCreateOptions, Sandbox } from "./container.ts";
import { armDiskQuota, disposeQuota, layerDirOf, prepareQuota } from "./disk-quota.ts";
import { dockerClient } from "./docker.ts";
import { SandboxEnvError } from "./errors.ts";
import { configureSandboxHost } from "./host-settings.ts";
import { drainQuotaPools, quotaPoolReady, reapQuotaStaging, takePreparedQuota, warmQuotaPool } from "./quota-pool.ts";
import { reapDeadRuns } from "./reaper.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImages, leftoverContainers } from "./test-support.ts";
import { DEFAULT_LIMITS } from "./types.ts";
import { WarmPool } from "./warm-pool.ts";

const HOLDER = fileURLToPath(new URL("./fixtures/hold-quota-pool.ts", import.meta.url));
const TS_ROOT = fileURLToPath(new URL("../../", import.meta.url));
const BYTES = DEFAULT_LIMITS.diskBytes;

// Image builds (first run on a machine only) get their own long hook timeout.
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);
afterAll(async () => {
  await drainQuotaPools();
  expect(await leftoverContainers()).toEqual([]);
});

/** Mount point → source device of every mount this process sees. */
function mounts(): Map<string, string> {
  const m = new Map<string, string>();
  for (const l of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const f = l.split(" ");
    const dash = f.indexOf("-");
    if (f[4] && dash > 0) m.set(f[4], f[dash + 2] ?? "");
  }
  return m;
}

/** The ext4 UUID of a block device (superblock at 1024, s_uuid at 0x68): a fresh mke2fs draws a new one. */
function ext4Uuid(dev: string): string {
  const fd = openSync(dev, "r");
  try {
    const b = Buffer.alloc(16);
    readSync(fd, b, 0, 16, 1024 + 0x68);
    return b.toString("hex");
  } finally {
    closeSync(fd);
  }
}

/** The quota filesystem under a sandbox's writable layer: its folder, device and UUID. */
async function quotaOf(sb: Sandbox): Promise<{ layer: string; dev: string; uuid: string }> {
  const layer = (await layerDirOf(sb.container))!;
  const dev = mounts().get(layer);
  expect(dev, `no filesystem mounted on ${layer}`).toMatch(/^\/dev\/loop\d+$/);
  return { layer, dev: dev!, uuid: ext4Uuid(dev!) };
}

async function holder(mode: "hold" | "exit", runId: string): Promise<{ child: ReturnType<typeof spawn>; dirs: string[] }> {
  const child = spawn(process.execPath, ["--import", "tsx", HOLDER, mode], {
    cwd: TS_ROOT,
    env: { ...process.env, LEGO_RUN_ID: runId },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const [line] = (await once(child.stdout!, "data")) as [Buffer];
  return { child, dirs: line.toString().trim().split(" ") };
}

describe("quota filesystem pool", () => {
  it("gives each container a freshly made filesystem of its own: nothing one agent wrote reaches the next", async () => {
    const { tag } = await ensureBaseImage();
    await warmQuotaPool(BYTES);
    expect(quotaPoolReady(BYTES)).toBeGreaterThan(0);
    const a = await Sandbox.start({ image: tag, rolloutId: "quota-pool-a", stage: "agent" });
    const qa = await quotaOf(a);
    expect((await a.sh("echo planted > /workspace/leftover && echo planted > /var/tmp/leftover && df -B1 --output=size / | tail -1")).stdout.trim())
      .toMatch(/^\d+$/);
    // Held at the same time, two containers never share one.
    const b = await Sandbox.start({ image: tag, rolloutId: "quota-pool-b", stage: "agent" });
    const qb = await quotaOf(b);
    expect(qb.dev).not.toBe(qa.dev);
    expect(qb.uuid).not.toBe(qa.uuid);
    await a.remove();
    expect(mounts().has(qa.layer)).toBe(false);
    // After the first is gone: the next one is another fresh filesystem, without the planted files.
    const c = await Sandbox.start({ image: tag, rolloutId: "quota-pool-c", stage: "grading" });
    const qc = await quotaOf(c);
    expect(new Set([qa.uuid, qb.uuid, qc.uuid]).size).toBe(3);
    for (const sb of [b, c]) {
      const r = await sb.sh("ls /workspace/leftover /var/tmp/leftover 2>&1; df -B1 --output=size,used / | tail -1");
      expect(r.stdout).not.toContain("planted");
      expect(r.stdout).toContain("No such file");
      const [size, used] = r.stdout.trim().split("\n").at(-1)!.trim().split(/\s+/).map(Number);
      expect(size).toBeGreaterThan(BYTES * 0.9);
      expect(size).toBeLessThanOrEqual(BYTES);
      expect(used).toBeLessThan(1 << 20);
    }
    await Promise.all([b.remove(), c.remove()]);
  });

  it("a start with no prepared filesystem (pool empty or off, or a move refused) makes one in place", async () => {
    const { tag } = await ensureBaseImage();
    const docker = dockerClient();
    const attempt = async (prepared: Awaited<ReturnType<typeof prepareQuota>> | undefined) => {
      const container = await docker.createContainer(containerCreateOptions({ image: tag, rolloutId: "quota-inline", stage: "agent" }));
      try {
        const layer = await armDiskQuota(container, BYTES, {}, prepared);
        expect(mounts().get(layer)).toMatch(/^\/dev\/loop\d+$/);
        await container.start();
        const e = await container.exec({ Cmd: ["sh", "-c", "df -B1 --output=size / | tail -1"], AttachStdout: true, User: "1000:1000" });
        const s = await e.start({ hijack: true, stdin: false });
        let out = "";
        s.on("data", (d: Buffer) => (out += d.toString()));
        await once(s, "end");
        expect(Number(out.replace(/[^\d]/g, ""))).toBeGreaterThan(BYTES * 0.9);
      } finally {
        await container.remove({ force: true, v: true });
      }
    };
    await attempt(undefined);
    // A prepared filesystem that is no longer mounted: the move fails, the start still gets its quota.
    const gone = await prepareQuota(BYTES);
    await disposeQuota(gone);
    await attempt(gone);
    expect(existsSync(gone.dir)).toBe(false);
    // Pool off: Sandbox.start itself makes it in place.
    await drainQuotaPools();
    const before = configureSandboxHost({ quotaPoolSize: 0 });
    try {
      const sb = await Sandbox.start({ image: tag, rolloutId: "quota-off", stage: "agent" });
      expect(takePreparedQuota(BYTES)).toBeUndefined();
      expect((await quotaOf(sb)).dev).toMatch(/loop/);
      await sb.remove();
    } finally {
      configureSandboxHost(before);
    }
  });

  it("a container the daemon no longer knows (a daemon going down, a removal under us) fails as the daemon's error, and its prepared filesystem is unmounted", async () => {
    const { tag } = await ensureBaseImage();
    const container = await dockerClient().createContainer(containerCreateOptions({ image: tag, rolloutId: "quota-gone", stage: "agent" }));
    await container.remove({ force: true, v: true });
    const prepared = await prepareQuota(BYTES);
    // Not a bare dockerode error: the worker retries a SandboxEnvError, while anything else ends its run.
    const failure = await armDiskQuota(container, BYTES, { rollout: "quota-gone" }, prepared).then(() => undefined, (e: unknown) => e);
    expect(failure).toBeInstanceOf(SandboxEnvError);
    expect(failure).toMatchObject({ kind: "daemon_error" });
    expect((failure as Error).message).toMatch(/inspect container for its disk quota/);
    expect(existsSync(prepared.dir)).toBe(false);
    expect(mounts().has(prepared.mnt)).toBe(false);
  });

  it("an exhausted pool hands out nothing, refills in the background and hands out again", async () => {
    const made: Array<(n: number) => void> = [];
    const disposed: number[] = [];
    let n = 0;
    const pool = new WarmPool(() => new Promise<number>((r) => made.push(r)), async (x) => void disposed.push(x), { size: 1, fillConcurrency: 1 }).start();
    expect(pool.take()).toBeUndefined(); // the first one is still being made
    expect(made).toHaveLength(1);
    made[0]!(++n);
    await pool.whenFull();
    expect(pool.take()).toBe(1);
    expect(pool.take()).toBeUndefined(); // taken, never handed out twice
    expect(made).toHaveLength(2);
    made[1]!(++n);
    await pool.whenFull();
    expect(pool.take()).toBe(2);
    // The refill behind that take is still being made: close disposes it as it lands.
    const closing = pool.close();
    expect(made).toHaveLength(3);
    made[2]!(++n);
    await closing;
    expect(disposed).toEqual([3]);
    expect(pool.take()).toBeUndefined();
  });

  it("unmounts prepared filesystems at exit, and the reaper removes those of a killed process", async () => {
    const exited = await holder("exit", `quota-exit-${process.pid}`);
    expect(exited.dirs).toHaveLength(2);
    await once(exited.child, "exit");
    for (const d of exited.dirs) expect(existsSync(d)).toBe(false);
    expect([...mounts().keys()].filter((m) => exited.dirs.some((d) => m.startsWith(d)))).toEqual([]);

    // This process's own prepared filesystems are live: the reaper keeps them.
    await warmQuotaPool(BYTES);
    const ownReady = quotaPoolReady(BYTES);
    expect(ownReady).toBeGreaterThan(0);

    const killed = await holder("hold", `quota-killed-${process.pid}`);
    expect(killed.dirs).toHaveLength(2);
    for (const d of killed.dirs) expect(mounts().get(`${d}/mnt`)).toMatch(/^\/dev\/loop\d+$/);
    killed.child.kill("SIGKILL"); // nothing gets to clean up
    await once(killed.child, "exit");
    for (const d of killed.dirs) expect(existsSync(`${d}/mnt`)).toBe(true);

    // Two reapers at once (two test workers, two processes of one run starting their runners): both end cleanly.
    const [report, second] = await Promise.all([reapDeadRuns(), reapQuotaStaging()]);
    expect([...report.quotaStaging, ...second]).toEqual(expect.arrayContaining(killed.dirs));
    for (const d of killed.dirs) {
      expect(existsSync(d)).toBe(false);
      expect(mounts().has(`${d}/mnt`)).toBe(false);
    }
    expect(quotaPoolReady(BYTES)).toBe(ownReady);
    const own = takePreparedQuota(BYTES)!;
    expect(mounts().get(own.mnt)).toMatch(/^\/dev\/loop\d+$/);
    await disposeQuota(own);
  });
});
