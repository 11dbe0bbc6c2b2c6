/**
 * One rollout as three stages:
 *   setup    agent container (warm pool or fresh): git history sanitised,
 *            proxy route attached, forwarder listening;
 *   agent    the agent program runs with its limits; detectors read after;
 *   grading  a fresh container from the pristine image gets the agent's file
 *            set (protected paths dropped), the hidden tests and the verdict.
 * Failures are typed: SandboxEnvError → env_error (retried by RolloutRunner,
 * never trained on); the agent's own failures → agent_error or timeout.
 */
import { AgentSandbox, IN_CONTAINER, type RuntimeMount } from "./agent-sandbox.ts";
import { Sandbox, type ExecResult } from "./container.ts";
import { AgentLimitError, SandboxEnvError } from "./errors.ts";
import { SANITIZE_GIT_SCRIPT } from "./git-history.ts";
import { applyWorkspaceChange, lockProtectedFiles, runGrader } from "./grader.ts";
import { networkAttempts, resourceCounters } from "./host-probes.ts";
import { readContainerFileHead } from "./proc-root.ts";
import { ProtectedPaths } from "./protected-paths.ts";
import { moduleNamesOf, shadowingFiles } from "./shadowing.ts";
import type { TarFile } from "./tar.ts";
import { withOverlay, writeGradingFiles, writeOverlay } from "./task-overlay.ts";
import { FORWARDER_PORT, ROUTE_SOCKET } from "./proxy-route.ts";
import type { TaskDefinition } from "./task.ts";
import { WORKSPACE, type AgentRecordFile, type AgentRunRecord, type DefenseFlag, type RolloutOutcome, type SandboxLimits, type SandboxStage } from "./types.ts";
import { diffWorkspace, snapshotOf } from "./workspace-files.ts";

/** What runs in the agent stage: a harness launch line, or a test's scripted agent. */
export interface AgentProgram {
  /** bash script, run in /workspace as the agent user. */
  script: string;
  env?: Record<string, string>;
  /**
   * Files put root-owned under `/` before the script runs (paths relative to
   * `/`, e.g. `solution/solve.sh`: Harbor copies the solution to /solution).
   * Their top folders are ours, not the agent's writes outside the workspace.
   */
  files?: TarFile[];
  /**
   * Files the program writes its own record to (a harness's event stream or
   * trajectory), absolute paths in the container: read back, at most
   * `maxBytes` each, once the stage is over (RolloutOutcome.agentRun).
   */
  recordFiles?: RecordFileSpec[];
}

export interface RecordFileSpec {
  path: string;
  maxBytes: number;
}

export interface RolloutRequest {
  task: TaskDefinition;
  /** Task image tag (from ensureTaskImage). */
  image: string;
  agent: AgentProgram;
  rolloutId: string;
  /** The proxy session's Unix socket; without it the agent has no route out at all. */
  proxySocket?: string;
  /** Overrides task.toml [agent] timeout_sec. */
  agentTimeoutSec?: number;
  /**
   * Asked once the agent stage ends: the proxy session's report of an
   * inference-engine failure during the stage (engine down, refused), or
   * undefined. A failure makes the attempt env_error `engine_unreachable`:
   * the agent was cut off from its model, so its outcome says nothing.
   */
  engineFault?: () => string | undefined;
}

/** Where stage containers come from: the warm pool or a fresh start. */
export interface SandboxSource {
  agent(image: string, rolloutId: string): Promise<AgentSandbox>;
  grading(image: string, rolloutId: string): Promise<Sandbox>;
  /** Removal off the rollout's critical path; the source tracks it until drained. */
  discard(box: AgentSandbox | Sandbox): void;
}

export interface StageConfig {
  limits: SandboxLimits;
  runtimes: RuntimeMount[];
  /** "restore": drop changes to protected paths and grade; "reject": reward 0 without grading. */
  onProtectedChange: "restore" | "reject";
  /** Largest agent workspace (as tar) copied to grading; beyond it the rollout is agent_error. */
  maxWorkspaceBytes: number;
}

/**
 * Files outside the workspace the agent stage changed. Directories on the way
 * to another change, and our own mount points (which `docker diff` lists as
 * added), are not writes.
 */
export function writesOutsideWorkspace(changes: Array<{ path: string; kind: string }>, mountPoints: string[]): string[] {
  const under = (p: string, dir: string) => p === dir || p.startsWith(`${dir}/`);
  const paths = changes
    .map((c) => c.path)
    .filter((p) => !under(p, WORKSPACE) && !mountPoints.some((m) => under(m, p) || under(p, m)));
  return paths.filter((p) => !paths.some((q) => q.startsWith(`${p}/`)));
}

