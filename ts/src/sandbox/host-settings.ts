/**
 * Process-wide sandbox settings: where host-side image records live, where
 * base images are bootstrapped, and this process's run id. Library code reads
 * them from here, never from the environment; an entry point (the `lego` CLI,
 * a test fixture process) builds them once, from its environment or flags,
 * with `configureSandboxHost` before the first sandbox call.
 */
import { homedir } from "node:os";
import { join } from "node:path";

export interface SandboxHostSettings {
  /** Folder of usage.json and quarantine.json (image-state.ts) and the build locks. */
  readonly stateDir: string;
  /** Parent folder of debootstrap's scratch trees (base-image.ts). */
  readonly buildTmp: string;
  /** Run id labelled on this process's containers; null draws a fresh `run-XXXXXXXX`. */
  readonly runId: string | null;
  /** ssh-agent socket for `ssh://` Docker endpoints (`--docker-host`); null: none. */
  readonly sshAgent: string | null;
  /**
   * Quota filesystems kept ready per quota size (quota-pool.ts), so a start
   * does not make its own; 0 makes each one in place at start.
   */
  readonly quotaPoolSize: number;
  /**
   * Task containers (all stages but grading) run execd as their main process and take agent-user
   * commands through it instead of `docker exec` (in-container/execd.c); false runs every command
   * through `docker exec`, as before it existed.
   */
  readonly execServer: boolean;
}

export const DEFAULT_SANDBOX_HOST: SandboxHostSettings = {
  stateDir: join(homedir(), ".cache/lego-rl/sandbox"),
  buildTmp: "/var/tmp",
  runId: null,
  sshAgent: null,
  quotaPoolSize: 4,
  execServer: true,
};

let settings: SandboxHostSettings = DEFAULT_SANDBOX_HOST;

/** Sets the fields given; the rest keep their current values. Returns the settings before the call. */
export function configureSandboxHost(changes: Partial<SandboxHostSettings>): SandboxHostSettings {
  const before = settings;
  settings = { ...settings, ...changes };
  return before;
}

export function sandboxHost(): SandboxHostSettings {
  return settings;
}

/**
 * The settings an entry point's environment names (LEGO_SANDBOX_STATE,
 * LEGO_BUILD_TMP, LEGO_RUN_ID, and SSH_AUTH_SOCK for ssh:// Docker hosts); unset or empty variables keep the defaults.
 */
export function sandboxHostFromEnv(env: Readonly<Record<string, string | undefined>>): Partial<SandboxHostSettings> {
  const changes: { -readonly [K in keyof SandboxHostSettings]?: SandboxHostSettings[K] } = {};
  if (env["LEGO_SANDBOX_STATE"]) changes.stateDir = env["LEGO_SANDBOX_STATE"];
  if (env["LEGO_BUILD_TMP"]) changes.buildTmp = env["LEGO_BUILD_TMP"];
  if (env["LEGO_RUN_ID"]) changes.runId = env["LEGO_RUN_ID"];
  if (env["SSH_AUTH_SOCK"]) changes.sshAgent = env["SSH_AUTH_SOCK"];
  return changes;
}
