/**
 * Mines the `builtin` suite: for each project (projects.ts), its pinned
 * sdist becomes a one-commit repository and a task image; the miner
 * (python-bridge/lego_rl/tasks, stdlib only) runs inside a network-less
 * container of that image, with the image's Python and pytest — exactly what
 * grading uses — and returns the candidates it kept and rejected. Each kept
 * bug becomes a commit on top of the pristine one and a SWE-bench record.
 * Same seed and projects → the same tasks.jsonl, byte for byte.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import { DEFAULT_LIMITS, ensureBaseImage, ensureTaskImage, Sandbox, unpack, type TarFile } from "../sandbox/index.ts";
import type { TasksConfig } from "./config.ts";
import { TaskSourceError } from "./errors.ts";
import { writeRepo, type CommitSpec, type Tree } from "./git.ts";
import { environmentDefinition, gitEnvironment } from "./materialize.ts";
import { BUILTIN_PROJECTS, pinnedSdists, type MinedProject } from "./projects.ts";
import { pytestIni } from "./scripts.ts";
import { repoDirName } from "./suites.ts";
import { formatSweBenchJsonl, type SweBenchRecord } from "./swebench.ts";

export interface MineOptions {
  seed: number;
  /** Project names (default: all of BUILTIN_PROJECTS). */
  projects?: string[];
  /** Caps every project's kept tasks (default: each project's own maxTasks). */
  maxTasks?: number;
  /** Mutations tried per project, each a full test run. */
  maxCandidates: number;
  log?: (line: string) => void;
}

export const DEFAULT_MINE: MineOptions = { seed: 0, maxCandidates: 80 };

/** One tried candidate, as the miner reports it. */
interface Candidate {
  id: string;
  path: string;
  function: string;
  kind: string;
  variant: string;
  lineno: number;
  status: "kept" | "rejected";
  reason?: string;
  test_s: number;
  fail_to_pass?: string[];
  pass_to_pass?: string[];
  problem_statement?: string;
  patch?: string;
  buggy_source?: string;
}

export interface ProjectStats {
  project: string;
  version: string;
  split: string;
  candidates: number;
  tried: number;
  kept: number;
  rejected: Record<string, number>;
  baselineTests: number;
  mineSeconds: number;
  meanTestSeconds: number;
}

const PY_ROOT = fileURLToPath(new URL("../../../python-bridge/lego_rl/", import.meta.url));

/** The lego_rl package's top and its tasks/ modules, as files for /opt/lego-mine. */
function minerFiles(): TarFile[] {
  const files: TarFile[] = [{ path: "lego-mine/lego_rl/__init__.py", content: readFileSync(join(PY_ROOT, "__init__.py")), mode: 0o644 }];
  for (const name of readdirSync(join(PY_ROOT, "tasks")).sort()) {
    if (name.endsWith(".py")) files.push({ path: `lego-mine/lego_rl/tasks/${name}`, content: readFileSync(join(PY_ROOT, "tasks", name)), mode: 0o644 });
  }
  return files;
}

