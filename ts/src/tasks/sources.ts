/**
 * Opening a task source, named on the command line as one of:
 *   a Harbor task directory (it has task.toml), or a folder of them;
 *   a folder with tasks.jsonl (and repos/), as `lego tasks export` writes;
 *   a SWE-bench-style .jsonl file (repositories in repos/ beside it or in TasksConfig.repoRoots);
 *   a task list (.json: {"source": SRC, "tasks": [ids]}), as `lego eval --keep-mixed` writes;
 *   a suite name: `builtin` (mined, see suites.ts) or `easy[:seed=N,count=M]`.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import type { TasksConfig } from "./config.ts";
import { TaskRepoError, TaskSourceError } from "./errors.ts";
import { isGitRepo } from "./git.ts";
import { materializeRecord, overlayIndex, type RepoRef } from "./materialize.ts";
import { builtinSuite, easySuite, parseSuiteSpec } from "./suites.ts";
import { parseSweBenchJsonl, type SweBenchRecord } from "./swebench.ts";
import { once, type Split, type Task } from "./task.ts";
import { harborFromRecord, harborTask } from "./harbor.ts";

/** A task list: a selection of a source's tasks, by id. */
export interface TaskList {
  source: string;
  tasks: string[];
}

export interface TaskSet {
  /** The source as named. */
  name: string;
  tasks: Task[];
}

/** Finds a record's repository: `owner__name`, `name`, `owner/name` (plain, .git, or a .tar/.tar.gz archive), or an archive named after the instance. */
export function locateRepo(record: SweBenchRecord, roots: string[], where: string): RepoRef {
  const [owner, name] = record.repo.includes("/") ? record.repo.split("/", 2) as [string, string] : ["", record.repo];
  const stems = [...new Set([owner ? `${owner}__${name}` : name, name, owner ? `${owner}/${name}` : name])];
  const tried: string[] = [];
  for (const root of roots) {
    for (const stem of stems) {
      for (const p of [join(root, stem), join(root, `${stem}.git`)]) {
        tried.push(p);
        if (existsSync(p) && statSync(p).isDirectory() && isGitRepo(p)) return { kind: "git", path: p };
      }
    }
    for (const stem of [record.instance_id, ...stems]) {
      for (const ext of [".tar.gz", ".tgz", ".tar"]) {
        const p = join(root, `${stem}${ext}`);
        tried.push(p);
        if (existsSync(p)) return { kind: "archive", path: p };
      }
    }
  }
  throw new TaskRepoError(where, "repo", `no local repository or archive for ${record.repo} (no network at run time); looked in ${roots.join(", ") || "(no repo roots)"} for ${stems.join(" | ")}`);
}

/** Tasks of SWE-bench records whose repositories are under `roots`. */
export function recordTasks(records: SweBenchRecord[], source: string, roots: string[], cfg: TasksConfig): Task[] {
  const located = new Map<SweBenchRecord, RepoRef>();
  const byRepo = new Map<string, SweBenchRecord[]>();
  for (const record of records) {
    if (record.lego?.harbor) continue;
    const repo = locateRepo(record, roots, `${source}: ${record.instance_id}`);
    located.set(record, repo);
    if (repo.kind === "git") byRepo.set(repo.path, [...(byRepo.get(repo.path) ?? []), record]);
  }
  const indexes = new Map([...byRepo].map(([path, recs]) => [path, overlayIndex(path, recs)]));
  return records.map((record) => {
    const where = `${source}: ${record.instance_id}`;
    if (record.lego?.harbor) return harborFromRecord(record, source, cfg);
    const repo = located.get(record)!;
    return {
      id: record.instance_id,
      source,
      split: record.lego?.split as Split | undefined,
      failToPass: record.FAIL_TO_PASS,
      passToPass: record.PASS_TO_PASS,
      record,
      repo,
      definition: once(() => materializeRecord(record, repo, cfg.cacheDir, where, indexes.get(repo.path))),
    };
  });
}

export function jsonlTasks(file: string, cfg: TasksConfig, name = file): Task[] {
  const path = resolve(file);
  const records = parseSweBenchJsonl(readFileSync(path, "utf8"), path);
  return recordTasks(records, name, [join(dirname(path), "repos"), dirname(path), ...cfg.repoRoots], cfg);
}

function readTaskList(file: string): TaskList {
  let v: unknown;
  try {
    v = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    throw new TaskSourceError(file, "task list", `not JSON (${(e as Error).message})`);
  }
  const o = v as Partial<TaskList>;
  if (typeof o?.source !== "string" || !Array.isArray(o.tasks) || o.tasks.some((t) => typeof t !== "string")) {
    throw new TaskSourceError(file, "task list", 'expected {"source": "...", "tasks": ["id", ...]}');
  }
  return { source: o.source, tasks: o.tasks };
}

export async function openTaskSource(spec: string, cfg: TasksConfig, opts: { split?: Split } = {}): Promise<TaskSet> {
  const set = await open(spec, cfg);
  return opts.split ? { ...set, tasks: set.tasks.filter((t) => t.split === opts.split) } : set;
}

async function open(spec: string, cfg: TasksConfig): Promise<TaskSet> {
  const suite = parseSuiteSpec(spec);
  if (suite) {
    // `split=` picks a side of the suite's train/test split; the rest of the options name the suite itself
    // (and its cache folder), so `easy:seed=1` and `easy:seed=1,split=train` share one generated repository.
    const { split, ...options } = suite.options;
    if (split !== undefined && split !== "train" && split !== "test") throw new TaskSourceError(spec, "split", `expected train or test, got '${split}'`);
    if (suite.name === "builtin" && Object.keys(options).length) throw new TaskSourceError(spec, Object.keys(options)[0]!, "unknown builtin option (split)");
    const file = suite.name === "easy" ? await easySuite(cfg, options) : builtinSuite(cfg);
    const tasks = jsonlTasks(file, cfg, spec);
    return { name: spec, tasks: split ? tasks.filter((t) => t.split === split) : tasks };
  }
  const path = resolve(spec);
  if (!existsSync(path)) {
    throw new TaskSourceError(spec, "source", "no such file or directory, and not a suite name (builtin, easy[:seed=N,count=M])");
  }
  if (statSync(path).isDirectory()) {
    if (existsSync(join(path, "task.toml"))) return { name: spec, tasks: [harborTask(path, spec)] };
    if (existsSync(join(path, "tasks.jsonl"))) return { name: spec, tasks: jsonlTasks(join(path, "tasks.jsonl"), cfg, spec) };
    const dirs = readdirSync(path).sort().filter((d) => existsSync(join(path, d, "task.toml")));
    if (!dirs.length) throw new TaskSourceError(spec, "source", "a folder without task.toml, tasks.jsonl or Harbor task folders");
    return { name: spec, tasks: dirs.map((d) => harborTask(join(path, d), spec)) };
  }
  if (path.endsWith(".jsonl")) return { name: spec, tasks: jsonlTasks(path, cfg, spec) };
  if (path.endsWith(".json")) {
    const list = readTaskList(path);
    const inner = await open(list.source, cfg);
    const byId = new Map(inner.tasks.map((t) => [t.id, t]));
    const missing = list.tasks.filter((id) => !byId.has(id));
    if (missing.length) throw new TaskSourceError(path, "tasks", `${missing.length} id(s) not in ${list.source}: ${missing.slice(0, 3).join(", ")}`);
    return { name: spec, tasks: list.tasks.map((id) => byId.get(id)!) };
  }
  throw new TaskSourceError(spec, "source", "expected a directory, a .jsonl file, a task list .json or a suite name");
}
