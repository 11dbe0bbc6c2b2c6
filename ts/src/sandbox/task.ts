/**
 * Reads Harbor task directories as Harbor (0.26, task schema 1.4) writes them:
 *   instruction.md          what the agent is told
 *   task.toml               full TOML (smol-toml): schema_version, [task],
 *                           [metadata], [agent], [verifier], [environment],
 *                           [solution], and our [lego] section (see TaskConfig)
 *   environment/            a Dockerfile (FROM lego-rl/base) or a setup.sh run as root
 *   tests/test.sh (+ files) hidden tests, copied to /tests only at grading
 *   solution/solve.sh (+ files) gold solution, copied to /solution for the oracle
 * Fields we do not act on are kept in `TaskDefinition.toml` and ignored.
 */
import { existsSync, readFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { parse as parseToml, TomlError } from "smol-toml";
import { TaskFormatError } from "./errors.ts";
import type { TarFile } from "./tar.ts";

export interface TaskConfig {
  /** Agent stage limit ([agent] timeout_sec). */
  agentTimeoutSec: number;
  /** Grading limit ([verifier] timeout_sec). */
  verifierTimeoutSec: number;
  /** Limit on building the task image ([environment] build_timeout_sec). */
  buildTimeoutSec: number;
  /** Extra protected globs beyond the defaults ([lego] protected_paths). */
  protectedPaths: string[];
  /**
   * The verifier needs the repository's history up to the base commit
   * ([lego] needs_git_history, default false). Either way nothing beyond the
   * base (future commits, other branches, tags) is left in the task image;
   * without it the image keeps one commit of the base tree.
   */
  needsGitHistory: boolean;
  /**
   * The verifier's pytest reports to the grading runner through the
   * lego_verdict plugin ([lego] verdict_plugin, default true). Turn off for a
   * verifier whose pytest runs on an interpreter other than the image's python3.
   */
  verdictPlugin: boolean;
  /**
   * SWE-bench's FAIL_TO_PASS ([lego] fail_to_pass): pytest node ids that fail
   * before the fix and must pass after it. With named tests (this or
   * passToPass non-empty) the reward is 1 only when every named test was
   * reported passed by the grading runner's reporter; a missing, errored or
   * skipped named test is a failure, and the verifier's exit status is not
   * consulted (other tests may fail, as in SWE-bench).
   */
  failToPass: string[];
  /** SWE-bench's PASS_TO_PASS ([lego] pass_to_pass): node ids that passed before and must still pass. */
  passToPass: string[];
}

/** Every test the task names, in the order given (fail_to_pass first). Empty: the task names none. */
export function namedTests(config: TaskConfig): string[] {
  return [...new Set([...config.failToPass, ...config.passToPass])];
}

export const DEFAULT_TASK_CONFIG: TaskConfig = {
  agentTimeoutSec: 600,
  verifierTimeoutSec: 120,
  buildTimeoutSec: 600,
  protectedPaths: [],
  needsGitHistory: false,
  verdictPlugin: true,
  failToPass: [],
  passToPass: [],
};

/**
 * Files a task lays over its image's /workspace. Many tasks can share one
 * image (an `easy` template, a mined project) and differ only in a file or
 * two: the overlay is written at setup (so the agent sees it and the
 * single-commit snapshot includes it) and into the grading container before
 * the pristine workspace is read, so no image is built per variant.
 */
export interface WorkspaceOverlay {
  /** Written into /workspace, owned by the agent user, before the agent runs and before grading. */
  files: TarFile[];
  /** Written root-owned into the grading workspace after the agent's change (a SWE-bench test_patch). */
  gradingFiles: TarFile[];
}

export interface TaskDefinition {
  name: string;
  dir: string;
  instruction: string;
  config: TaskConfig;
  environment: {
    kind: "dockerfile" | "setup-script";
    dir: string;
    /** Names the image repository; tasks sharing an environment share a name (default: the task name). */
    image?: string;
  };
  testsDir: string;
  /** solution/solve.sh, run from /workspace with solution/ copied to /solution. */
  solveScript: string | undefined;
  /** task.toml `schema_version` (Harbor < 1.1 called it `version`). */
  schemaVersion: string;
  /** task.toml [metadata], as written. */
  metadata: Record<string, unknown>;
  /** The whole task.toml as parsed; unknown tables and fields are kept here and ignored. */
  toml: Record<string, unknown>;
  overlay?: WorkspaceOverlay;
}

/** Harbor's task schema majors we read; a newer major may change meanings, so it is refused. */
const SCHEMA_MAJOR = "1";

/**
 * Parses task.toml text with a spec-compliant TOML parser. A syntax error
 * becomes a TaskFormatError naming `task.toml:LINE:COLUMN`.
 */
export function parseTaskToml(text: string, taskDir: string): Record<string, unknown> {
  try {
    return parseToml(text) as Record<string, unknown>;
  } catch (e) {
    if (!(e instanceof TomlError)) throw e;
    const first = e.message.replace(/^Invalid TOML document: /, "").split("\n")[0];
    throw new TaskFormatError(taskDir, `task.toml:${e.line}:${e.column}`, first ?? "invalid TOML");
  }
}

/**
 * The line of `key` inside `[table]` (or at top level), for errors about a
 * value that parsed but is wrong. Dotted keys and inline tables fall back to the table's line.
 */
export function lineOfKey(text: string, table: string, key: string): number | undefined {
  let current = "";
  let tableLine: number | undefined;
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    const header = /^\[\[?\s*([^\]]+?)\s*\]\]?/.exec(line);
    if (header) {
      current = header[1]!.replace(/\s+/g, "");
      if (current === table) tableLine = i + 1;
      continue;
    }
    if (current === table && new RegExp(`^["']?${key.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}["']?\\s*=`).test(line)) return i + 1;
  }
  return tableLine;
}

