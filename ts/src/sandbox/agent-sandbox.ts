/**
 * The agent-stage container and its host-side attachments:
 *  /opt/lego            read-only: git shim, proxy forwarder
 *  /opt/lego-runtimes   read-only: mounted harness runtimes
 *  /run/lego-proxy      read-only: this container's slot; the proxy route's socket appears here
 * Nothing host-side is writable from inside: the git shim's log lives in the
 * container's size-capped /tmp and the host reads it through /proc/PID/root.
 * Slots are created before the container, so a warm-pool container can be
 * bound to a proxy session later without a new mount.
 */
import { createHash } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, type BindMount } from "./container.ts";
import { sandboxHost } from "./host-settings.ts";
import { sharedFolder } from "./owned-path.ts";
import { armNetworkGuard } from "./host-probes.ts";
import { readContainerFile } from "./proc-root.ts";
import { ProxyRoute } from "./proxy-route.ts";
import type { SandboxLimits } from "./types.ts";

const HERE = new URL("./in-container/", import.meta.url).pathname;
/** The probe log is read up to this size (the shim appends one line per probe). */
const GIT_PROBE_LOG_BYTES = 64 << 10;

/** A harness runtime (Node + an npm harness, a Python venv) mounted read-only, never installed. */
export interface RuntimeMount {
  name: string;
  hostPath: string;
}

export interface AgentSandboxConfig {
  image: string;
  rolloutId: string;
  limits?: SandboxLimits;
  runtimes?: RuntimeMount[];
}

export const IN_CONTAINER = {
  tools: "/opt/lego",
  proxyDir: "/run/lego-proxy",
  /** Written by the git shim (see in-container/git-shim.sh). */
  gitProbeLog: "/tmp/.lego-audit/git-probes.log",
  runtimes: "/opt/lego-runtimes",
} as const;

/**
 * Host folder with the in-container tools, named by a hash of their content
 * so every process of this user shares one copy (created atomically by
 * rename), under the sandbox's state directory: ours alone (owned-path.ts).
 */
function hostToolsDir(): string {
  const shim = readFileSync(join(HERE, "git-shim.sh"));
  const fwd = readFileSync(join(HERE, "forwarder.py"));
  const hash = createHash("sha256").update(shim).update(fwd).digest("hex").slice(0, 16);
  return sharedFolder(join(sandboxHost().stateDir, "tools"), hash, ["bin/git", "forwarder.py"], (tmp) => {
    mkdirSync(join(tmp, "bin"));
    writeFileSync(join(tmp, "bin/git"), shim, { mode: 0o755 });
    writeFileSync(join(tmp, "forwarder.py"), fwd, { mode: 0o644 });
  });
}

export class AgentSandbox {
  readonly route: ProxyRoute;

  private constructor(
    readonly sandbox: Sandbox,
    readonly slotDir: string,
    readonly netGuardArmed: boolean,
    /** Host pid of the container's init: /proc/PID/root is its filesystem view. */
    readonly pid: number,
    /** Container paths we mounted (docker diff lists them; they are not agent writes). */
    readonly mountPoints: string[],
  ) {
    this.route = new ProxyRoute(join(slotDir, "proxy"));
  }

  static async start(cfg: AgentSandboxConfig): Promise<AgentSandbox> {
    const slot = mkdtempSync(join(tmpdir(), "lego-slot-"));
    mkdirSync(join(slot, "proxy"));
    chmodSync(slot, 0o755);
    chmodSync(join(slot, "proxy"), 0o755);
    const mounts: BindMount[] = [
      { hostPath: hostToolsDir(), containerPath: IN_CONTAINER.tools, readOnly: true },
      { hostPath: join(slot, "proxy"), containerPath: IN_CONTAINER.proxyDir, readOnly: true },
      ...(cfg.runtimes ?? []).map((r) => ({ hostPath: r.hostPath, containerPath: `${IN_CONTAINER.runtimes}/${r.name}`, readOnly: true })),
    ];
    let sandbox: Sandbox;
    try {
      sandbox = await Sandbox.start({
        image: cfg.image,
        rolloutId: cfg.rolloutId,
        stage: "agent",
        mounts,
        ...(cfg.limits ? { limits: cfg.limits } : {}),
        env: { PATH: `${IN_CONTAINER.tools}/bin:/usr/local/bin:/usr/bin:/bin` },
      });
    } catch (e) {
      rmSync(slot, { recursive: true, force: true });
      throw e;
    }
    try {
      const { pid } = await sandbox.state();
      return new AgentSandbox(sandbox, slot, await armNetworkGuard(pid), pid, [...mounts.map((m) => m.containerPath), ...sandbox.ownMountPoints(), "/tmp"]);
    } catch (e) {
      // Started but not inspectable (the daemon went away; armNetworkGuard itself never throws): nobody
      // else holds the container or the slot.
      await sandbox.remove().catch(() => {});
      rmSync(slot, { recursive: true, force: true });
      throw e;
    }
  }

  /**
   * Commands the git shim recorded as history probes, read from the host on
   * the frozen container. The log lies in the agent's /tmp: a FIFO or a link
   * put there is not read (see proc-root.ts), and counts as a probe.
   */
  gitProbes(): string[] {
    try {
      const log = readContainerFile(this.pid, IN_CONTAINER.gitProbeLog, GIT_PROBE_LOG_BYTES);
      // Something other than the shim's file there is the agent hiding its probes.
      if (log === null) return [`${IN_CONTAINER.gitProbeLog} was replaced by something other than a file`];
      return (log ?? "").split("\n").filter(Boolean);
    } catch {
      return []; // not root on the host: the detector is silent
    }
  }

  async remove(): Promise<void> {
    await this.route.close();
    try {
      await this.sandbox.remove();
    } finally {
      rmSync(this.slotDir, { recursive: true, force: true });
    }
  }
}
