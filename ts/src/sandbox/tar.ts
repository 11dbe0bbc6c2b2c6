/**
 * Tar archives in memory: Docker's copy-in/copy-out API (putArchive,
 * getArchive) speaks tar, and task trees are small (kilobytes to a few MB).
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, posix } from "node:path";
import { Readable } from "node:stream";
import * as tarStream from "tar-stream";

export interface TarFile {
  /** Path inside the archive, relative, posix separators. */
  path: string;
  content: Buffer;
  mode: number;
  /** Owner inside the container; Docker keeps the archive's numeric ids. */
  uid?: number;
  gid?: number;
  /** Set for a symbolic link; `content` is then empty. */
  linkname?: string;
}

export interface TarOwner {
  uid: number;
  gid: number;
}

/** Packs files (and the directories leading to them) into one tar buffer. */
export async function packFiles(files: TarFile[], dirOwner: TarOwner = { uid: 0, gid: 0 }): Promise<Buffer> {
  const pack = tarStream.pack();
  const dirs = new Set<string>();
  for (const f of files) {
    const parts = f.path.split("/").slice(0, -1);
    for (let i = 1; i <= parts.length; i++) {
      const d = parts.slice(0, i).join("/");
      if (dirs.has(d)) continue;
      dirs.add(d);
      pack.entry({ name: `${d}/`, type: "directory", mode: 0o755, uid: dirOwner.uid, gid: dirOwner.gid });
    }
    if (f.linkname !== undefined) {
      pack.entry({ name: f.path, type: "symlink", linkname: f.linkname, uid: f.uid ?? 0, gid: f.gid ?? 0 });
      continue;
    }
    pack.entry({ name: f.path, mode: f.mode, uid: f.uid ?? 0, gid: f.gid ?? 0, size: f.content.length }, f.content);
  }
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack as unknown as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks);
}

/** All regular files under `dir`, as TarFiles rooted at `prefix`, keeping the exec bit. */
export function filesOfDir(dir: string, prefix: string, owner: TarOwner = { uid: 0, gid: 0 }): TarFile[] {
  const out: TarFile[] = [];
  const walk = (d: string, rel: string): void => {
    for (const name of readdirSync(d).sort()) {
      const p = join(d, name);
      const r = rel ? `${rel}/${name}` : name;
      const st = statSync(p);
      if (st.isDirectory()) walk(p, r);
      else if (st.isFile()) {
        out.push({ path: posix.join(prefix, r), content: readFileSync(p), mode: st.mode & 0o111 ? 0o755 : 0o644, ...owner });
      }
    }
  };
  walk(dir, "");
  return out;
}

/** The part of tar-stream's entry we read (its bundled typings lack the name). */
interface TarStreamEntry extends AsyncIterable<Buffer> {
  header: { name: string; type?: string | null; mode?: number; linkname?: string | null };
}

export interface TarEntry {
  path: string;
  type: "file" | "directory" | "symlink" | "other";
  content: Buffer;
  mode: number;
  linkname?: string;
}

/** Reads every entry of a tar stream; the inverse of packFiles. */
export async function unpack(input: Buffer | NodeJS.ReadableStream): Promise<TarEntry[]> {
  const extract = tarStream.extract();
  const src = Buffer.isBuffer(input) ? Readable.from([input]) : (input as Readable);
  src.pipe(extract as unknown as NodeJS.WritableStream);
  const out: TarEntry[] = [];
  for await (const entry of extract as unknown as AsyncIterable<TarStreamEntry>) {
    const chunks: Buffer[] = [];
    for await (const c of entry) chunks.push(c);
    const h = entry.header;
    const type = h.type === "file" || h.type === "directory" || h.type === "symlink" ? h.type : "other";
    out.push({
      path: h.name.replace(/\/$/, ""),
      type,
      content: Buffer.concat(chunks),
      mode: h.mode ?? 0o644,
      ...(h.linkname ? { linkname: h.linkname } : {}),
    });
  }
  return out;
}
