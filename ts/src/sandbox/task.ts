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
  /** Grading keeps the image's full git history ([lego] needs_git_history). Default true. */
  needsGitHistory: boolean;
  /**
   * The verifier's pytest reports to the grading runner through the
   * lego_verdict plugin ([lego] verdict_plugin, default true). Turn off for a
   * verifier whose pytest runs on an interpreter other than the image's python3.
   */
  verdictPlugin: boolean;
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
    else if (/^\[.*\]$/.test(v)) {
      value = v
        .slice(1, -1)
        .split(",")
        .map((s) => s.trim())
        .filter(Boolean)
        .map((s) => s.replace(/^["']|["']$/g, ""));
    } else throw new TaskFormatError(where, `task.toml:${i + 1}`, `unsupported value '${v}'`);
    out.set(key, value);
  });
  return out;
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
  const prot = toml.get("lego.protected_paths") ?? [];
  if (!Array.isArray(prot)) throw new TaskFormatError(dir, "lego.protected_paths", "expected a string array");
  const hist = toml.get("lego.needs_git_history") ?? true;
  const plugin = toml.get("lego.verdict_plugin") ?? true;
  const solve = join(dir, "solution/solve.sh");
  return {
    name: String(toml.get("metadata.name") ?? basename(dir)),
    dir,
    instruction: readFileSync(need("instruction.md"), "utf8"),
    config: {
      agentTimeoutSec: num(toml, "agent.timeout_sec", 600, dir),
      verifierTimeoutSec: num(toml, "verifier.timeout_sec", 120, dir),
      protectedPaths: prot,
      needsGitHistory: hist === true,
      verdictPlugin: plugin === true,
    },
    environment: { kind, dir: envDir },
    testsDir: join(dir, "tests"),
    solveScript: existsSync(solve) ? solve : undefined,
  };
}
