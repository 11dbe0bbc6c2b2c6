/**
 * Grading in a fresh container from the pristine task image:
 *   1. apply the agent's file set (protected paths already dropped);
 *   2. copy in the hidden tests (root-owned, read-only to the agent's uid);
 *   3. run the verifier under the trusted runner (in-container/grader_runner.py,
 *      as root; the verifier as the agent) and read the reward from the
 *      runner's nonce-tagged verdict line (verdict.ts).
 * The verifier's reward file (Harbor's /logs/verifier/reward.txt) is only
 * compared with the verdict: a disagreement is grader spoofing.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Sandbox } from "./container.ts";
import { SandboxEnvError } from "./errors.ts";
import { filesOfDir } from "./tar.ts";
import { namedTests, type TaskDefinition } from "./task.ts";
import type { WorkspaceChange } from "./workspace-files.ts";
import type { ProtectedPaths } from "./protected-paths.ts";
import type { TarEntry } from "./tar.ts";
import { AGENT_UID, WORKSPACE, type DefenseFlag } from "./types.ts";
import { decideReward, lastNonceLine, parseStarted, parseVerdict, type NamedTestOutcome, type PytestReport } from "./verdict.ts";


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

