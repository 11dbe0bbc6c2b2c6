/**
 * Host files we mount into containers must be ours alone: a folder another local user could
 * write (a shared /tmp path named by a public hash) would let them plant what runs in every
 * sandbox. Used by exec-server.ts and agent-sandbox.ts.
 */
import { lstatSync, mkdirSync } from "node:fs";

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
