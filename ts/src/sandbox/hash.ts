import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";

/**
 * Content hash of a directory tree: relative paths, executable bits and bytes,
 * in sorted order, so the same inputs give the same image tag on any machine.
 */
export function hashTree(root: string, h = createHash("sha256")): ReturnType<typeof createHash> {
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      const st = statSync(p);
      const rel = relative(root, p);
      if (st.isDirectory()) {
        h.update(`d ${rel}\0`);
        walk(p);
      } else {
        h.update(`f ${rel} ${st.mode & 0o111 ? "x" : "-"} ${st.size}\0`);
        h.update(readFileSync(p));
      }
    }
  };
  walk(root);
  return h;
}

/** Short hex tag from a hash (16 hex chars = 64 bits, ample for a local cache). */
export function shortHash(parts: Array<string | Buffer>): string {
  const h = createHash("sha256");
  for (const p of parts) h.update(typeof p === "string" ? `${p.length}:${p}` : p);
  return h.digest("hex").slice(0, 16);
}
