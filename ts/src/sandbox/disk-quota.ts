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
 * EnsureRemoveAll unmounts on EBUSY), and the loop device, mounted with
 * autoclear, detaches and frees the file. A process killed at any point
 * leaves at most a container the reaper removes, never a file.
 *
 * Needs root on the Docker host, the overlay2 driver and loop devices.
 */
import type Docker from "dockerode";
import { execFile } from "node:child_process";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmdirSync, rmSync, statfsSync, writeFileSync, ftruncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { SandboxEnvError, type SandboxErrorContext } from "./errors.ts";
import { currentRun } from "./run-identity.ts";

const run = promisify(execFile);

/** Backing files are `<tmpdir>/lego-quota-<runId>-XXXXXX/layer.img` (unlinked once mounted). */
export const QUOTA_FILE_PREFIX = "lego-quota-";

/** Below this much free space (or with no free inode) a filesystem counts as full. */
const FULL_BELOW_BYTES = 1 << 20;

/** The overlay2 layer folder of a created (not yet started) container. */
export async function layerDirOf(container: Docker.Container): Promise<string | undefined> {
  const info = await container.inspect();
  const upper = (info.GraphDriver?.Data as { UpperDir?: string } | undefined)?.UpperDir;
  return info.GraphDriver?.Name === "overlay2" && upper ? dirname(upper) : undefined;
}

/**
 * Mounts a `bytes`-sized ext4 over the container's layer folder, keeping the
 * folder's `link` and `lower` files that Docker reads when it starts the
 * container. Throws SandboxEnvError setup_failed when it cannot.
 */
export async function armDiskQuota(container: Docker.Container, bytes: number, ctx: SandboxErrorContext): Promise<string> {
  const fail = (why: string, cause?: unknown) =>
    new SandboxEnvError("setup_failed", `disk quota: ${why}`, ctx,
      "the disk quota needs root on the Docker host, the overlay2 driver and loop devices; limits.diskBytes = 0 turns it off", { cause });
  const layer = await layerDirOf(container);
  if (!layer || !existsSync(join(layer, "diff"))) throw fail("the container's layer is not an overlay2 folder this process can see");
  const keep = ["link", "lower"].filter((f) => existsSync(join(layer, f))).map((f) => [f, readFileSync(join(layer, f))] as const);
  // Named by run, so a test can tell its own loop devices from other processes'.
  const dir = mkdtempSync(join(tmpdir(), `${QUOTA_FILE_PREFIX}${currentRun().runId}-`));
  const image = join(dir, "layer.img");
  try {
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
    await run("mount", ["-o", "loop,noinit_itable", image, layer]);
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw fail((e as Error).message, e);
  }
  // Mounted: the file's blocks now belong to the mount alone.
  rmSync(dir, { recursive: true, force: true });
  for (const [name, content] of keep) writeFileSync(join(layer, name), content);
  mkdirSync(join(layer, "diff"), { mode: 0o755 });
  mkdirSync(join(layer, "work"), { mode: 0o700 });
  rmdirSync(join(layer, "lost+found"));
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