/** The sdist's files (its top folder stripped, caches and build leftovers dropped), checked against the pinned sha256. */
export async function readSdist(cfg: TasksConfig, name: string): Promise<{ version: string; tree: Tree }> {
  const pin = pinnedSdists().get(name);
  if (!pin) throw new TaskSourceError("scripts/tasks/builtin-sdists.txt", name, "not pinned");
  const candidates = [`${name}-${pin.version}.tar.gz`, `${name.replace(/-/g, "_")}-${pin.version}.tar.gz`].map((f) => join(cfg.sdistDir, f));
  const file = candidates.find((f) => existsSync(f));
  if (!file) throw new TaskSourceError(cfg.sdistDir, name, `sdist ${name}==${pin.version} is missing: run scripts/setup (scripts/tasks/fetch-sdists)`);
  const bytes = readFileSync(file);
  const sha = createHash("sha256").update(bytes).digest("hex");
  if (sha !== pin.sha256) throw new TaskSourceError(file, "sha256", `is ${sha}, pinned ${pin.sha256}: delete it and run scripts/tasks/fetch-sdists`);
  const tree: Tree = new Map();
  for (const e of await unpack(gunzipSync(bytes))) {
    if (e.type !== "file") continue;
    const rel = e.path.split("/").slice(1).join("/");
    if (!rel || /(^|\/)__pycache__\//.test(rel) || rel.endsWith(".pyc") || /\.egg-info\//.test(rel) || rel === "PKG-INFO") continue;
    tree.set(rel, { content: e.content, executable: (e.mode & 0o111) !== 0 });
  }
  return { version: pin.version, tree };
}

/** Python files of `sources` (files, or folders searched recursively), never tests or conftest. */
function sourceFiles(tree: Tree, sources: string[]): string[] {
  return [...tree.keys()]
    .filter((p) => p.endsWith(".py") && sources.some((s) => p === s || p.startsWith(`${s}/`)))
    .filter((p) => !/(^|\/)(tests?\/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)/.test(p))
    .sort();
}

async function mineProject(cfg: TasksConfig, project: MinedProject, opts: MineOptions, scratch: string): Promise<{ stats: ProjectStats; commits: CommitSpec[]; kept: Candidate[]; version: string }> {
  const log = opts.log ?? (() => {});
  const t0 = performance.now();
  const { version, tree } = await readSdist(cfg, project.name);
  const repoName = `pypi/${project.name}`;
  const envCommit: CommitSpec = { branch: "env", message: `${project.name} ${version} (sdist)\n`, files: tree };
  const repoPath = join(scratch, repoDirName(repoName));
  const [envId] = writeRepo(repoPath, [envCommit]);
  const env = gitEnvironment(cfg.cacheDir, repoName, repoPath, envId!);
  const base = await ensureBaseImage(undefined, log);
  const image = await ensureTaskImage(environmentDefinition(env), base.tag, { log });
  const sources = sourceFiles(tree, project.sources);
  const maxTasks = Math.min(project.maxTasks, opts.maxTasks ?? Number.POSITIVE_INFINITY);
  const config = { project: project.name, version, sources, seed: opts.seed, max_candidates: opts.maxCandidates, max_tasks: maxTasks };
  const sb = await Sandbox.start({ image: image.tag, rolloutId: `mine-${project.name}`, stage: "build", limits: { ...DEFAULT_LIMITS, memoryBytes: 1 << 30 } });
  let out: string;
  let summary: { candidates: number; baseline_tests: number };
  try {
    await sb.putFiles("/opt", [...minerFiles(), { path: "lego-mine/config.json", content: Buffer.from(JSON.stringify(config)), mode: 0o644 }]);
    await sb.exec(["mkdir", "-p", "/tests"], { user: "0" });
    await sb.putFiles("/tests", [{ path: "pytest.ini", content: Buffer.from(pytestIni(project.pythonpath)), mode: 0o644 }]);
    const bootstrap = "import sys; sys.path.insert(0, '/opt/lego-mine'); from lego_rl.tasks.mine import main; sys.exit(main())";
    log(`${project.name} ${version}: mining ${sources.length} source file(s), seed ${opts.seed}, up to ${maxTasks} tasks from ${opts.maxCandidates} tries`);
    const run = await sb.exec(["python3", "-I", "-c", bootstrap, "/opt/lego-mine/config.json", "/tmp/mine.jsonl"], { timeoutMs: 4 * 3600_000, workdir: "/workspace" });
    if (run.exitCode !== 0) throw new TaskSourceError(project.name, "miner", `exited ${run.exitCode}: ${run.stderr.slice(-1500)}`);
    for (const line of run.stderr.trim().split("\n").filter(Boolean)) log(`  ${line}`);
    summary = (JSON.parse(run.stdout.trim().split("\n").pop()!) as { summary: typeof summary }).summary;
    const cat = await sb.exec(["cat", "/tmp/mine.jsonl"], { capBytes: 256 << 20 });
    out = cat.stdout;
  } finally {
    await sb.remove();
  }
  const tried = out.split("\n").filter(Boolean).map((l) => JSON.parse(l) as Candidate);
  const kept = tried.filter((c) => c.status === "kept");
  const rejected: Record<string, number> = {};
  for (const c of tried) if (c.status === "rejected") rejected[c.reason!] = (rejected[c.reason!] ?? 0) + 1;
  const commits: CommitSpec[] = [
    envCommit,
    ...kept.map((c): CommitSpec => ({
      branch: `task/${c.id}`,
      message: `${c.id}: ${c.kind} (${c.variant}) in ${c.function}\n`,
      parent: 0,
      files: new Map([[c.path, { content: Buffer.from(c.buggy_source!, "utf8"), executable: tree.get(c.path)?.executable ?? false }]]),
    })),
  ];
  const stats: ProjectStats = {
    project: project.name,
    version,
    split: project.split,
    candidates: summary.candidates,
    tried: tried.length,
    kept: kept.length,
    rejected,
    baselineTests: summary.baseline_tests,
    mineSeconds: Math.round((performance.now() - t0) / 100) / 10,
    meanTestSeconds: tried.length ? Math.round((tried.reduce((a, c) => a + c.test_s, 0) / tried.length) * 100) / 100 : 0,
  };
  return { stats, commits, kept, version };
}

/**
 * Mines the projects and writes the suite to `outDir` (tasks.jsonl, repos/,
 * mining.json with per-project figures), replacing what was there.
 */
export async function mineBuiltin(cfg: TasksConfig, outDir: string, opts: MineOptions): Promise<ProjectStats[]> {
  const names = opts.projects ?? BUILTIN_PROJECTS.map((p) => p.name);
  const projects = names.map((n) => {
    const p = BUILTIN_PROJECTS.find((x) => x.name === n);
    if (!p) throw new TaskSourceError("--project", n, `not a builtin project (${BUILTIN_PROJECTS.map((x) => x.name).join(", ")})`);
    return p;
  });
  const tmp = `${outDir}.${process.pid}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(join(tmp, "repos"), { recursive: true });
  const scratch = join(tmp, "scratch");
  const records: SweBenchRecord[] = [];
  const stats: ProjectStats[] = [];
  try {
    for (const project of projects) {
      const mined = await mineProject(cfg, project, opts, scratch);
      const repoName = `pypi/${project.name}`;
      const ids = writeRepo(join(tmp, "repos", repoDirName(repoName)), mined.commits);
      mined.kept.forEach((c, i) => {
        records.push({
          instance_id: c.id,
          repo: repoName,
          base_commit: ids[i + 1]!,
          problem_statement: c.problem_statement!,
          patch: c.patch!,
          test_patch: "",
          FAIL_TO_PASS: c.fail_to_pass!,
          PASS_TO_PASS: c.pass_to_pass!,
          version: mined.version,
          environment_setup_commit: ids[0]!,
          lego: {
            suite: "builtin",
            split: project.split,
            project: project.name,
            mutation: { kind: c.kind, variant: c.variant, path: c.path, function: c.function, lineno: c.lineno },
            pythonpath: project.pythonpath,
            agent_timeout_sec: 600,
            verifier_timeout_sec: 120,
          },
        });
      });
      stats.push(mined.stats);
    }
    rmSync(scratch, { recursive: true, force: true });
    writeFileSync(join(tmp, "tasks.jsonl"), formatSweBenchJsonl(records));
    writeFileSync(join(tmp, "mining.json"), `${JSON.stringify({ seed: opts.seed, maxCandidates: opts.maxCandidates, projects: stats }, null, 1)}\n`);
    rmSync(outDir, { recursive: true, force: true });
    mkdirSync(join(outDir, ".."), { recursive: true });
    renameSync(tmp, outDir);
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
  return stats;
}
