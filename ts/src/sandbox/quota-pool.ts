/**
 * Quota filesystems made ahead of time, so a container start does not wait
 * for mke2fs and mount (~40 ms): one pool per quota size, filled in the
 * background one at a time up to `quotaPoolSize` (host-settings.ts).
 *
 * Reward is sacred, so an entry is used once: each is a freshly formatted
 * filesystem, handed to exactly one container (taken off the pool before it
 * is moved onto that container's layer) and destroyed with it; nothing an
 * agent wrote can reach a later rollout or its grading. An empty pool is not
 * waited on: the start makes its filesystem in place, as without a pool.
 *
 * Entries still waiting are unmounted when the pool is drained
 * (`drainQuotaPools`, which RolloutRunner.close awaits), at process exit, and,
 * after a crash, by the reaper (`reapQuotaStaging`): each staging folder is
 * named by its process (disk-quota.ts).
 */
import { execFile } from "node:child_process";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { disposeQuota, disposeQuotaSync, prepareQuota, QUOTA_FILE_PREFIX, type PreparedQuota } from "./disk-quota.ts";
import { sandboxHost } from "./host-settings.ts";
import { ownerAlive } from "./run-identity.ts";
import { WarmPool } from "./warm-pool.ts";

const run = promisify(execFile);

const pools = new Map<number, WarmPool<PreparedQuota>>();
/** Every prepared filesystem this process holds and has not moved or disposed yet (for the exit hook). */
const staged = new Set<PreparedQuota>();
let exitHook = false;

async function make(bytes: number): Promise<PreparedQuota> {
  const q = await prepareQuota(bytes);
  staged.add(q);
  return q;
}

async function dispose(q: PreparedQuota): Promise<void> {
  staged.delete(q);
  await disposeQuota(q);
}

function poolFor(bytes: number): WarmPool<PreparedQuota> | undefined {
  const size = sandboxHost().quotaPoolSize;
  if (size < 1) return undefined;
  let pool = pools.get(bytes);
  if (!pool) {
    if (!exitHook) {
      exitHook = true;
      // Synchronous: at exit nothing asynchronous runs. A kill -9 skips this; the reaper covers it.
      process.once("exit", () => {
        for (const q of staged) disposeQuotaSync(q);
        staged.clear();
      });
    }
    pool = new WarmPool(() => make(bytes), dispose, { size, fillConcurrency: 1 }).start();
    pools.set(bytes, pool);
  }
  return pool;
}

/**
 * A prepared filesystem of `bytes` for one container, or undefined when none
 * is ready (the caller makes one in place). Either way the pool refills.
 * The caller owns what it gets: armDiskQuota moves it onto the layer or disposes it.
 */
export function takePreparedQuota(bytes: number): PreparedQuota | undefined {
  const q = poolFor(bytes)?.take();
  if (q) staged.delete(q);
  return q;
}

/** Starts filling the pool for `bytes` and resolves once it is full (or its fill failed: then starts make their own). */
export function warmQuotaPool(bytes: number): Promise<void> {
  return poolFor(bytes)?.whenFull() ?? Promise.resolve();
}

/** Ready entries of the pool for `bytes` (tests and benchmarks). */
export function quotaPoolReady(bytes: number): number {
  return pools.get(bytes)?.readyCount ?? 0;
}

/** Unmounts every waiting entry and stops the pools; a later start fills them again. */
export async function drainQuotaPools(): Promise<void> {
  const all = [...pools.values()];
  pools.clear();
  await Promise.all(all.map((p) => p.close()));
}

/** The owner encoded in a staging folder's name: `lego-quota-<runId>-<pid>-<pidStart>-XXXXXX`. */
function ownerOf(name: string): { runId: string; pid: number; pidStart: string } | undefined {
  const m = /^lego-quota-(.+)-(\d+)-(\d+)-[A-Za-z0-9]{6}$/.exec(name);
  return m ? { runId: m[1]!, pid: Number(m[2]), pidStart: m[3]! } : undefined;
}

/**
 * Removes staging folders of processes that are gone (or of `runIds`),
 * unmounting the prepared filesystem in each: what a crash left between
 * preparing and using one. Folders of live processes are kept. Returns the
 * folders removed.
 */
export async function reapQuotaStaging(runIds: readonly string[] = []): Promise<string[]> {
  const root = tmpdir();
  let names: string[];
  try {
    names = readdirSync(root).filter((n) => n.startsWith(QUOTA_FILE_PREFIX));
  } catch {
    return [];
  }
  const doomed = names.filter((n) => {
    const o = ownerOf(n);
    return o !== undefined && (runIds.includes(o.runId) || !ownerAlive(o.pid, o.pidStart, hostname()));
  });
  const mounts = readFileSync("/proc/self/mountinfo", "utf8");
  const removed = await Promise.all(
    doomed.map(async (n) => {
      const mnt = join(root, n, "mnt");
      // mountinfo's 5th field is the mount point (octal escapes only for space, tab, newline, backslash: none in our names).
      // Another reaper (a second process of this run starting its runner) may unmount and remove it first:
      // losing that race is not an error.
      if (mounts.split("\n").some((l) => l.split(" ")[4] === mnt)) await run("umount", ["-l", mnt]).catch(() => undefined);
      try {
        rmSync(join(root, n), { recursive: true, force: true });
        return join(root, n);
      } catch {
        return undefined; // still mounted after all: the next reap tries again
      }
    }),
  );
  return removed.filter((d): d is string => d !== undefined);
}
