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
import type { TaskDefinition } from "./task.ts";
import type { WorkspaceChange } from "./workspace-files.ts";
import type { ProtectedPaths } from "./protected-paths.ts";
import type { TarEntry } from "./tar.ts";
import { AGENT_UID, WORKSPACE } from "./types.ts";

const RUNNER = readFileSync(new URL("./in-container/grader_runner.py", import.meta.url));
const PLUGIN = readFileSync(new URL("./in-container/lego_verdict.py", import.meta.url));
/** Debian's python3 searches it for modules even under `python3 -I`; root-owned there. */
const SYSTEM_SITE = "usr/lib/python3/dist-packages";

export interface GraderVerdict {
  /** 1 when the verifier exited 0, else 0. */
  reward: number;
  exitCode: number;
  timedOut: boolean;
  /** Verifier output (tail), decoded from the verdict. */
  log: string;
  /**
   * The reward file disagreed with the verdict, the output carried a forged
   * verdict, or the verifier exited 0 while its pytest did not report a
   * finished, all-passed session (its process was ended early).
   */
  spoofed: boolean;
  /** What the verifier's pytest sessions reported through lego_verdict. */
  pytest: PytestReport;
}

export interface PytestReport {
  sessions: number;
  finished: number;
  passed: number;
  failed: number;
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
  const r = await sb.exec(["python3", "-I", "/grader/run.py", String(limit), task.config.verdictPlugin ? "plugin" : "no-plugin", "bash", "/tests/test.sh"], {
    stdin: `${nonce}\n`,
    // The runner enforces `limit`; this outer bound only catches a wedged runner.
    timeoutMs: (limit + 30) * 1000,
    capBytes: 4 << 20,
  });
  const verdict = parseVerdict(r.stdout, nonce);
  if (!verdict) {
    throw new SandboxEnvError("grader_crashed", `no verdict from the grading runner (exit ${r.exitCode}): ${r.stderr.slice(-1000)}`,
      { ...sb.context(), task: task.name }, "run `lego sandbox check` on this task");
  }
  const log = Buffer.from(verdict.log_b64, "base64").toString("utf8");
  const exitOk = verdict.exit === 0 && !verdict.timed_out;
  const p = verdict.pytest;
  // When pytest ran, its own report must agree: every session finished, something passed, nothing failed.
  const pytestOk = p.sessions === 0 || (p.finished === p.sessions && p.passed > 0 && p.failed === 0);
  const reward = exitOk && pytestOk ? 1 : 0;
  const file = await sb.exec(["cat", "/logs/verifier/reward.txt"]);
  const fileReward = file.exitCode === 0 ? Number.parseFloat(file.stdout.trim()) : undefined;
  const spoofed =
    (fileReward !== undefined && fileReward !== reward) || log.includes('"log_b64"') || (exitOk && !pytestOk);
  return { reward, exitCode: verdict.exit, timedOut: verdict.timed_out, log, spoofed, pytest: p };
}

interface RawVerdict {
  nonce: string;
  exit: number;
  timed_out: boolean;
  pytest: PytestReport;
  log_b64: string;
}

/** The last line that is a JSON verdict carrying our nonce; anything else is ignored. */
export function parseVerdict(stdout: string, nonce: string): RawVerdict | undefined {
  const lines = stdout.trimEnd().split("\n");
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i]!.trim();
    if (!line.startsWith("{")) continue;
    try {
      const v = JSON.parse(line) as Partial<RawVerdict>;
      if (v.nonce === nonce && typeof v.exit === "number" && typeof v.log_b64 === "string") {
        const p = v.pytest ?? { sessions: 0, finished: 0, passed: 0, failed: 0 };
        return { nonce: v.nonce, exit: v.exit, timed_out: v.timed_out === true, pytest: p, log_b64: v.log_b64 };
      }
    } catch {
      // not JSON: verifier noise, keep looking
    }
  }
  return undefined;
}
