/**
 * Reads Harbor-style task directories:
 *   instruction.md          what the agent is told
 *   task.toml               limits and our [lego] section (see TaskConfig)
 *   environment/            a Dockerfile (FROM lego-rl/base) or a setup.sh run as root
 *   tests/test.sh (+ files) hidden tests, copied in only at grading
 *   solution/solve.sh       gold solution, used by the image health check
 */
import { existsSync, readFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { TaskFormatError } from "./errors.ts";

export interface TaskConfig {
  /** Agent stage limit (task.toml [agent] timeout_sec). */
  agentTimeoutSec: number;
  /** Grading limit ([verifier] timeout_sec). */
  verifierTimeoutSec: number;
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

export interface TaskDefinition {
  name: string;
  dir: string;
  instruction: string;
  config: TaskConfig;
  environment: { kind: "dockerfile" | "setup-script"; dir: string };
  testsDir: string;
  solveScript: string | undefined;
}

type TomlValue = string | number | boolean | string[];

/**
 * The subset of TOML task files use: [section] headers and one-line
 * `key = value` with strings, numbers, booleans and string arrays.
 * Anything else is an error naming the line, not a silent skip.
 */
export function parseTaskToml(text: string, where: string): Map<string, TomlValue> {
  const out = new Map<string, TomlValue>();
  let section = "";
  text.split("\n").forEach((raw, i) => {
    const line = raw.replace(/^\s+|\s+$/g, "");
    if (!line || line.startsWith("#")) return;
    const sec = /^\[([A-Za-z0-9_.-]+)\]$/.exec(line);
    if (sec) {
      section = sec[1]!;
      return;
    }
    const kv = /^([A-Za-z0-9_-]+)\s*=\s*(.+?)\s*(#.*)?$/.exec(line);
    if (!kv) throw new TaskFormatError(where, `task.toml:${i + 1}`, `cannot parse '${line}'`);
    const key = section ? `${section}.${kv[1]}` : kv[1]!;
    const v = kv[2]!;
    let value: TomlValue;
    if (/^".*"$/.test(v) || /^'.*'$/.test(v)) value = v.slice(1, -1);
    else if (v === "true" || v === "false") value = v === "true";
    else if (/^[+-]?\d+(\.\d+)?$/.test(v)) value = Number(v);
    else if (/^\[.*\]$/.test(v)) value = stringArray(v, where, i + 1);
    else throw new TaskFormatError(where, `task.toml:${i + 1}`, `unsupported value '${v}'`);
    out.set(key, value);
  });
  return out;
}

/**
 * A one-line array of quoted strings. Items are matched as whole quoted
 * strings, so a pytest node id such as "t.py::test[a,b]" keeps its comma.
 */
function stringArray(v: string, where: string, line: number): string[] {
  const items: string[] = [];
  const item = /\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)')\s*(,|$)/y;
  const body = v.slice(1, -1).replace(/,\s*$/, "");
  item.lastIndex = 0;
  while (item.lastIndex < body.length) {
    const start = item.lastIndex;
    const m = item.exec(body);
    if (!m || m.index !== start) throw new TaskFormatError(where, `task.toml:${line}`, `expected an array of quoted strings, got ${v}`);
    items.push(m[1] !== undefined ? m[1].replace(/\\(["\\])/g, "$1") : m[2]!);
    if (!m[3]) break;
  }
  return items;
}

function strings(m: Map<string, TomlValue>, key: string, where: string): string[] {
  const v = m.get(key) ?? [];
  if (!Array.isArray(v)) throw new TaskFormatError(where, key, "expected a string array");
  return v;
}

function num(m: Map<string, TomlValue>, key: string, dflt: number, where: string): number {
  const v = m.get(key);
  if (v === undefined) return dflt;
  if (typeof v !== "number" || v <= 0) throw new TaskFormatError(where, key, `expected a positive number, got ${v}`);
  return v;
}

export function loadTask(taskDir: string): TaskDefinition {
  const dir = resolve(taskDir);
  const need = (rel: string) => {
    const p = join(dir, rel);
    if (!existsSync(p)) throw new TaskFormatError(dir, rel, "missing");
    return p;
  };
  const toml = parseTaskToml(readFileSync(need("task.toml"), "utf8"), dir);
  const envDir = need("environment");
  const kind = existsSync(join(envDir, "Dockerfile"))
    ? "dockerfile"
    : existsSync(join(envDir, "setup.sh"))
      ? "setup-script"
      : undefined;
  if (!kind) throw new TaskFormatError(dir, "environment", "needs a Dockerfile or a setup.sh");
  need("tests/test.sh");
  const hist = toml.get("lego.needs_git_history") ?? false;
  const plugin = toml.get("lego.verdict_plugin") ?? true;
  const solve = join(dir, "solution/solve.sh");
  const failToPass = strings(toml, "lego.fail_to_pass", dir);
  const passToPass = strings(toml, "lego.pass_to_pass", dir);
  if (plugin !== true && (failToPass.length || passToPass.length)) {
    throw new TaskFormatError(dir, "lego.verdict_plugin", "named tests (fail_to_pass, pass_to_pass) are graded from the plugin's reports: it must stay on");
  }
  return {
    name: String(toml.get("metadata.name") ?? basename(dir)),
    dir,
    instruction: readFileSync(need("instruction.md"), "utf8"),
    config: {
      agentTimeoutSec: num(toml, "agent.timeout_sec", 600, dir),
      verifierTimeoutSec: num(toml, "verifier.timeout_sec", 120, dir),
      protectedPaths: strings(toml, "lego.protected_paths", dir),
      needsGitHistory: hist === true,
      verdictPlugin: plugin === true,
      failToPass,
      passToPass,
    },
    environment: { kind, dir: envDir },
    testsDir: join(dir, "tests"),
    solveScript: existsSync(solve) ? solve : undefined,
  };
}
