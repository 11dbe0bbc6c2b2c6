/**
 * The agent's work as a file set: what changed in /workspace between the
 * pristine task image and the agent's container, compared byte for byte on
 * the host. Nothing here runs in the agent's container (no `git diff` there,
 * whose config and hooks the agent controls). `.git` never travels.
 */
import { posix } from "node:path";
import type { ProtectedPaths } from "./protected-paths.ts";
import type { TarEntry, TarFile } from "./tar.ts";
import { AGENT_UID } from "./types.ts";

export interface WorkspaceChange {
  /** Files to write into the grading container's /workspace (relative paths). */
  write: TarFile[];
  /** Relative paths to delete there. */
  remove: string[];
  /** Protected paths the agent changed, added or deleted (dropped from write/remove). */
  tampered: string[];
  /** Symlinks pointing outside the workspace (dropped). */
  escapingLinks: string[];
}

type Snapshot = Map<string, TarEntry>;

/** Entries of a getArchive("/workspace") as a map keyed by workspace-relative path. */
export function snapshotOf(entries: TarEntry[]): Snapshot {
  const map: Snapshot = new Map();
  for (const e of entries) {
    const rel = e.path.replace(/^workspace\/?/, "");
    if (!rel || rel === ".git" || rel.startsWith(".git/")) continue;
    if (e.type === "file" || e.type === "symlink") map.set(rel, e);
  }
  return map;
}

function isBytecode(rel: string): boolean {
  return rel.endsWith(".pyc") || rel.endsWith(".pyo") || rel.includes("__pycache__/") || rel.endsWith("__pycache__");
}

function same(a: TarEntry, b: TarEntry): boolean {
  return (
    a.type === b.type &&
    (a.mode & 0o111) === (b.mode & 0o111) &&
    a.linkname === b.linkname &&
    a.content.equals(b.content)
  );
}

function linkStaysInside(rel: string, target: string): boolean {
  if (target.startsWith("/")) return false;
  const resolved = posix.normalize(posix.join(posix.dirname(rel), target));
  return !resolved.startsWith("../") && resolved !== "..";
}

export function diffWorkspace(pristine: Snapshot, agent: Snapshot, protectedPaths: ProtectedPaths): WorkspaceChange {
  const out: WorkspaceChange = { write: [], remove: [], tampered: [], escapingLinks: [] };
  // Directories holding protected files: a file or symlink written in their
  // place would replace everything protected beneath them.
  const guardedDirs = new Set<string>();
  for (const rel of pristine.keys()) {
    if (!protectedPaths.matches(rel)) continue;
    const parts = rel.split("/");
    for (let i = 1; i < parts.length; i++) guardedDirs.add(parts.slice(0, i).join("/"));
  }
  for (const [rel, e] of agent) {
    // Bytecode never travels: an unchecked hash-based .pyc runs whatever it holds, whatever its source says.
    if (isBytecode(rel)) continue;
    const before = pristine.get(rel);
    if (before && same(before, e)) continue;
    if (protectedPaths.covers(rel) || guardedDirs.has(rel)) {
      out.tampered.push(rel);
      continue;
    }
    if (e.type === "symlink" && !linkStaysInside(rel, e.linkname ?? "")) {
      out.escapingLinks.push(rel);
      continue;
    }
    out.write.push({
      path: rel,
      content: e.content,
      mode: e.mode & 0o111 ? 0o755 : 0o644,
      uid: AGENT_UID,
      gid: AGENT_UID,
      ...(e.type === "symlink" ? { linkname: e.linkname ?? "" } : {}),
    });
  }
  for (const rel of pristine.keys()) {
    if (agent.has(rel) || isBytecode(rel)) continue;
    if (protectedPaths.matches(rel)) out.tampered.push(rel);
    else out.remove.push(rel);
  }
  out.tampered.sort();
  return out;
}
