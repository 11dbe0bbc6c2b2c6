/**
 * Reading a container's file from the host through /proc/PID/root, where the
 * agent shapes the path: a symlink met below that root is resolved against
 * the *host's* root (a link to /dev/zero is the host's /dev/zero, one to
 * /etc/shadow the host's), and a FIFO blocks a synchronous read forever, the
 * whole rollout worker with it. So every folder on the way must be a real
 * folder (lstat), the file is opened with O_NOFOLLOW | O_NONBLOCK and must be
 * a regular file, and at most `maxBytes` are read. Call it on a frozen
 * container, where nothing can swap a folder for a link between the checks.
 */
import { closeSync, constants, fstatSync, lstatSync, openSync, readSync } from "node:fs";

/**
 * The file's text (its first `maxBytes`); undefined when nothing is there;
 * null when something is there but is not a regular file reached through
 * real folders (a link, a FIFO, a socket, a folder).
 */
export function readContainerFile(pid: number, path: string, maxBytes: number): string | null | undefined {
  const head = readContainerFileHead(pid, path, maxBytes);
  return head ? head.text : head;
}

/** As readContainerFile, with the file's whole size (so a caller can say it read only the head). */
export function readContainerFileHead(pid: number, path: string, maxBytes: number): { text: string; size: number } | null | undefined {
  const parts = path.split("/").filter(Boolean);
  let at = `/proc/${pid}/root`;
  for (const dir of parts.slice(0, -1)) {
    at += `/${dir}`;
    const st = lstatSync(at, { throwIfNoEntry: false });
    if (!st) return undefined;
    if (!st.isDirectory()) return null;
  }
  let fd: number;
  try {
    fd = openSync(`${at}/${parts.at(-1)}`, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    // ELOOP: a link; ENXIO: a socket. Not root on the host (EACCES) throws: the caller's detector stays silent.
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return undefined;
    if (code === "ELOOP" || code === "ENXIO") return null;
    throw e;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return null;
    const buf = Buffer.alloc(Math.min(maxBytes, st.size));
    const n = readSync(fd, buf, 0, buf.length, 0);
    return { text: buf.subarray(0, n).toString("utf8"), size: st.size };
  } finally {
    closeSync(fd);
  }
}
