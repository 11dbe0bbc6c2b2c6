/**
 * Disk quota per container, enforced by the kernel while the agent writes.
 *
 * Docker's `--storage-opt size=` needs overlay2 on xfs with project quotas;
 * this host has ext4. Instead the container's writable layer gets its own
 * sized filesystem: between create and start we mount a fresh loop-backed
 * ext4 of `diskBytes` over the container's overlay2 layer folder (the one
 * holding `diff/` and `work/`), so the overlay's upper dir, where every write
 * to the image filesystem lands (/workspace, /home, /var/tmp, /logs …), lives
 * on it: a write past the quota fails with ENOSPC. /tmp and /dev/shm are
 * tmpfs mounts of fixed size (counted against the memory limit).
 *
 * Nothing is left behind: the backing file is unlinked as soon as it is
 * mounted, so its blocks belong to the mount alone; Docker removes the
 * layer folder when the container is removed, which unmounts it (its
 * EnsureRemoveAll unmounts on EBUSY, lazily), and the loop device, mounted
 * with autoclear, detaches and frees the file. A process killed at any point
 * leaves at most a container and a staging folder (with a prepared
 * filesystem mounted in it, or a backing file not yet unlinked), both of
 * which the reaper removes.
 *
 * Making one costs ~40 ms (mke2fs, mount); quota-pool.ts makes them ahead of
 * time, and a start only moves one into place.
 *
 * Needs root on the Docker host, the overlay2 driver and loop devices.
 */
import type Docker from "dockerode";
import { execFile, execFileSync } from "node:child_process";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmdirSync, rmSync, statfsSync, writeFileSync, ftruncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { SandboxEnvError, daemonError, type SandboxErrorContext } from "./errors.ts";
import { currentRun } from "./run-identity.ts";

const run = promisify(execFile);

/**
 * Staging folders are `<tmpdir>/lego-quota-<runId>-<pid>-<pidStart>-XXXXXX`, holding the backing
 * file `layer.img` (unlinked once mounted) and the mount point `mnt/`. The owner is in the name, so
 * the reaper can tell a dead process's leftovers from a live one's without reading anything.
 */
export const QUOTA_FILE_PREFIX = "lego-quota-";

/** Below this much free space (or with no free inode) a filesystem counts as full. */
const FULL_BELOW_BYTES = 1 << 20;

/** A fresh quota filesystem mounted at `mnt`, its backing file unlinked, `diff/` and `work/` made; used once. */
export interface PreparedQuota {
  readonly dir: string;
  readonly mnt: string;
  readonly bytes: number;
}

/** The overlay2 layer folder of a created (not yet started) container. */
export async function layerDirOf(container: Docker.Container): Promise<string | undefined> {
  const info = await container.inspect();
  const upper = (info.GraphDriver?.Data as { UpperDir?: string } | undefined)?.UpperDir;
  return info.GraphDriver?.Name === "overlay2" && upper ? dirname(upper) : undefined;
}

/** A new staging folder named by this process (see QUOTA_FILE_PREFIX). */
function stagingDir(): string {
  const run = currentRun();
  return mkdtempSync(join(tmpdir(), `${QUOTA_FILE_PREFIX}${run.runId}-${run.pid}-${run.pidStart}-`));
}

/** A sparse `bytes`-sized file formatted as ext4, loop-mounted at `target`. Throws on failure (the caller cleans up). */
async function formatAndMount(image: string, bytes: number, target: string): Promise<void> {
  const fd = openSync(image, "w", 0o600);
  try {
    ftruncateSync(fd, bytes);
  } finally {
    closeSync(fd);
  }
  // No journal and no resize inode: less to write for a filesystem that lives as long as one container.
  // One inode per 4 KiB, so a quota cannot be dodged (or hit early) with many small files.
  await run("mke2fs", ["-q", "-F", "-t", "ext4", "-O", "^has_journal,^resize_inode", "-E", "nodiscard", "-m", "0", "-i", "4096", image]);
  // noinit_itable: the inode tables of a sparse file read as zeros; do not write them in the background.
  await run("mount", ["-o", "loop,noinit_itable", image, target]);
}

/** The overlay's folders on a freshly made quota filesystem. */
function makeLayerFolders(root: string): void {
  mkdirSync(join(root, "diff"), { mode: 0o755 });
  mkdirSync(join(root, "work"), { mode: 0o700 });
  rmdirSync(join(root, "lost+found"));
}

/**
 * A quota filesystem made ahead of time (quota-pool.ts): formatted, mounted
 * in its own staging folder, backing file unlinked, overlay folders made. It
 * is moved onto exactly one container's layer and never used again.
 */
