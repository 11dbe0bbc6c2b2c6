/**
 * Host files we mount into containers must be ours alone: a folder another local user could
 * write (a shared /tmp path named by a public hash) would let them plant what runs in every
 * sandbox. Used by exec-server.ts (execd) and agent-sandbox.ts (the in-container tools).
 */
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";

/**
 * Whether `path` exists as a folder or file of this user that nobody else can write. Throws,
 * naming the path, when something else is there; false when nothing is.
 */
export function ownedPrivately(path: string, kind: "dir" | "file"): boolean {
  let st;
  try {
    st = lstatSync(path);
  } catch {
    return false;
  }
  const isKind = kind === "dir" ? st.isDirectory() : st.isFile();
  if (!isKind || st.uid !== process.getuid!() || (st.mode & 0o022) !== 0) {
    throw new Error(`${path} is not a ${kind === "dir" ? "folder" : "file"} of this user that only it can write: remove it (what it holds is mounted into every sandbox)`);
  }
  return true;
}

/** Creates `path` (and its parents) if missing, then insists it is ours alone. */
export function privateFolder(path: string): string {
  mkdirSync(path, { recursive: true, mode: 0o755 });
  ownedPrivately(path, "dir");
  return path;
}

/**
 * `parent/name` holding `files` (paths inside it), made once: `fill` writes them into a fresh
 * folder that is then renamed into place, so concurrent makers share one copy. A copy that is
 * ours but incomplete is made again; one that is not ours alone throws (ownedPrivately).
 */
export function sharedFolder(parent: string, name: string, files: string[], fill: (tmp: string) => void): string {
  privateFolder(parent);
  const dir = join(parent, name);
  if (ownedPrivately(dir, "dir") && files.every((f) => ownedPrivately(join(dir, f), "file"))) return dir;
  rmSync(dir, { recursive: true, force: true }); // a half-made copy of ours
  const tmp = mkdtempSync(join(parent, "tmp-"));
  try {
    fill(tmp);
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
  chmodSync(tmp, 0o755);
  try {
    renameSync(tmp, dir);
  } catch {
    rmSync(tmp, { recursive: true, force: true }); // another process won the race
  }
  return dir;
}
