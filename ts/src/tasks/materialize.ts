/**
 * A SWE-bench record becomes a runnable task:
 *   environment  the repository at environment_setup_commit (or the archive),
 *                unpacked into /workspace by setup.sh: one image per
 *                repository and setup commit, shared by its tasks;
 *   overlay      the files base_commit changes relative to that commit (the
 *                bug), laid over /workspace at setup and grading;
 *   tests/       a verifier running FAIL_TO_PASS + PASS_TO_PASS; the
 *                test_patch's files are written root-owned at grading only;
 *   solution/    gold.patch and a solve.sh that applies it.
 * Everything is written under the cache, content-addressed, so a second
 * materialisation is a few stat calls.
 */
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { gunzipSync } from "node:zlib";
import { DEFAULT_TASK_CONFIG, loadTask, unpack, type TaskDefinition } from "../sandbox/index.ts";
import { TaskRepoError, TaskSourceError } from "./errors.ts";
import { applyPatch, GitRepo, patchedPaths, type Tree } from "./git.ts";
import { ENV_SETUP_SH, GOLD_PATCH_SH, NAMED_TESTS_SH, pytestIni } from "./scripts.ts";
import type { SweBenchRecord } from "./swebench.ts";
import { harborTaskToml } from "./toml-out.ts";

/** Bump when the generated files change meaning: every cached environment and task folder is then rebuilt. */
const RECIPE = "tasks-v1";

/** Where a record's repository was found. */
export type RepoRef = { kind: "git"; path: string } | { kind: "archive"; path: string };

const hash = (...parts: Array<string | Buffer>) => {
  const h = createHash("sha256");
  for (const p of parts) h.update(typeof p === "string" ? `${p.length}:${p}` : p);
  return h.digest("hex").slice(0, 12);
};

export const safeName = (s: string) => s.replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 80) || "task";

