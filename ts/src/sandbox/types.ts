/**
 * Domain names shared by the sandbox modules. Outcome statuses and defense
 * flags are the schema's vocabulary (schemas/records.toml: TrajectoryStatus,
 * DefenseFlag, EnvErrorKind), never re-typed here; docs/sandbox.md says what raises each flag.
 */
import type { DefenseFlag, EnvErrorKind, TrajectoryStatus } from "../schema/index.ts";

export type { DefenseFlag } from "../schema/index.ts";
export { DEFENSE_FLAG_VALUES } from "../schema/index.ts";

/** A rollout runs three stages, each in its own container. */
export type SandboxStage = "setup" | "agent" | "grading";

/** Outcome kinds, exactly the trajectory `status` strings of the schema. */
export type OutcomeStatus = TrajectoryStatus;

/** Why the environment (not the agent) failed: the schema's EnvErrorKind; the rollout is retried, never trained on. */
export type { EnvErrorKind } from "../schema/index.ts";
export { ENV_ERROR_KIND_VALUES } from "../schema/index.ts";

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
  /** What the agent stage's program itself left (exit, output tails, its record files); absent when the stage never ran it. */
  agentRun?: AgentRunRecord;
}

/**
 * The agent program's own account of its run, as the sandbox saw it. Every
 * byte of it is the agent's to shape (it controls the container): the files
 * are read bounded, through real folders only, never following a link.
 */
export interface AgentRunRecord {
  exitCode: number;
  timedOut: boolean;
  /** The last characters of its stdout and stderr. */
  stdoutTail: string;
  stderrTail: string;
  /** The program's record files (AgentProgram.recordFiles), in the order it named them. */
  files: AgentRecordFile[];
}

export type AgentRecordFile =
  /** `text` is the file's first `maxBytes` as UTF-8; `bytes` its whole size. */
  | { path: string; status: "read"; text: string; bytes: number; truncated: boolean }
  /** Nothing there; something that is not a regular file reached through real folders (a link, a FIFO); or the host could not read it. */
  | { path: string; status: "absent" | "not_a_file" | "unreadable"; detail: string };

/** Resource limits applied to every task container (HostConfig). */
export interface SandboxLimits {
  /** CPUs (fractional allowed), mapped to NanoCpus. */
  cpus: number;
  /** Memory limit in bytes; swap is set equal so the limit is hard. */
  memoryBytes: number;
  /** Maximum number of processes/threads in the container (fork bombs stop here). */
  pids: number;
  /**
   * Disk quota of the container's writable layer (every write outside /tmp
   * and /dev/shm: /workspace, /home, /var/tmp …), enforced by the kernel
   * (disk-quota.ts). 0 turns it off (a host without root or loop devices).
   */
  diskBytes: number;
  /** Size of the /tmp tmpfs (HOME; counted against memoryBytes). */
  tmpBytes: number;
  /** Size of the /dev/shm tmpfs (counted against memoryBytes). */
  shmBytes: number;
}

export const DEFAULT_LIMITS: SandboxLimits = {
  cpus: 1,
  memoryBytes: 512 * 1024 * 1024,
  pids: 256,
  diskBytes: 1024 * 1024 * 1024,
  tmpBytes: 128 * 1024 * 1024,
  shmBytes: 64 * 1024 * 1024,
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
