import type { DefenseFlag, EnvErrorKind } from "./types.ts";

/** Where in the system an error happened, so an operator can act on it. */
export interface SandboxErrorContext {
  task?: string;
  rollout?: string;
  container?: string;
  image?: string;
  stage?: string;
}

function where(ctx: SandboxErrorContext): string {
  const parts = Object.entries(ctx)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}=${v}`);
  return parts.length ? ` [${parts.join(" ")}]` : "";
}

/**
 * The environment failed (not the agent): image build, daemon, dead container,
 * crashed grader. Rollouts that end in one are retried and never trained on.
 */
export class SandboxEnvError extends Error {
  constructor(
    readonly kind: EnvErrorKind,
    message: string,
    readonly context: SandboxErrorContext = {},
    /** What the operator should do about it. */
    readonly hint?: string,
    options?: { cause?: unknown },
  ) {
    super(`${kind}: ${message}${where(context)}${hint ? ` — ${hint}` : ""}`, options);
    this.name = "SandboxEnvError";
  }
}

/**
 * The agent broke a limit the sandbox enforces outside the container (for
 * example a workspace too large to copy out). An agent outcome, not an env error.
 */
export class AgentLimitError extends Error {
  constructor(
    readonly limit: string,
    message: string,
    readonly context: SandboxErrorContext = {},
    /** The defense flag the rollout carries (resource_limit, pathological_tree). */
    readonly flag: DefenseFlag = "resource_limit",
  ) {
    super(`${limit}: ${message}${where(context)}`);
    this.name = "AgentLimitError";
  }
}

/** A task directory is malformed (missing files, bad task.toml). Not retried. */
export class TaskFormatError extends Error {
  constructor(
    readonly taskDir: string,
    readonly field: string,
    message: string,
  ) {
    super(`task ${taskDir}: ${field}: ${message}`);
    this.name = "TaskFormatError";
  }
}

export function isSandboxEnvError(e: unknown): e is SandboxEnvError {
  return e instanceof SandboxEnvError;
}

/**
 * Wraps a dockerode failure as a typed env error. A failed connection to the
 * socket is `daemon_unreachable`; anything the daemon answered with an error
 * is `daemon_error`.
 */
export function daemonError(e: unknown, what: string, ctx: SandboxErrorContext = {}): SandboxEnvError {
  if (e instanceof SandboxEnvError) return e;
  const msg = e instanceof Error ? e.message : String(e);
  const code = (e as { code?: string } | null)?.code;
  const unreachable = code === "ENOENT" || code === "ECONNREFUSED" || code === "EACCES";
  return new SandboxEnvError(
    unreachable ? "daemon_unreachable" : "daemon_error",
    `${what}: ${msg}`,
    ctx,
    unreachable ? "the Docker daemon is unreachable: check /var/run/docker.sock and DOCKER_HOST" : undefined,
    { cause: e },
  );
}