/** Writes a folder once: built in a scratch sibling, then renamed into place (a reader never sees half of it). */
export function writeOnce(dir: string, build: (tmp: string) => void): string {
  if (existsSync(dir)) return dir;
  const tmp = `${dir}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  mkdirSync(tmp, { recursive: true });
  try {
    build(tmp);
    renameSync(tmp, dir);
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    if (existsSync(dir)) return dir; // another process won the race with the same content
    throw e;
  }
  return dir;
}

/** The environment (setup.sh + the tree at `rev` as repo.tar) of a git repository, shared by every task built on that commit. */
export function gitEnvironment(cacheDir: string, repoName: string, gitPath: string, rev: string): { dir: string; image: string } {
  const git = GitRepo.at(gitPath);
  const commit = git.resolve(rev);
  const stem = safeName(repoName.replace("/", "__"));
  const dir = join(cacheDir, "env", `${stem}-${commit.slice(0, 12)}-${hash(RECIPE).slice(0, 6)}`);
  writeOnce(dir, (tmp) => {
    writeFileSync(join(tmp, "setup.sh"), ENV_SETUP_SH, { mode: 0o755 });
    writeFileSync(join(tmp, "commit-message"), `${repoName} at ${commit}\n`);
    writeFileSync(join(tmp, "repo.tar"), git.archive(commit));
  });
  return { dir, image: `swe-${stem.toLowerCase()}` };
}

/** A definition that only names an environment: enough to build (or find) its image. */
export function environmentDefinition(env: { dir: string; image: string }): TaskDefinition {
  return {
    name: env.image,
    dir: env.dir,
    instruction: "",
    config: DEFAULT_TASK_CONFIG,
    environment: { kind: "setup-script", dir: env.dir, image: env.image },
    testsDir: env.dir,
    solveScript: undefined,
    schemaVersion: "1.4",
    metadata: {},
    toml: {},
  };
}

function envDir(cacheDir: string, record: SweBenchRecord, repo: RepoRef): { dir: string; image: string } {
  if (repo.kind === "git") return gitEnvironment(cacheDir, record.repo, repo.path, record.environment_setup_commit || record.base_commit);
  const image = `swe-${safeName(record.repo.replace("/", "__")).toLowerCase()}`;
  const bytes = readFileSync(repo.path);
  const dir = join(cacheDir, "env", `${safeName(basename(repo.path))}-${hash(RECIPE, bytes)}`);
  writeOnce(dir, (tmp) => {
    writeFileSync(join(tmp, "setup.sh"), ENV_SETUP_SH, { mode: 0o755 });
    writeFileSync(join(tmp, "commit-message"), `${record.repo} at ${record.base_commit || "archive"}\n`);
    copyFileSync(repo.path, join(tmp, /\.t?gz$/.test(repo.path) ? "repo.tar.gz" : "repo.tar"));
  });
  return { dir, image };
}

/** Files of the archive's tree (a leading single folder, as `git archive --prefix` or an sdist has, is kept). */
async function archiveFiles(path: string, wanted: Set<string>): Promise<Tree> {
  let bytes = readFileSync(path);
  if (bytes[0] === 0x1f && bytes[1] === 0x8b) bytes = gunzipSync(bytes);
  const tree: Tree = new Map();
  for (const e of await unpack(bytes)) {
    const p = e.path.replace(/^\.\//, "");
    if (e.type === "file" && wanted.has(p)) tree.set(p, { content: e.content, executable: (e.mode & 0o111) !== 0 });
  }
  return tree;
}

/** What base_commit changes relative to the environment's commit, for a source's records in one go. */
export type OverlayIndex = (record: SweBenchRecord) => { changes: Array<{ status: string; path: string }>; files: Tree } | undefined;

/** An OverlayIndex over `records` of one git repository, computed on first use with two git processes in all. */
export function overlayIndex(repoPath: string, records: SweBenchRecord[]): OverlayIndex {
  let index: ReturnType<GitRepo["changesMany"]> | undefined;
  return (record) => {
    const git = GitRepo.at(repoPath);
    index ??= git.changesMany(
      records.filter((r) => r.environment_setup_commit && r.environment_setup_commit !== r.base_commit).map((r) => [git.resolve(r.environment_setup_commit), git.resolve(r.base_commit)]),
    );
    return index.get(git.resolve(record.base_commit));
  };
}

/** The bug: what base_commit changes relative to the environment's commit. */
function overlayOf(record: SweBenchRecord, repo: RepoRef, where: string, index?: OverlayIndex): Tree {
  if (repo.kind !== "git" || !record.environment_setup_commit || record.environment_setup_commit === record.base_commit) return new Map();
  const git = GitRepo.at(repo.path);
  const hit = index?.(record);
  const changes = hit?.changes ?? git.changes(record.environment_setup_commit, record.base_commit);
  const deleted = changes.filter((c) => c.status === "D");
  if (deleted.length) {
    throw new TaskSourceError(where, "base_commit", `deletes ${deleted.length} file(s) present at environment_setup_commit (${deleted[0]!.path}); only additions and changes can be laid over the environment`);
  }
  return hit?.files ?? git.files(record.base_commit, changes.map((c) => c.path));
}

/** The test_patch's result on the files it touches, written at grading only. */
async function gradingFilesOf(record: SweBenchRecord, repo: RepoRef, overlay: Tree, where: string): Promise<Tree> {
  if (!record.test_patch.trim()) return new Map();
  const paths = patchedPaths(record.test_patch);
  let base: Tree;
  if (repo.kind === "git") base = GitRepo.at(repo.path).files(record.base_commit, paths);
  else base = await archiveFiles(repo.path, new Set(paths));
  for (const p of paths) if (overlay.has(p)) base.set(p, overlay.get(p)!);
  return applyPatch(base, record.test_patch, `${where}: test_patch`);
}

const toTar = (t: Tree) => [...t].map(([path, f]) => ({ path, content: f.content, mode: f.executable ? 0o755 : 0o644 }));

/** The runnable definition of one record; `where` names the record in errors. */
export async function materializeRecord(record: SweBenchRecord, repo: RepoRef, cacheDir: string, where: string, index?: OverlayIndex): Promise<TaskDefinition> {
  if (repo.kind === "git" && !existsSync(repo.path)) throw new TaskRepoError(where, "repo", `${repo.path} is gone`);
  const env = envDir(cacheDir, record, repo);
  const overlay = overlayOf(record, repo, where, index);
  const grading = await gradingFilesOf(record, repo, overlay, where);
  const lego = record.lego ?? {};
  const named = [...record.FAIL_TO_PASS, ...record.PASS_TO_PASS];
  if (!named.length) throw new TaskSourceError(where, "FAIL_TO_PASS", "no named tests: the task could never be graded");
  const id = JSON.stringify(record);
  const dir = join(cacheDir, "task", `${safeName(record.instance_id)}-${hash(RECIPE, id, env.dir)}`);
  writeOnce(dir, (tmp) => {
    writeFileSync(join(tmp, "instruction.md"), record.problem_statement.endsWith("\n") ? record.problem_statement : `${record.problem_statement}\n`);
    writeFileSync(join(tmp, "task.toml"), harborTaskToml(record));
    symlinkSync(env.dir, join(tmp, "environment"));
    mkdirSync(join(tmp, "tests"));
    writeFileSync(join(tmp, "tests/test.sh"), NAMED_TESTS_SH, { mode: 0o755 });
    writeFileSync(join(tmp, "tests/pytest.ini"), pytestIni(lego.pythonpath ?? ["."]));
    writeFileSync(join(tmp, "tests/named_tests.txt"), `${named.join("\n")}\n`);
    mkdirSync(join(tmp, "solution"));
    writeFileSync(join(tmp, "solution/solve.sh"), GOLD_PATCH_SH, { mode: 0o755 });
    writeFileSync(join(tmp, "solution/gold.patch"), record.patch);
  });
  const def = loadTask(dir);
  return {
    ...def,
    name: record.instance_id,
    environment: { ...def.environment, dir: env.dir, image: env.image },
    overlay: { files: toTar(overlay), gradingFiles: toTar(grading) },
  };
}