/**
 * Stops every process the agent left. Freezing is preferred (it also stops a
 * fork bomb mid-fork); runc's freezer can give up under heavy load ("unable
 * to freeze"), and then SIGKILL to every process of the agent's uid does the
 * same job (PID 1 is root and survives it). If neither works while the pids
 * limit is being hit, the agent's processes starved even our exec: that is
 * the agent's outcome (resource_limit), not the environment's.
 */
async function quiesce(sb: Sandbox): Promise<void> {
  const onlyDaemonErrors = (e: unknown): undefined => {
    if (!(e instanceof SandboxEnvError) || e.kind !== "daemon_error") throw e;
    return undefined;
  };
  try {
    await sb.pause();
    return;
  } catch (e) {
    onlyDaemonErrors(e);
  }
  const r = await sb.exec(["kill", "-KILL", "-1"], { timeoutMs: 30_000 }).catch(onlyDaemonErrors);
  // kill -1 also kills itself: 137 is its own SIGKILL, i.e. success; 137 at its deadline is a kill that never ran.
  if (r && !r.timedOut && (r.exitCode === 0 || r.exitCode === 137)) return;
  if (resourceCounters(sb.id).pidsLimitHits > 0) {
    throw new AgentLimitError("unkillable_processes", "the agent's processes could be neither frozen nor killed while they held the pids limit", sb.context());
  }
  throw new SandboxEnvError("daemon_error", `could not stop the agent's processes: pause failed and kill ${r ? `exited ${r.exitCode}` : "could not run"}`, sb.context());
}

/**
 * Runs a grading step; a daemon error while the grading container's disk
 * quota is full is the agent's doing, not the environment's: its files can
 * use the agent stage's quota to the last inode or block, and then the copy
 * into grading (which adds the protected files, the tests and the runner)
 * runs out ("no space left on device"). That is agent_error + resource_limit,
 * never a retried env_error.
 */
async function agentFilledDisk<T>(grading: Sandbox, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (e) {
    if (!(e instanceof SandboxEnvError) || e.kind !== "daemon_error") throw e;
    const full: string[] = await grading.fullFilesystems().catch(() => []);
    if (!full.includes("/")) throw e;
    throw new AgentLimitError("disk_quota", `the agent's files fill the grading container's disk quota (${e.message})`, grading.context());
  }
}

/** How much of the program's stdout and stderr its run record keeps (as much as `log` keeps of a verdict). */
const OUTPUT_TAIL_CHARS = 4000;

/** A record file's path must name one place: absolute, no `.`/`..`/empty parts (the program's own constant, checked before anything runs). */
function checkRecordFiles(specs: RecordFileSpec[]): void {
  for (const f of specs) {
    const parts = f.path.split("/");
    if (!f.path.startsWith("/") || parts.slice(1).some((p) => p === "" || p === "." || p === "..") || !(f.maxBytes > 0))
      throw new Error(`AgentProgram.recordFiles: ${JSON.stringify(f)} must be an absolute, normalised path with maxBytes > 0`);
  }
}

/**
 * What the program left: exit, output tails, its record files read from the
 * host through /proc/PID/root (a tmpfs such as /tmp is invisible to Docker's
 * archive API), on the frozen container, bounded, refusing links and FIFOs.
 */
function agentRunRecord(run: ExecResult, pid: number | null, specs: RecordFileSpec[]): AgentRunRecord {
  const read = (f: RecordFileSpec): AgentRecordFile => {
    if (pid === null) return { path: f.path, status: "unreadable", detail: "the agent container had stopped" };
    try {
      const head = readContainerFileHead(pid, f.path, f.maxBytes);
      if (head === undefined) return { path: f.path, status: "absent", detail: "no such file" };
      if (head === null) return { path: f.path, status: "not_a_file", detail: "not a regular file reached through real folders (a link, FIFO, socket or folder)" };
      return { path: f.path, status: "read", text: head.text, bytes: head.size, truncated: head.size > f.maxBytes };
    } catch (e) {
      // The host may not read another container's root (not root, a remote daemon): say so, the outcome stands.
      return { path: f.path, status: "unreadable", detail: `${(e as NodeJS.ErrnoException).code ?? "error"}: ${(e as Error).message}` };
    }
  };
  return {
    exitCode: run.exitCode,
    timedOut: run.timedOut,
    stdoutTail: run.stdout.slice(-OUTPUT_TAIL_CHARS),
    stderrTail: run.stderr.slice(-OUTPUT_TAIL_CHARS),
    files: specs.map(read),
  };
}

