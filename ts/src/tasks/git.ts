/**
 * The host's git, for task repositories (SWE-bench records name commits).
 * Reads trees and blobs of a local repository, applies patches to files
 * outside any repository, and writes generated suites' repositories with one
 * `git fast-import` stream (fixed identity and dates, so the same input gives
 * the same commit ids on any machine).
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { TaskRepoError } from "./errors.ts";

/** A file in a tree: its bytes and whether it is executable. */
export interface TreeFile {
  content: Buffer;
  executable: boolean;
}

export type Tree = Map<string, TreeFile>;

const REPOS = new Map<string, GitRepo>();

function git(args: string[], opts: { cwd?: string; input?: Buffer | string } = {}): Buffer {
  return execFileSync("git", args, {
    cwd: opts.cwd,
    input: opts.input,
    maxBuffer: 1 << 30,
    stdio: ["pipe", "pipe", "pipe"],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: tmpdir(), GIT_CONFIG_NOSYSTEM: "1", LANG: "C" },
  });
}

function describeFailure(e: unknown): string {
  const err = e as { stderr?: Buffer; message: string };
  return (err.stderr?.toString("utf8").trim() || err.message).split("\n").slice(-3).join(" ");
}

const gitDirs = new Map<string, boolean>();

/** Whether `path` is a git repository (asked of git once per path and process). */
export function isGitRepo(path: string): boolean {
  let yes = gitDirs.get(path);
  if (yes === undefined) {
    try {
      yes = git(["-C", path, "rev-parse", "--git-dir"]).length > 0;
    } catch {
      yes = false;
    }
    gitDirs.set(path, yes);
  }
  return yes;
}

/** A local git repository that a task's commits live in. */
export class GitRepo {
  private readonly resolved = new Map<string, string>();

  constructor(readonly path: string) {}

  /** One instance per repository path, so what it resolved is asked of git once. */
  static at(path: string): GitRepo {
    let repo = REPOS.get(path);
    if (!repo) REPOS.set(path, (repo = new GitRepo(path)));
    return repo;
  }

  private run(args: string[], what: string, input?: Buffer | string): Buffer {
    try {
      return git(["-C", this.path, ...args], { input });
    } catch (e) {
      throw new TaskRepoError(this.path, what, describeFailure(e));
    }
  }

  /** Full commit id of `rev`; an error naming the repository if it is not there. */
  resolve(rev: string): string {
    let id = this.resolved.get(rev);
    if (!id) this.resolved.set(rev, (id = this.run(["rev-parse", "--verify", "--quiet", `${rev}^{commit}`], `commit ${rev}`).toString("utf8").trim()));
    return id;
  }

  /**
   * For many (from, to) commit pairs at once: the paths `to` changes and their
   * new files, in two git processes whatever the number of pairs (one
   * `diff-tree --stdin`, one `cat-file --batch`). Opening a suite of
   * thousands of tasks costs no more than a handful of spawns.
   */
  changesMany(pairs: Array<[from: string, to: string]>): Map<string, { changes: Array<{ status: string; path: string }>; files: Tree }> {
    const input = `${pairs.map(([from, to]) => `${to} ${from}`).join("\n")}\n`;
    const tokens = this.run(["diff-tree", "--stdin", "-r", "-z", "--no-renames", "--always"], "diff-tree --stdin", input).toString("utf8").split("\0");
    const out = new Map<string, { changes: Array<{ status: string; path: string }>; files: Tree }>();
    const blobs = new Map<string, Array<{ to: string; path: string; executable: boolean }>>();
    let current: { changes: Array<{ status: string; path: string }>; files: Tree } | undefined;
    let to = "";
    for (let i = 0; i < tokens.length; i++) {
      const tok = tokens[i]!;
      if (!tok) continue;
      if (!tok.startsWith(":")) {
        to = tok.trim();
        current = { changes: [], files: new Map() };
        out.set(to, current);
        continue;
      }
      const [, dstMode, , dstSha, status] = tok.slice(1).split(" ") as [string, string, string, string, string];
      const path = tokens[++i]!;
      current!.changes.push({ status: status[0]!, path });
      if (status[0] !== "D") {
        const list = blobs.get(dstSha) ?? [];
        list.push({ to, path, executable: dstMode === "100755" });
        blobs.set(dstSha, list);
      }
    }
    const shas = [...blobs.keys()];
    if (shas.length) {
      const batch = this.run(["cat-file", "--batch"], "cat-file --batch", `${shas.join("\n")}\n`);
      let at = 0;
      for (const sha of shas) {
        const nl = batch.indexOf(0x0a, at);
        const size = Number(batch.subarray(at, nl).toString("utf8").split(" ")[2]);
        const content = batch.subarray(nl + 1, nl + 1 + size);
        at = nl + 1 + size + 1;
        for (const b of blobs.get(sha)!) out.get(b.to)!.files.set(b.path, { content: Buffer.from(content), executable: b.executable });
      }
    }
    return out;
  }

  /** The commit's tree as an uncompressed tar (no .git). */
  archive(commit: string): Buffer {
    return this.run(["archive", "--format=tar", commit], `archive ${commit}`);
  }

  /** Paths that differ between two commits: A(dded), M(odified), D(eleted), T(ype change). */
  changes(from: string, to: string): Array<{ status: string; path: string }> {
    const out = this.run(["diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", from, to], `diff ${from}..${to}`).toString("utf8");
    const parts = out.split("\0").filter(Boolean);
    const res: Array<{ status: string; path: string }> = [];
    for (let i = 0; i + 1 < parts.length; i += 2) {
      const status = parts[i]!.split(" ").pop()!;
      res.push({ status: status[0]!, path: parts[i + 1]! });
    }
    return res;
  }

