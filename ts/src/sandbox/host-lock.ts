import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * The lock file for building `tag`. Machine-wide on purpose (not under
 * the sandbox state folder, which a test may point elsewhere): one build per tag.
 */
export function buildLockPath(tag: string): string {
  const dir = join(tmpdir(), "lego-rl-locks");
  mkdirSync(dir, { recursive: true, mode: 0o1777 });
  return join(dir, `${tag.replace(/[/:]/g, "_")}.lock`);
}

/**
 * An exclusive machine-wide lock held by a `flock(1)` child for as long as
 * `fn` runs. Test files run in parallel workers and bench/CLI may run beside
 * them; without it two processes would debootstrap the same base image at once.
 */
export async function withHostLock<T>(lockPath: string, fn: () => Promise<T>): Promise<T> {
  // The child takes the lock, says so, and holds it until its stdin closes.
  const child = spawn("flock", ["-x", lockPath, "sh", "-c", "echo locked; cat >/dev/null"], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const [first] = (await Promise.race([once(child.stdout, "data"), once(child, "exit")])) as [unknown];
  if (!Buffer.isBuffer(first)) throw new Error(`flock ${lockPath} exited before taking the lock`);
  try {
    return await fn();
  } finally {
    child.stdin.end();
    await once(child, "exit");
  }
}
