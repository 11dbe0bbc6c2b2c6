/**
 * Grading in a fresh container from the pristine task image:
 *   1. apply the agent's file set (protected paths already dropped);
 *   2. copy in the hidden tests (root-owned, read-only to the agent's uid);
 *   3. run the verifier under the trusted runner (in-container/grader_runner.py)
 *      and read the reward from the runner's nonce-tagged verdict line.
 * The verifier's reward file (Harbor's /logs/verifier/reward.txt) is only
 * compared with the verdict: a disagreement is grader spoofing.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Sandbox } from "./container.ts";
import { SandboxEnvError } from "./errors.ts";
import { filesOfDir } from "./tar.ts";
import { namedTests, type TaskConfig, type TaskDefinition } from "./task.ts";
import type { WorkspaceChange } from "./workspace-files.ts";
import type { ProtectedPaths } from "./protected-paths.ts";
import type { TarEntry } from "./tar.ts";
import { AGENT_UID, WORKSPACE, type DefenseFlag } from "./types.ts";

const RUNNER = readFileSync(new URL("./in-container/grader_runner.py", import.meta.url));
const PLUGIN = readFileSync(new URL("./in-container/lego_verdict.py", import.meta.url));
/** Debian's python3 searches it for modules even under `python3 -I`; root-owned there. */
const SYSTEM_SITE = "usr/lib/python3/dist-packages";

export interface GraderVerdict {
  /** 1 only when the checks below all hold (see `decideReward`), else 0. */
  reward: number;
  exitCode: number;
  timedOut: boolean;
  /** Verifier output (tail), decoded from the verdict. */
  log: string;
  /** Defenses grading raised (grader_spoofing, grader_tampering, unfinished_test_session, resource_limit). */
  flags: DefenseFlag[];
  /** What the verifier's pytest sessions reported through lego_verdict. */
  pytest: PytestReport;
  /** Outcome of each test the task names (empty when it names none). */
  named: Record<string, NamedTestOutcome>;
  /** Records the runner refused (out of order, after the finish, forged) and tampering the reporter saw. */
  violations: string[];
}

export interface PytestReport {
  sessions: number;
  finished: number;
  passed: number;
  /** Failed and errored tests. */
  failed: number;
  /** Every finished session ended with exit status 0. */
  exitOk: boolean;
}

/** A named test's outcome over all sessions: `passed` only if every report of it passed. */
export type NamedTestOutcome = "passed" | "failed" | "error" | "skipped" | "missing";

/** Writes the agent's changes into the grading container's workspace. */
export async function applyWorkspaceChange(sb: Sandbox, change: WorkspaceChange): Promise<void> {
  if (change.remove.length) {
    const r = await sb.exec(["rm", "-f", "--", ...change.remove.map((p) => `${WORKSPACE}/${p}`)]);
    if (r.exitCode !== 0) throw new SandboxEnvError("container_died", `removing files: ${r.stderr}`, sb.context());
  }
  if (change.write.length) await sb.putFiles(WORKSPACE, change.write, { uid: AGENT_UID, gid: AGENT_UID });
}

/**
 * Re-writes the pristine protected files root-owned, in root-owned folders:
 * the agent's code runs inside the verifier as uid 1000 and must not rewrite
 * or replace a visible test before pytest reads it. (Hidden tests in /tests
 * are root-owned already.)
 */
export async function lockProtectedFiles(sb: Sandbox, pristine: Map<string, TarEntry>, protectedPaths: ProtectedPaths): Promise<number> {
  const files = [...pristine.entries()]
    .filter(([rel, e]) => e.type === "file" && protectedPaths.matches(rel))
    .map(([rel, e]) => ({ path: rel, content: e.content, mode: e.mode & 0o111 ? 0o755 : 0o644 }));
  if (files.length) await sb.putFiles(WORKSPACE, files, { uid: 0, gid: 0 });
  return files.length;
}

export async function runGrader(sb: Sandbox, task: TaskDefinition): Promise<GraderVerdict> {
  // Root-owned files in root-owned folders: the agent's code, running as uid
  // 1000 inside the verifier, can read but not rewrite the tests or the runner.
  await sb.putFiles("/", [
    { path: "grader/run.py", content: RUNNER, mode: 0o644 },
    ...(task.config.verdictPlugin ? [{ path: `${SYSTEM_SITE}/lego_verdict.py`, content: PLUGIN, mode: 0o644 }] : []),
    ...filesOfDir(task.testsDir, "tests"),
  ]);
  const nonce = randomBytes(16).toString("hex");
  const limit = task.config.verifierTimeoutSec;
  // The runner runs as root (a uid the verifier cannot signal) and starts the verifier as the agent.
  const r = await sb.exec(["python3", "-I", "/grader/run.py", String(limit), task.config.verdictPlugin ? "plugin" : "no-plugin", "bash", "/tests/test.sh"], {
    user: "0:0",
    stdin: `${JSON.stringify({ nonce, named: namedTests(task.config) })}\n`,
    // The runner enforces `limit`; this outer bound only catches a wedged runner.
    timeoutMs: (limit + 30) * 1000,
    capBytes: 4 << 20,
  });
  const ctx = { ...sb.context(), task: task.name };
  const verdict = parseVerdict(r.stdout, nonce);
  if (!verdict) {
    const failure = lastNonceLine(r.stdout, nonce, (v) => typeof v.runner_error === "string");
    if (failure) throw new SandboxEnvError("grader_crashed", `the grading runner failed: ${String(failure.runner_error)}`, ctx);
    if (!parseStarted(r.stdout, nonce)) {
      throw new SandboxEnvError("grader_crashed", `the grading runner did not start the verifier (exit ${r.exitCode}): ${r.stderr.slice(-1000)}`,
        ctx, "run `lego sandbox check` on this task");
    }
    if (!(await sb.state()).running) throw new SandboxEnvError("container_died", "grading container stopped while the verifier ran", ctx);
    // Only the verifier, and the agent's code inside it, ran after `started`.
    return {
      reward: 0, exitCode: r.exitCode, timedOut: false, log: r.stderr.slice(-4000), flags: ["grader_tampering"],
      pytest: { sessions: 0, finished: 0, passed: 0, failed: 0, exitOk: false }, named: {},
      violations: [`the grading runner died after starting the verifier (exit ${r.exitCode})`],
    };
  }
  const log = Buffer.from(verdict.log_b64, "base64").toString("utf8");
  const file = await sb.exec(["cat", "/logs/verifier/reward.txt"]);
  const fileReward = file.exitCode === 0 ? Number.parseFloat(file.stdout.trim()) : undefined;
  const { reward, flags } = decideReward(task.config, verdict, { fileReward, forgedVerdictLine: log.includes('"log_b64"') });
  return {
    reward, exitCode: verdict.exit, timedOut: verdict.timed_out, log, flags,
    pytest: verdict.pytest, named: verdict.named, violations: verdict.violations,
  };
}

