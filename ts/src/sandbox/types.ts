/**
 * Domain names shared by the sandbox modules. The trajectory `status` and
 * `defense_flags` strings match the cross-language record in `schemas/`
 * (status ∈ ok | agent_error | timeout | env_error; flags are plain strings).
 */

/** A rollout runs three stages, each in its own container. */
export type SandboxStage = "setup" | "agent" | "grading";

/** Outcome kinds, exactly the trajectory `status` strings of the schema. */
export type OutcomeStatus = "ok" | "agent_error" | "timeout" | "env_error";

/**
 * A defense that fired. The first five are the names the schema documents;
 * the rest are ours and listed in docs/sandbox.md.
 */
export type DefenseFlag =
  | "tampered_test_path" // agent changed a protected path (tests, conftest, sitecustomize, .pth, CI)
  | "network_attempt" // agent stage sent a packet to anything but loopback
  | "git_history_probe" // agent ran git commands that hunt history (log --all, reflog, fsck …)
  | "grader_spoofing" // agent wrote the verifier reward file or printed a fake verdict
  | "timeout" // a stage ran past its limit
  | "write_outside_workspace" // agent stage changed files outside /workspace and /tmp
  | "resource_limit"; // agent stage hit the memory or pids limit (OOM kill, fork refused)

/** Why the environment (not the agent) failed; the rollout is retried, never trained on. */
export type EnvErrorKind =
  | "image_build_failed"
  | "container_died"
  | "daemon_error"
  | "grader_crashed"
  | "daemon_unreachable" // the Docker daemon's socket refused or is missing
  | "engine_unreachable" // the inference engine behind the agent's proxy session failed
  | "setup_failed";

/** What one rollout produced. `reward` is only meaningful when status is "ok". */
export interface RolloutOutcome {
  status: OutcomeStatus;
  /** Reward from the grader's own verdict; 0 for agent_error/timeout; null for env_error. */
  reward: number | null;
  defenseFlags: DefenseFlag[];
  /** Present when status is env_error. */
  envError?: { kind: EnvErrorKind; message: string };
  /** How many attempts ran (env_error retries included). */
  attempts: number;
  /** Wall time per stage in ms. */
  timingsMs: Partial<Record<SandboxStage, number>>;
  /**
   * Tail of the output that decided the outcome: the verifier's output when
   * graded, the agent's stderr for agent_error/timeout, the limit hit otherwise.
   */
  log: string;
}

/** Resource limits applied to every task container (HostConfig). */
export interface SandboxLimits {
  /** CPUs (fractional allowed), mapped to NanoCpus. */
  cpus: number;
  /** Memory limit in bytes; swap is set equal so the limit is hard. */
  memoryBytes: number;
  /** Maximum number of processes/threads in the container (fork bombs stop here). */
  pids: number;
}

export const DEFAULT_LIMITS: SandboxLimits = {
  cpus: 1,
  memoryBytes: 512 * 1024 * 1024,
  pids: 256,
};

/** Labels put on every container and image we own, so the reaper and GC can find them. */
export const LABEL = {
  owner: "lego-rl.owner",
  run: "lego-rl.run",
  rollout: "lego-rl.rollout",
  stage: "lego-rl.stage",
  /** PID of the process that created the container, to decide whether its run is dead. */
  pid: "lego-rl.pid",
  host: "lego-rl.host",
  pool: "lego-rl.pool",
  /** On images: the kind (base | task) and the hashed inputs' summary. */
  imageKind: "lego-rl.image-kind",
  task: "lego-rl.task",
} as const;

export const OWNER = "lego-rl";

/** Non-root user every task process runs as (created in the base image). */
export const AGENT_UID = 1000;
export const AGENT_USER = "agent";
export const WORKSPACE = "/workspace";
