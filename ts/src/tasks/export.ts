/**
 * Writing tasks out, in either format:
 *   SWE-bench  OUT/tasks.jsonl + OUT/repos/ (each repository mirrored with its
 *              commit ids, or its archive copied; Harbor tasks carried whole
 *              in `lego.harbor`). `openTaskSource(OUT)` reads it back unchanged.
 *   Harbor     OUT/<task>/ self-contained task directories: the environment
 *              with the task's overlay baked in, built by a Dockerfile FROM
 *              `base` (lego-rl/base here; any image with python3, pytest and
 *              git for Harbor itself).
 */
import { copyFileSync, cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import type { TaskDefinition } from "../sandbox/index.ts";
import { TaskSourceError } from "./errors.ts";
import { harborRecord } from "./harbor.ts";
import { safeName } from "./materialize.ts";
import { exportDockerfile } from "./scripts.ts";
import { repoDirName } from "./suites.ts";
import { formatSweBenchJsonl, type SweBenchRecord } from "./swebench.ts";
import { GitRepo } from "./git.ts";
import type { Task } from "./task.ts";

export async function exportSweBench(tasks: Task[], outDir: string, opts: { encodeLists?: boolean } = {}): Promise<{ records: number; repos: number }> {
  mkdirSync(join(outDir, "repos"), { recursive: true });
  const records: SweBenchRecord[] = [];
  const copied = new Set<string>();
  for (const t of tasks) {
    if (!t.record) {
      const def = await t.definition();
      records.push(harborRecord(t, def.instruction, def.schemaVersion));
      continue;
    }
    records.push(t.record);
    const repo = t.repo!;
    if (copied.has(repo.path)) continue;
    copied.add(repo.path);
    if (repo.kind === "git") {
      const dest = join(outDir, "repos", repoDirName(t.record.repo));
      if (existsSync(dest)) throw new TaskSourceError(outDir, t.id, `two repositories export to ${dest}`);
      new GitRepo(repo.path).mirrorTo(dest);
    } else copyFileSync(repo.path, join(outDir, "repos", basename(repo.path)));
  }
  writeFileSync(join(outDir, "tasks.jsonl"), formatSweBenchJsonl(records, opts));
  return { records: records.length, repos: copied.size };
}

/** One self-contained Harbor directory per task, named after the task. */
export async function exportHarbor(tasks: Task[], outDir: string, opts: { base?: string } = {}): Promise<string[]> {
  const base = opts.base ?? "lego-rl/base";
  const dirs: string[] = [];
  for (const t of tasks) {
    const dir = join(outDir, safeName(t.id));
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    dirs.push(dir);
    if (t.harborDir) {
      cpSync(t.harborDir, dir, { recursive: true });
      continue;
    }
    await writeHarborDir(await t.definition(), dir, base);
  }
  return dirs;
}

async function writeHarborDir(def: TaskDefinition, dir: string, base: string): Promise<void> {
  for (const rel of ["instruction.md", "task.toml", "tests", "solution"]) cpSync(join(def.dir, rel), join(dir, rel), { recursive: true, dereference: true });
  const env = join(dir, "environment");
  cpSync(def.environment.dir, env, { recursive: true, dereference: true });
  for (const f of def.overlay?.files ?? []) {
    mkdirSync(join(env, "overlay", f.path, ".."), { recursive: true });
    writeFileSync(join(env, "overlay", f.path), f.content, { mode: f.mode });
  }
  writeFileSync(join(env, "Dockerfile"), exportDockerfile(base));
  const grading = def.overlay?.gradingFiles ?? [];
  if (grading.length) {
    // Harbor runs the verifier as root, so it can lay the test patch's files over the workspace itself.
    for (const f of grading) {
      mkdirSync(join(dir, "tests/grading", f.path, ".."), { recursive: true });
      writeFileSync(join(dir, "tests/grading", f.path), f.content, { mode: f.mode });
    }
    const sh = join(dir, "tests/test.sh");
    writeFileSync(sh, readFileSync(sh, "utf8").replace("cd /workspace\n", "cd /workspace\ncp -a /tests/grading/. /workspace/\n"), { mode: 0o755 });
  }
}