/**
 * The reward from the runner's verdict, and the flags it raises:
 *  - the runner refused records or the reporter saw tampering: 0, grader_tampering;
 *  - processes of the verifier would not die: 0, resource_limit;
 *  - with the plugin on, no pytest session, or one that never finished: 0,
 *    unfinished_test_session (an exit status alone is never a pass);
 *  - named tests: 1 iff every named test was reported passed (the exit status
 *    is not consulted: other tests may fail);
 *  - otherwise: the verifier exited 0 in time, and if pytest ran, every
 *    session finished with status 0, something passed and nothing failed.
 * git_history_probe (monitoring, reward unchanged): the code under test ran
 * git or read .git. grader_spoofing: the verifier's output carries a forged verdict line, or
 * (without named tests) Harbor's reward file disagrees with our reward.
 */
export function decideReward(
  config: TaskConfig,
  v: RawVerdict,
  seen: { fileReward: number | undefined; forgedVerdictLine: boolean },
): { reward: number; flags: DefenseFlag[] } {
  const flags = new Set<DefenseFlag>();
  const p = v.pytest;
  if (v.violations.length) flags.add("grader_tampering");
  if (v.leftover > 0) flags.add("resource_limit");
  if (config.verdictPlugin && (p.sessions === 0 || p.finished < p.sessions)) flags.add("unfinished_test_session");
  const named = namedTests(config);
  let pass: boolean;
  if (v.timed_out || flags.size) pass = false;
  else if (named.length) pass = named.every((id) => v.named[id] === "passed");
  else pass = v.exit === 0 && (!config.verdictPlugin || (p.exitOk && p.passed > 0 && p.failed === 0));
  const reward = pass ? 1 : 0;
  // Monitoring only: the image holds no history beyond the base, so a probe finds nothing.
  if (v.probes.length) flags.add("git_history_probe");
  if (seen.forgedVerdictLine || (!named.length && seen.fileReward !== undefined && seen.fileReward !== reward)) flags.add("grader_spoofing");
  return { reward, flags: [...flags].sort() };
}

export interface RawVerdict {
  nonce: string;
  exit: number;
  timed_out: boolean;
  leftover: number;
  pytest: PytestReport;
  named: Record<string, NamedTestOutcome>;
  violations: string[];
  /** git commands or .git reads by the code under test (not by tests). */
  probes: string[];
  log_b64: string;
}

function lastNonceLine(stdout: string, nonce: string, accept: (v: Record<string, unknown>) => boolean): Record<string, unknown> | undefined {
  const lines = stdout.trimEnd().split("\n");
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i]!.trim();
    if (!line.startsWith("{")) continue;
    try {
      const v = JSON.parse(line) as Record<string, unknown>;
      if (v.nonce === nonce && accept(v)) return v;
    } catch {
      // not JSON: noise, keep looking
    }
  }
  return undefined;
}

/** Whether the runner said it was about to start the verifier. */
export function parseStarted(stdout: string, nonce: string): boolean {
  return lastNonceLine(stdout, nonce, (v) => v.started === true) !== undefined;
}

/** The last line that is a JSON verdict carrying our nonce; anything else is ignored. */
export function parseVerdict(stdout: string, nonce: string): RawVerdict | undefined {
  const v = lastNonceLine(stdout, nonce, (x) => typeof x.exit === "number" && typeof x.log_b64 === "string");
  if (!v) return undefined;
  const p = (v.pytest ?? {}) as { sessions?: number; finished?: number; passed?: number; failed?: number; exit_ok?: boolean };
  return {
    nonce,
    exit: v.exit as number,
    timed_out: v.timed_out === true,
    leftover: typeof v.leftover === "number" ? v.leftover : 0,
    pytest: { sessions: p.sessions ?? 0, finished: p.finished ?? 0, passed: p.passed ?? 0, failed: p.failed ?? 0, exitOk: p.exit_ok !== false },
    named: (v.named ?? {}) as Record<string, NamedTestOutcome>,
    violations: Array.isArray(v.violations) ? (v.violations as string[]) : [],
    probes: Array.isArray(v.probes) ? (v.probes as string[]) : [],
    log_b64: v.log_b64 as string,
  };
}