export async function prepareQuota(bytes: number): Promise<PreparedQuota> {
  const dir = stagingDir();
  const image = join(dir, "layer.img");
  const mnt = join(dir, "mnt");
  try {
    mkdirSync(mnt, { mode: 0o700 });
    await formatAndMount(image, bytes, mnt);
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  rmSync(image, { force: true });
  try {
    makeLayerFolders(mnt);
  } catch (e) {
    await disposeQuota({ dir, mnt, bytes });
    throw e;
  }
  return { dir, mnt, bytes };
}

/** Unmounts a prepared filesystem that no container took (the loop device detaches and frees it) and removes its folder. */
export async function disposeQuota(q: PreparedQuota): Promise<void> {
  await run("umount", [q.mnt]).catch(() => run("umount", ["-l", q.mnt]).catch(() => {}));
  rmSync(q.dir, { recursive: true, force: true });
}

/** Same as disposeQuota, for process exit, where nothing asynchronous runs. */
export function disposeQuotaSync(q: PreparedQuota): void {
  try {
    execFileSync("umount", ["-l", q.mnt], { stdio: "ignore" });
  } catch {
    // not mounted (already moved or gone): only the folder is left
  }
  rmSync(q.dir, { recursive: true, force: true });
}

/** A setup failure of the quota, with the hint every such error gives. */
function quotaError(why: string, ctx: SandboxErrorContext, cause?: unknown): SandboxEnvError {
  return new SandboxEnvError("setup_failed", `disk quota: ${why}`, ctx,
    "the disk quota needs root on the Docker host, the overlay2 driver and loop devices; limits.diskBytes = 0 turns it off", { cause });
}

/** The layer folder of a created container, and Docker's `link` and `lower` files in it, which a mount over it hides. */
async function layerOf(container: Docker.Container, ctx: SandboxErrorContext): Promise<{ layer: string; keep: Array<readonly [string, Buffer]> }> {
  let layer: string | undefined;
  try {
    layer = await layerDirOf(container);
  } catch (e) {
    // A daemon going down (or a container removed under us) answers the inspect with an error: the
    // environment's failure, retried as such, not an exception that ends the worker.
    throw daemonError(e, "inspect container for its disk quota", ctx);
  }
  if (!layer || !existsSync(join(layer, "diff"))) throw quotaError("the container's layer is not an overlay2 folder this process can see", ctx);
  const keep = ["link", "lower"].filter((f) => existsSync(join(layer, f))).map((f) => [f, readFileSync(join(layer, f))] as const);
  return { layer, keep };
}

/**
 * Puts a quota filesystem of `bytes` under the container's layer folder,
 * keeping the folder's `link` and `lower` files that Docker reads when it
 * starts the container. A prepared one (`prepared`, from the pool) is moved
 * there (one `mount --move`); without one, or when the move fails, a fresh
 * one is made in place. Throws SandboxEnvError setup_failed when it cannot.
 */
export async function armDiskQuota(container: Docker.Container, bytes: number, ctx: SandboxErrorContext, prepared?: PreparedQuota): Promise<string> {
  let layer: string;
  let keep: Array<readonly [string, Buffer]>;
  try {
    ({ layer, keep } = await layerOf(container, ctx));
  } catch (e) {
    if (prepared) await disposeQuota(prepared);
    throw e;
  }
  if (prepared && prepared.bytes === bytes) {
    const moved = await run("mount", ["--move", prepared.mnt, layer]).then(() => true, () => false);
    if (moved) {
      rmSync(prepared.dir, { recursive: true, force: true });
      try {
        for (const [name, content] of keep) writeFileSync(join(layer, name), content);
      } catch (e) {
        throw quotaError(`could not restore the container's layer files: ${(e as Error).message}`, ctx, e);
      }
      return layer;
    }
    // A host where the move is refused (a shared parent mount): make one in place, as without a pool.
    await disposeQuota(prepared);
  } else if (prepared) {
    await disposeQuota(prepared);
  }
  // Named by run, so a test can tell its own loop devices from other processes'.
  const dir = stagingDir();
  const image = join(dir, "layer.img");
  try {
    await formatAndMount(image, bytes, layer);
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw quotaError((e as Error).message, ctx, e);
  }
  // Mounted: the file's blocks now belong to the mount alone.
  rmSync(dir, { recursive: true, force: true });
  try {
    for (const [name, content] of keep) writeFileSync(join(layer, name), content);
    makeLayerFolders(layer);
  } catch (e) {
    throw quotaError(`could not lay out the container's layer folder: ${(e as Error).message}`, ctx, e);
  }
  return layer;
}

/** Whether a filesystem (a quota mount, or a container tmpfs seen through /proc/PID/root) is full. */
export function filesystemFull(path: string): boolean {
  try {
    const s = statfsSync(path);
    return s.bavail * s.bsize < FULL_BELOW_BYTES || (s.files > 0 && s.ffree === 0);
  } catch {
    return false; // gone or unreadable: nothing to report
  }
}