  /** Files of `commit` at `paths` (missing ones are left out). */
  files(commit: string, paths: string[]): Tree {
    const tree: Tree = new Map();
    if (!paths.length) return tree;
    const listing = this.run(["ls-tree", "-z", commit, "--", ...paths], `ls-tree ${commit}`).toString("utf8");
    for (const entry of listing.split("\0").filter(Boolean)) {
      const [meta, path] = entry.split("\t") as [string, string];
      const [mode, type, sha] = meta.split(" ") as [string, string, string];
      if (type !== "blob") continue;
      tree.set(path, { content: this.run(["cat-file", "blob", sha], `blob ${path}`), executable: mode === "100755" });
    }
    return tree;
  }

  /** A copy that keeps every ref and object (commit ids unchanged), for export. */
  mirrorTo(dest: string): void {
    mkdirSync(dirname(dest), { recursive: true });
    try {
      git(["clone", "--mirror", "--quiet", "--no-hardlinks", this.path, dest]);
    } catch (e) {
      throw new TaskRepoError(this.path, "mirror", describeFailure(e));
    }
  }
}

/**
 * Applies a unified diff to `files` (paths relative to the repository root)
 * with `git apply` in a scratch folder; returns every file the patch touched
 * with its new content (deleted files are absent from the result).
 */
export function applyPatch(files: Tree, patch: string, where: string): Tree {
  const dir = mkdtempSync(join(tmpdir(), "lego-apply-"));
  try {
    for (const [path, f] of files) {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), f.content, { mode: f.executable ? 0o755 : 0o644 });
    }
    const touched = patchedPaths(patch);
    try {
      git(["apply", "--whitespace=nowarn", "-"], { cwd: dir, input: patch });
    } catch (e) {
      throw new TaskRepoError(where, "patch does not apply", describeFailure(e));
    }
    const out: Tree = new Map();
    for (const path of touched) {
      let st;
      try {
        st = statSync(join(dir, path));
      } catch {
        continue; // deleted by the patch
      }
      out.set(path, { content: readFileSync(join(dir, path)), executable: (st.mode & 0o111) !== 0 });
    }
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Paths a unified diff touches (its `+++ b/…` and `--- a/…` lines). */
export function patchedPaths(patch: string): string[] {
  const paths = new Set<string>();
  for (const line of patch.split("\n")) {
    const m = /^(?:\+\+\+|---) (?:[ab]\/)?(.+?)\s*$/.exec(line);
    if (m && m[1] !== "/dev/null") paths.add(m[1]!);
  }
  return [...paths];
}

/** One commit of a generated repository: a full tree, or changes on top of a parent. */
export interface CommitSpec {
  /** Branch it is written to (`refs/heads/<branch>`). */
  branch: string;
  message: string;
  /** Index of an earlier commit in the same stream; absent: the tree is complete. */
  parent?: number;
  files: Tree;
}

/** Unix time of every generated commit: fixed, so commit ids depend on content only. */
const EPOCH = 1704067200; // 2024-01-01T00:00:00Z
const IDENTITY = `lego-rl <tasks@lego-rl.invalid> ${EPOCH} +0000`;

/**
 * Writes `commits` into a fresh bare repository at `dir` and returns their
 * commit ids, in order. Same specs → same ids.
 */
export function writeRepo(dir: string, commits: CommitSpec[]): string[] {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  git(["init", "--quiet", "--bare", dir]);
  const chunks: Buffer[] = [];
  const text = (s: string) => chunks.push(Buffer.from(s, "utf8"));
  const data = (b: Buffer) => {
    text(`data ${b.length}\n`);
    chunks.push(b);
    text("\n");
  };
  let mark = 0;
  const commitMarks: number[] = [];
  commits.forEach((c) => {
    const blobMarks: Array<[string, number, boolean]> = [];
    for (const [path, f] of [...c.files].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      text(`blob\nmark :${++mark}\n`);
      data(f.content);
      blobMarks.push([path, mark, f.executable]);
    }
    text(`commit refs/heads/${c.branch}\nmark :${++mark}\nauthor ${IDENTITY}\ncommitter ${IDENTITY}\n`);
    data(Buffer.from(c.message, "utf8"));
    if (c.parent !== undefined) text(`from :${commitMarks[c.parent]}\n`);
    else text("deleteall\n");
    for (const [path, m, x] of blobMarks) text(`M ${x ? "100755" : "100644"} :${m} ${path}\n`);
    text("\n");
    commitMarks.push(mark);
  });
  const marksFile = join(dir, "lego-marks");
  try {
    git(["-C", dir, "fast-import", "--quiet", "--done", `--export-marks=${marksFile}`], { input: Buffer.concat([...chunks, Buffer.from("done\n")]) });
  } catch (e) {
    throw new TaskRepoError(dir, "fast-import", describeFailure(e));
  }
  const marks = new Map(
    readFileSync(marksFile, "utf8")
      .trim()
      .split("\n")
      .map((l) => l.split(" ") as [string, string])
      .map(([m, sha]) => [Number(m.slice(1)), sha]),
  );
  rmSync(marksFile);
  return commitMarks.map((m) => marks.get(m)!);
}