/** Reads typed fields out of the parsed TOML, naming file, line and expectation on a mismatch. */
class TomlFields {
  constructor(
    private readonly doc: Record<string, unknown>,
    private readonly text: string,
    private readonly taskDir: string,
  ) {}

  table(name: string): Record<string, unknown> {
    const v = this.doc[name];
    if (v === undefined) return {};
    if (typeof v !== "object" || v === null || Array.isArray(v)) this.fail("", name, "expected a table", v);
    return v as Record<string, unknown>;
  }

  private fail(table: string, key: string, expected: string, got: unknown): never {
    const line = lineOfKey(this.text, table, key);
    const field = table ? `${table}.${key}` : key;
    throw new TaskFormatError(this.taskDir, `task.toml${line ? `:${line}` : ""}`, `${field}: ${expected}, got ${JSON.stringify(got)}`);
  }

  positive(table: string, key: string, dflt: number): number {
    const v = this.table(table)[key];
    if (v === undefined) return dflt;
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) this.fail(table, key, "expected a positive number of seconds", v);
    return v;
  }

  bool(table: string, key: string, dflt: boolean): boolean {
    const v = this.table(table)[key];
    if (v === undefined) return dflt;
    if (typeof v !== "boolean") this.fail(table, key, "expected true or false", v);
    return v;
  }

  strings(table: string, key: string): string[] {
    const v = this.table(table)[key];
    if (v === undefined) return [];
    if (!Array.isArray(v) || v.some((s) => typeof s !== "string")) this.fail(table, key, "expected an array of strings", v);
    return v as string[];
  }

  string(table: string, key: string): string | undefined {
    const v = table ? this.table(table)[key] : this.doc[key];
    if (v === undefined) return undefined;
    if (typeof v !== "string") this.fail(table, key, "expected a string", v);
    return v;
  }
}

/** The task's config from task.toml text (defaults for what it leaves out). */
export function readTaskConfig(text: string, taskDir: string): { doc: Record<string, unknown>; config: TaskConfig; schemaVersion: string } {
  const doc = parseTaskToml(text, taskDir);
  const f = new TomlFields(doc, text, taskDir);
  const schemaVersion = f.string("", "schema_version") ?? f.string("", "version") ?? "1.0";
  if (schemaVersion.split(".")[0] !== SCHEMA_MAJOR) {
    const line = lineOfKey(text, "", doc.schema_version !== undefined ? "schema_version" : "version");
    throw new TaskFormatError(taskDir, `task.toml${line ? `:${line}` : ""}`, `schema_version ${schemaVersion}: only Harbor task schema ${SCHEMA_MAJOR}.x is read`);
  }
  for (const t of ["task", "metadata", "agent", "verifier", "environment", "solution", "lego"]) f.table(t);
  const d = DEFAULT_TASK_CONFIG;
  const out = {
    doc,
    schemaVersion,
    config: {
      agentTimeoutSec: f.positive("agent", "timeout_sec", d.agentTimeoutSec),
      verifierTimeoutSec: f.positive("verifier", "timeout_sec", d.verifierTimeoutSec),
      buildTimeoutSec: f.positive("environment", "build_timeout_sec", d.buildTimeoutSec),
      protectedPaths: f.strings("lego", "protected_paths"),
      needsGitHistory: f.bool("lego", "needs_git_history", d.needsGitHistory),
      verdictPlugin: f.bool("lego", "verdict_plugin", d.verdictPlugin),
      failToPass: f.strings("lego", "fail_to_pass"),
      passToPass: f.strings("lego", "pass_to_pass"),
    },
  };
  const { config } = out;
  if (!config.verdictPlugin && (config.failToPass.length || config.passToPass.length)) {
    const line = lineOfKey(text, "lego", "verdict_plugin");
    throw new TaskFormatError(taskDir, `task.toml${line ? `:${line}` : ""}`, "lego.verdict_plugin: named tests (fail_to_pass, pass_to_pass) are graded from the plugin's reports: it must stay on");
  }
  return out;
}

/** Harbor 1.4 names a task in [task] name ("org/name"); older files in [metadata] name. */
function taskName(doc: Record<string, unknown>, dir: string): string {
  const fromTable = (t: string) => {
    const v = (doc[t] as Record<string, unknown> | undefined)?.name;
    return typeof v === "string" && v ? v : undefined;
  };
  return fromTable("task") ?? fromTable("metadata") ?? basename(dir);
}

export function loadTask(taskDir: string): TaskDefinition {
  const dir = resolve(taskDir);
  const need = (rel: string) => {
    const p = join(dir, rel);
    if (!existsSync(p)) throw new TaskFormatError(dir, rel, "missing");
    return p;
  };
  const text = readFileSync(need("task.toml"), "utf8");
  const { doc, config, schemaVersion } = readTaskConfig(text, dir);
  const envDir = need("environment");
  const kind = existsSync(join(envDir, "Dockerfile"))
    ? "dockerfile"
    : existsSync(join(envDir, "setup.sh"))
      ? "setup-script"
      : undefined;
  if (!kind) throw new TaskFormatError(dir, "environment", "needs a Dockerfile or a setup.sh");
  need("tests/test.sh");
  const solve = join(dir, "solution/solve.sh");
  return {
    name: taskName(doc, dir),
    dir,
    instruction: readFileSync(need("instruction.md"), "utf8"),
    config,
    environment: { kind, dir: envDir },
    testsDir: join(dir, "tests"),
    solveScript: existsSync(solve) ? solve : undefined,
    schemaVersion,
    metadata: (doc.metadata as Record<string, unknown> | undefined) ?? {},
    toml: doc,
  };
}