/** Pristine /workspace per image. Tags are content hashes, so an entry never goes stale. */
const pristineCache = new Map<string, ReturnType<typeof snapshotOf>>();
const PRISTINE_CACHE_ENTRIES = 32;

async function pristineWorkspace(image: string, fresh: Sandbox): Promise<ReturnType<typeof snapshotOf>> {
  const hit = pristineCache.get(image);
  if (hit) return hit;
  const snap = snapshotOf(await fresh.getFiles(WORKSPACE));
  if (pristineCache.size >= PRISTINE_CACHE_ENTRIES) pristineCache.delete(pristineCache.keys().next().value!);
  pristineCache.set(image, snap);
  return snap;
}

export async function runStages(req: RolloutRequest, source: SandboxSource, cfg: StageConfig): Promise<RolloutOutcome> {
  const flags = new Set<DefenseFlag>();
  const timingsMs: Partial<Record<SandboxStage, number>> = {};
  const recordFiles = req.agent.recordFiles ?? [];
  checkRecordFiles(recordFiles);
  let agentRun: AgentRunRecord | undefined;
  const out = (o: Pick<RolloutOutcome, "status" | "reward"> & Partial<RolloutOutcome>): RolloutOutcome => ({
    defenseFlags: [...flags].sort(),
    attempts: 1,
    timingsMs,
    log: "",
    ...(agentRun ? { agentRun } : {}),
    ...o,
  });
  let box: AgentSandbox | undefined;
  let grading: Sandbox | undefined;
  try {
    // ── setup
    let t = performance.now();
    box = await source.agent(req.image, req.rolloutId);
    const sb = box.sandbox;
    await writeOverlay(sb, req.task);
    const agentFiles = req.agent.files ?? [];
    if (agentFiles.length) await sb.putFiles("/", agentFiles);
    const git = await sb.sh(SANITIZE_GIT_SCRIPT, { timeoutMs: 60_000 });
    if (git.exitCode !== 0) {
      throw new SandboxEnvError("setup_failed", `git sanitise exited ${git.exitCode}: ${git.stderr}`, sb.context());
    }
    const env: Record<string, string> = { ...req.agent.env };
    if (req.proxySocket) {
      await box.route.attach(req.proxySocket);
      const fwd = await sb.exec(["python3", "-I", `${IN_CONTAINER.tools}/forwarder.py`, String(FORWARDER_PORT), `${IN_CONTAINER.proxyDir}/${ROUTE_SOCKET}`], { timeoutMs: 30_000 });
      if (fwd.exitCode !== 0) throw new SandboxEnvError("setup_failed", `proxy forwarder: ${fwd.stderr}`, sb.context());
      env.LEGO_PROXY_URL = `http://127.0.0.1:${FORWARDER_PORT}`;
    }
    timingsMs.setup = performance.now() - t;

    // ── agent
    t = performance.now();
    const limitSec = req.agentTimeoutSec ?? req.task.config.agentTimeoutSec;
    const run = await sb.exec(["bash", "-c", req.agent.script], {
      timeoutMs: limitSec * 1000,
      env: { PATH: `${IN_CONTAINER.tools}/bin:/usr/local/bin:/usr/bin:/bin`, HOME: "/tmp", ...env },
    });
    // The stage is over: nothing the agent left running (a backgrounded process,
    // a fork bomb) may touch the workspace while it is copied out. Freezing the
    // cgroup stops them all at once; copy-out, diff and the host probes work on a
    // paused container, and exec (which a fork bomb could starve) is not needed.
    const { pid, running } = await sb.state();
    if (running) await quiesce(sb);
    agentRun = agentRunRecord(run, running ? pid : null, recordFiles);
    if (box.netGuardArmed && running && (await networkAttempts(pid)) > 0) flags.add("network_attempt");
    const res = resourceCounters(sb.id);
    if (res.pidsLimitHits > 0 || res.oomKills > 0) flags.add("resource_limit");
    if (box.gitProbes().length > 0) flags.add("git_history_probe");
    const full = running ? await sb.fullFilesystems() : [];
    if (full.length) flags.add("resource_limit");
    const ours = [...new Set(agentFiles.map((f) => `/${f.path.split("/")[0]}`))];
    const outside = writesOutsideWorkspace(await sb.changes(), [...box.mountPoints, ...ours]);
    if (outside.length || (running && (await sb.shmUsed()))) flags.add("write_outside_workspace");
    if (outside.some((p) => p.startsWith("/logs/verifier"))) flags.add("grader_spoofing");
    timingsMs.agent = performance.now() - t;
    const engineFault = req.engineFault?.();
    if (engineFault) throw new SandboxEnvError("engine_unreachable", engineFault, sb.context(), "check the inference engine behind the proxy");
    if (run.timedOut) {
      flags.add("timeout");
      return out({ status: "timeout", reward: 0, log: run.stderr.slice(-4000) });
    }
    if (!running) {
      // The agent's processes cannot stop PID 1 (docker-init) short of an OOM kill of it.
      if (res.oomKills > 0) return out({ status: "agent_error", reward: 0 });
      throw new SandboxEnvError("container_died", "agent container stopped during the agent stage", sb.context());
    }
    // The exit status goes last (a record keeps the log's tail): a harness killed by a signal
    // (137 = SIGKILL) leaves no stderr to say what ended it.
    if (run.exitCode !== 0) {
      return out({ status: "agent_error", reward: 0, log: [run.stderr.slice(-4000).trimEnd(), `the agent exited with status ${run.exitCode}`].filter(Boolean).join("\n") });
    }
    if (full.length) return out({ status: "agent_error", reward: 0, log: `the agent filled ${full.join(", ")} (disk quota)` });
    const agentWorkspace = await sb.getFiles(WORKSPACE, cfg.maxWorkspaceBytes);
    source.discard(box);
    box = undefined;

    // ── grading
    t = performance.now();
    grading = await source.grading(req.image, req.rolloutId);
    // Read (or reuse) the image's own workspace before the overlay changes it: the cache is per image.
    const imageWorkspace = await pristineWorkspace(req.image, grading);
    await writeOverlay(grading, req.task);
    const pristine = withOverlay(imageWorkspace, req.task);
    const protectedPaths = ProtectedPaths.forTask(req.task.config.protectedPaths);
    const change = diffWorkspace(pristine, snapshotOf(agentWorkspace), protectedPaths);
    if (change.tampered.length) flags.add("tampered_test_path");
    if (change.escapingLinks.length) flags.add("write_outside_workspace");
    const shadows = shadowingFiles(change.write, pristine, change.remove, await moduleNamesOf(req.image, grading));
    if (shadows.length) flags.add("shadowed_module");
    if (change.tampered.length && cfg.onProtectedChange === "reject") {
      timingsMs.grading = performance.now() - t;
      return out({ status: "agent_error", reward: 0, log: `rejected: changed protected paths ${change.tampered.join(", ")}` });
    }
    const verdict = await agentFilledDisk(grading, async () => {
      await applyWorkspaceChange(grading!, change);
      await lockProtectedFiles(grading!, pristine, protectedPaths);
      await writeGradingFiles(grading!, req.task);
      return runGrader(grading!, req.task);
    });
    timingsMs.grading = performance.now() - t;
    for (const f of verdict.flags) flags.add(f);
    // The code under test filling the disk at grading is the agent's doing too: 0, never an env error.
    const fullAtGrading = await grading.fullFilesystems();
    const gradingRes = resourceCounters(grading.id);
    if (fullAtGrading.length || gradingRes.pidsLimitHits > 0 || gradingRes.oomKills > 0) flags.add("resource_limit");
    if (verdict.timedOut) {
      flags.add("timeout");
      return out({ status: "timeout", reward: 0, log: verdict.log.slice(-4000) });
    }
    // What the runner refused goes first: it is why a tampering rollout scored 0.
    const refused = [...verdict.violations, ...shadows.map((p) => `${p} shadows an installed or standard module`)].map((v) => `grader: ${v}\n`).join("");
    return out({ status: "ok", reward: shadows.length || fullAtGrading.length ? 0 : verdict.reward, log: refused + verdict.log.slice(-4000) });
  } catch (e) {
    if (e instanceof AgentLimitError) {
      flags.add(e.flag);
      return out({ status: "agent_error", reward: 0, log: e.message });
    }
    if (!(e instanceof SandboxEnvError)) throw e;
    return out({ status: "env_error", reward: null, envError: { kind: e.kind, message: e.message } });
  } finally {
    if (box) source.discard(box);
    if (grading) source.discard(grading);
  }
}

